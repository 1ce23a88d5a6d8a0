"""The disk cache of ``C0``'s eigendecomposition (engine/stats/eigen_cache.py) and its use by ZeroUnlearn-GD's
solver: the same bits as computing it, a new entry for a changed ``C0``, damaged entries recomputed."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tiny_models import tiny_hparams_dict, write_corpus
from zerounlearn_editor import ZeroUnlearnGDHyperParams
from zerounlearn_editor.engine.pipeline import LayerProblem
from zerounlearn_editor.engine.stats.eigen_cache import EIGH_FOLDER, MIN_CACHED_DIM, EigenCache, eigh_key
from zerounlearn_editor.methods.zerounlearn_gd.method import zerounlearn_gd_solver
from zerounlearn_editor.methods.zerounlearn_gd.solve import nullspace_basis, nullspace_split, symmetric_eigenpairs

THRESHOLD = 1e-6


def low_rank_psd(d: int, rank: int, seed: int = 0) -> torch.Tensor:
    """A float64 ``[d, d]`` PSD matrix of rank ``rank`` (a null space of dimension ``d - rank``)."""
    g = torch.Generator().manual_seed(seed)
    K = torch.randn(d, rank, generator=g, dtype=torch.float64)
    return K @ K.T / rank


class Counting:
    """:func:`symmetric_eigenpairs`, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, C0: torch.Tensor):
        self.calls += 1
        return symmetric_eigenpairs(C0)


def cached_basis(cache: EigenCache, C0: torch.Tensor, compute: Counting):
    return nullspace_split(*cache.eigenpairs(C0, compute), THRESHOLD)


def assert_same_bits(got, want) -> None:
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w)


def test_a_cached_entry_gives_the_bits_of_the_uncached_basis(tmp_path):
    C0 = low_rank_psd(48, 20)
    want = nullspace_basis(C0, THRESHOLD)
    compute = Counting()
    cache = EigenCache(tmp_path / EIGH_FOLDER, min_dim=1)
    first = cached_basis(cache, C0, compute)
    assert compute.calls == 1
    assert [p.name for p in cache.folder.iterdir()] == [f"eigh_{eigh_key(C0, compute)}.npz"]  # no temp file left
    second = cached_basis(EigenCache(tmp_path / EIGH_FOLDER, min_dim=1), C0.clone(), compute)
    assert compute.calls == 1  # read back, not computed
    assert want[0].shape[1] == 28
    assert_same_bits(first, want)
    assert_same_bits(second, want)
    # the eigenpairs are cached, not a thresholded basis: another threshold reads the same entry
    other = nullspace_split(*cache.eigenpairs(C0, compute), 1e-2)
    assert compute.calls == 1
    assert_same_bits(other, nullspace_basis(C0, 1e-2))


def test_a_changed_C0_never_reads_the_old_entry(tmp_path):
    C0 = low_rank_psd(48, 20)
    compute = Counting()
    cache = EigenCache(tmp_path / EIGH_FOLDER, min_dim=1)
    cached_basis(cache, C0, compute)
    changed = C0.clone()
    bumped = torch.nextafter(changed[3, 5], torch.tensor(np.inf, dtype=torch.float64))
    changed[3, 5] = changed[5, 3] = bumped  # one ulp, still symmetric
    assert eigh_key(changed, compute) != eigh_key(C0, compute)
    got = cached_basis(cache, changed, compute)
    assert compute.calls == 2
    assert_same_bits(got, nullspace_basis(changed, THRESHOLD))
    assert len(list(cache.folder.glob("eigh_*.npz"))) == 2


def _truncate(path: Path, other: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_a_byte(path: Path, other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the eigenvectors' array
    path.write_bytes(bytes(data))


def _alter_an_eigenvector(path: Path, other: Path) -> None:
    with np.load(path, allow_pickle=False) as stored:
        arrays = {k: stored[k] for k in stored.files}
    arrays["evecs"] = arrays["evecs"].copy()
    arrays["evecs"][0, 0] += 1e-3  # a whole, readable file whose arrays no longer match their SHA-256
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _another_entry(path: Path, other: Path) -> None:
    path.write_bytes(other.read_bytes())  # a valid entry, of another C0


def _not_an_entry(path: Path, other: Path) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, evals=np.zeros(3))


@pytest.mark.parametrize("damage", [_truncate, _flip_a_byte, _alter_an_eigenvector, _another_entry, _not_an_entry])
def test_a_damaged_entry_is_recomputed_and_written_again(tmp_path, caplog, damage):
    C0, other = low_rank_psd(40, 12), low_rank_psd(40, 12, seed=1)
    compute = Counting()
    cache = EigenCache(tmp_path / EIGH_FOLDER, min_dim=1)
    cached_basis(cache, C0, compute)
    cached_basis(cache, other, compute)
    damage(cache.path(eigh_key(C0, compute)), cache.path(eigh_key(other, compute)))
    with caplog.at_level(logging.WARNING, logger="zerounlearn_editor.engine.stats.eigen_cache"):
        got = cached_basis(cache, C0, compute)
    assert compute.calls == 3
    assert str(cache.path(eigh_key(C0, compute))) in caplog.text and "recomputing" in caplog.text
    assert_same_bits(got, nullspace_basis(C0, THRESHOLD))
    cached_basis(cache, C0, compute)  # the rewritten entry reads back
    assert compute.calls == 3


def test_an_unwritable_cache_still_gives_the_basis(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    C0 = low_rank_psd(32, 10)
    compute = Counting()
    cache = EigenCache(blocker / EIGH_FOLDER, min_dim=1)
    assert_same_bits(cached_basis(cache, C0, compute), nullspace_basis(C0, THRESHOLD))
    assert_same_bits(cached_basis(cache, C0, compute), nullspace_basis(C0, THRESHOLD))
    assert compute.calls == 2


def test_small_matrices_pass_through_uncached(tmp_path):
    cache = EigenCache(tmp_path / EIGH_FOLDER)
    compute = Counting()
    cached_basis(cache, low_rank_psd(MIN_CACHED_DIM - 1, 8), compute)
    assert compute.calls == 1 and not cache.folder.exists()


def _gd_hparams(tmp_path: Path, stats_dir: Path, **changes) -> ZeroUnlearnGDHyperParams:
    config = tiny_hparams_dict(stats_dir, write_corpus(tmp_path / "c.jsonl"), alg_name="ZeroUnlearn-GD",
                               nullspace_threshold=THRESHOLD, solver="exact")
    config.update(changes)
    return ZeroUnlearnGDHyperParams.from_dict(config)


def _problem(d_in: int, with_retain: bool) -> LayerProblem:
    g = torch.Generator().manual_seed(3)
    W = torch.randn(24, d_in, generator=g, dtype=torch.float64)
    K_f = torch.randn(d_in, 4, generator=g, dtype=torch.float64)
    M_n = torch.randn(24, 4, generator=g, dtype=torch.float64)
    K_r = torch.randn(d_in, 3, generator=g, dtype=torch.float64) if with_retain else None
    return LayerProblem(1, W, K_f, M_n, low_rank_psd(d_in, d_in - 40), K_r)


def test_the_gd_solver_caches_C0s_eigenpairs_beside_the_statistics(tmp_path, monkeypatch):
    compute = Counting()
    monkeypatch.setattr("zerounlearn_editor.methods.zerounlearn_gd.method.symmetric_eigenpairs", compute)
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    problem = _problem(MIN_CACHED_DIM, with_retain=False)
    uncached = zerounlearn_gd_solver(_gd_hparams(tmp_path, tmp_path / "absent"))(problem)
    solve = zerounlearn_gd_solver(_gd_hparams(tmp_path, stats_dir))
    first = solve(problem)
    entries = list((stats_dir / EIGH_FOLDER).glob("eigh_*.npz"))
    assert [p.name for p in entries] == [f"eigh_{eigh_key(problem.C0, compute)}.npz"]
    assert entries[0].stat().st_size > MIN_CACHED_DIM ** 2 * 8
    second = solve(problem)  # read from the entry
    assert compute.calls == 1
    assert not torch.equal(first, problem.W)
    assert torch.equal(first, uncached) and torch.equal(second, uncached)
    assert not (tmp_path / "absent").exists()


def test_a_retain_term_is_never_cached(tmp_path):
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    problem = _problem(MIN_CACHED_DIM, with_retain=True)
    hparams = _gd_hparams(tmp_path, stats_dir, retain_nullspace_weight=1.0)
    got = zerounlearn_gd_solver(hparams)(problem)
    assert not (stats_dir / EIGH_FOLDER).exists()
    assert torch.equal(got, zerounlearn_gd_solver(_gd_hparams(tmp_path, tmp_path / "absent",
                                                              retain_nullspace_weight=1.0))(problem))


def test_the_key_names_the_computing_function_and_the_platform(monkeypatch):
    """Another eigendecomposition function, thread count or MKL code path (a stats_dir copied from another machine)
    never reads an entry computed by another."""
    C0 = low_rank_psd(48, 20)
    compute = Counting()
    key = eigh_key(C0, compute)
    assert eigh_key(C0, Counting()) == key  # the same function: the same key
    assert eigh_key(C0, torch.linalg.eigh) != key
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    assert eigh_key(C0, compute) != key
    monkeypatch.delenv("MKL_CBWR")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert eigh_key(C0, compute) != key
    finally:
        torch.set_num_threads(threads)
    assert eigh_key(C0, compute) == key
