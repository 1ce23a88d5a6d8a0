"""What earlier edits forgot, as the small state lifelong unlearning carries from edit to edit.

Per edited layer the state holds ``S = sum_i k_i k_i^T`` ``[d_in, d_in]`` (float64) over the forget keys ``k_i``
of every earlier edit and the number of facts folded in: no activations of individual facts. ZeroUnlearn-GD
with ``experimental.forgotten_protection_weight = lam > 0`` adds ``lam * S`` to the covariance whose null space its
update lives in (:func:`~zerounlearn_editor.methods.zerounlearn_gd.solve.protected_covariance`), so round ``k``
leaves the values of the keys rounds ``1..k-1`` forgot (nearly) where they are.

Pure functions of tensors plus (de)serialisation: :func:`save_state` writes one safetensors file whose
metadata names the module template, layers, count and format; :func:`load_state` checks its sha256 (when
given), metadata, shapes and values. Within a process the state travels on the model object
(:func:`model_state` / :func:`attach_state`, an attribute: nothing module-level), with a digest of the
edited weights it belongs to (:func:`edited_weights_digest`) and the keys of this process's edits: weights
restored to those before an edit take that edit and the later ones out of the state (:func:`undo_to`; edit A,
edit B, B's weights restored: A's state), weights changed otherwise make it stale (:func:`current_state` drops it
with a warning).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from zerounlearn_editor.support.files import sha256_of_file, write_bytes_atomic
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

LOG = logging.getLogger(__name__)

STATE_FORMAT = "zerounlearn-forgotten-state/1"
"""The ``format`` metadata of a state file; another value is refused."""
STATE_FILE = "forgotten_state.safetensors"
"""The state's file name in a saved model or adapter folder."""
MODEL_ATTRIBUTE = "_zerounlearn_forgotten_state"
"""The attribute of a model object that carries its state between edits of one process."""
_DIGEST_SAMPLES = 4096
_SYMMETRY_TOL = 1e-9


class ForgottenStateError(ValueError):
    """A state (or its file) is malformed or does not belong to this edit (the message says why)."""


@dataclass(frozen=True)
class EditRecord:
    """One edit folded into a state, enough to take it out again: the weights' digest before it, its forget keys
    ``keys[layer]`` ``[d_in, n]`` (float64, CPU; small beside the ``[d_in, d_in]`` moments) and its ``count`` facts."""

    digest_before: str
    keys: Mapping[int, torch.Tensor]
    count: int


@dataclass(frozen=True)
class ForgottenState:
    """``moments[layer]`` ``[d_in, d_in]`` float64 (CPU): ``sum k k^T`` over the forget keys of ``count`` facts
    at module ``module_tmp.format(layer)``; ``weights_digest``: :func:`edited_weights_digest` of the model the
    state was last updated on (``""``: unknown), ``previous_digest`` the one before that update. ``history``: the
    edits of this process folded in, oldest first (:func:`undo_to` takes the latest ones out when their weights
    are restored; a state read from a file has none)."""

    module_tmp: str
    layers: Tuple[int, ...]
    moments: Mapping[int, torch.Tensor]
    count: int
    weights_digest: str = ""
    # the digest of the weights before the last update: equal weights mean the last edit was undone
    previous_digest: str = ""
    history: Tuple[EditRecord, ...] = ()

    def validate(self, source: str = "forgotten state") -> "ForgottenState":
        """Check layers, shapes, symmetry, finiteness, a non-negative diagonal and the count; return self."""
        if not isinstance(self.count, int) or self.count < 0:
            raise ForgottenStateError(f"{source}: count must be an integer >= 0, got {self.count!r}")
        if sorted(self.moments) != sorted(self.layers) or len(set(self.layers)) != len(self.layers):
            raise ForgottenStateError(
                f"{source}: layers {list(self.layers)} but moments for layers {sorted(self.moments)}")
        for layer in self.layers:
            S = self.moments[layer]
            if not isinstance(S, torch.Tensor) or S.dim() != 2 or S.shape[0] != S.shape[1]:
                raise ForgottenStateError(f"{source}: layer {layer}: not a square matrix "
                                          f"({tuple(S.shape) if isinstance(S, torch.Tensor) else type(S).__name__})")
            if S.dtype != torch.float64:
                raise ForgottenStateError(f"{source}: layer {layer}: dtype {S.dtype}, expected float64")
            if not bool(torch.isfinite(S).all()):
                raise ForgottenStateError(f"{source}: layer {layer}: non-finite values")
            scale = max(1.0, float(S.abs().max())) if S.numel() else 1.0
            if S.numel() and float((S - S.T).abs().max()) > _SYMMETRY_TOL * scale:
                raise ForgottenStateError(f"{source}: layer {layer}: not symmetric")
            if S.numel() and float(S.diagonal().min()) < -_SYMMETRY_TOL * scale:
                raise ForgottenStateError(f"{source}: layer {layer}: negative diagonal (not a sum of k k^T)")
        return self

    def is_empty(self) -> bool:
        return self.count == 0

    def check_compatible(self, module_tmp: str, layers: Sequence[int], source: str = "forgotten state") -> None:
        """Refuse a state of another module template or layer set (:class:`ForgottenStateError`, naming both)."""
        if module_tmp != self.module_tmp or sorted(layers) != sorted(self.layers):
            raise ForgottenStateError(
                f"{source} was built for {self.module_tmp!r} layers {list(self.layers)}; this edit changes "
                f"{module_tmp!r} layers {list(layers)}: the protection of earlier forgotten facts needs the same "
                "edited modules (use the hparams of the earlier edits)")


def empty_state(module_tmp: str, layers: Sequence[int], dims: Mapping[int, int]) -> ForgottenState:
    """A state with zero moments ``[d_in, d_in]`` (``dims[layer] = d_in``) over 0 facts."""
    return ForgottenState(module_tmp, tuple(layers), {l: torch.zeros(dims[l], dims[l], dtype=torch.float64)
                                                      for l in layers}, 0)


def key_moment(K_f: torch.Tensor) -> torch.Tensor:
    """``K_f K_f^T`` ``[d_in, d_in]`` float64 (CPU) of forget keys ``K_f`` ``[d_in, n]``."""
    if K_f.dim() != 2:
        raise ValueError(f"K_f must be [d_in, n], got shape {tuple(K_f.shape)}")
    K = K_f.detach().to(dtype=torch.float64)
    return (K @ K.T).cpu()


def add_keys(state: ForgottenState, moments: Mapping[int, torch.Tensor], n: int,
             weights_digest: str = "", previous_digest: str = "",
             keys: Optional[Mapping[int, torch.Tensor]] = None) -> ForgottenState:
    """A new state: ``state`` plus one edit's ``moments[layer] = K_f K_f^T`` ``[d_in, d_in]`` of ``n`` facts.
    With the edit's ``keys[layer] = K_f`` ``[d_in, n]`` and ``previous_digest`` the edit can be taken out again
    (:func:`undo_to`); without, the new state has no history."""
    if sorted(moments) != sorted(state.layers):
        raise ForgottenStateError(f"the edit's keys are of layers {sorted(moments)}, the state's {list(state.layers)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    new = {}
    for layer in state.layers:
        S = state.moments[layer]
        M = moments[layer].to(dtype=torch.float64, device=S.device)
        if M.shape != S.shape:
            raise ForgottenStateError(f"layer {layer}: keys' moment {tuple(M.shape)} vs state {tuple(S.shape)}")
        new[layer] = S + M
    history: Tuple[EditRecord, ...] = ()
    if keys is not None and previous_digest:
        record = EditRecord(previous_digest, {l: keys[l].detach().to(torch.float64).cpu() for l in state.layers}, n)
        history = state.history + (record,)
        # the keys kept never outgrow the moments themselves (at most d_in columns a layer): the oldest go first
        d_in = min(int(S.shape[0]) for S in new.values())
        while sum(int(next(iter(r.keys.values())).shape[1]) for r in history) > d_in:
            history = history[1:]
    return ForgottenState(state.module_tmp, state.layers, new, state.count + n, weights_digest, previous_digest,
                          history)


def undo_to(state: ForgottenState, digest: str) -> Tuple[Optional[ForgottenState], int]:
    """The state of the edits still in weights whose digest is ``digest``, when those weights are the ones before
    one of ``state``'s recorded edits (restored after it and every later one): ``(state without those edits, how
    many were taken out)``; ``(None, k)`` when every edit was taken out; ``(state, 0)`` when ``digest`` is the
    state's own; ``(None, -1)`` when no recorded edit started from such weights."""
    if digest == state.weights_digest:
        return state, 0
    moments = dict(state.moments)
    count = state.count
    for index in range(len(state.history) - 1, -1, -1):
        record = state.history[index]
        moments = {l: moments[l] - record.keys[l] @ record.keys[l].T for l in state.layers}
        count -= record.count
        if record.digest_before == digest:
            undone = len(state.history) - index
            if index == 0 and count == 0:
                return None, undone
            before = state.history[index - 1].digest_before if index else ""
            return ForgottenState(state.module_tmp, state.layers, moments, count, digest, before,
                                  state.history[:index]), undone
    return None, -1


def merge_states(a: ForgottenState, b: ForgottenState) -> ForgottenState:
    """The state of both sets of facts (same modules; the digest is dropped: it names no single model)."""
    a.check_compatible(b.module_tmp, b.layers, "the first state")
    return add_keys(a, b.moments, b.count)


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def save_state(state: ForgottenState, folder: Union[str, Path], name: str = STATE_FILE) -> Tuple[Path, str]:
    """Write ``state`` atomically as ``folder/name`` (safetensors, float64, metadata in the header); returns
    ``(path, sha256 of the file)``."""
    from safetensors.torch import save

    state.validate()
    tensors = {f"layer.{layer}": state.moments[layer].contiguous().cpu() for layer in state.layers}
    metadata = {"format": STATE_FORMAT, "module_tmp": state.module_tmp, "layers": json.dumps(list(state.layers)),
                "count": str(state.count), "weights_digest": state.weights_digest}
    path = write_bytes_atomic(Path(folder) / name, save(tensors, metadata=metadata))
    return path, sha256_of_file(path)


def load_state(path: Union[str, Path], sha256: Optional[str] = None) -> ForgottenState:
    """Read a :func:`save_state` file; ``sha256`` (the ledger's) must match. Raises :class:`ForgottenStateError`
    naming the file for a missing, altered or malformed one."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise ForgottenStateError(f"{path}: the forgotten-facts state file is missing")
    if sha256 is not None and sha256_of_file(path) != sha256:
        raise ForgottenStateError(f"{path}: sha256 differs from the one the ledger records: the file was altered "
                                  "or replaced")
    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise ForgottenStateError(f"{path}: unreadable state file ({exc})") from exc
    if meta.get("format") != STATE_FORMAT:
        raise ForgottenStateError(f"{path}: format {meta.get('format')!r}, expected {STATE_FORMAT!r}")
    try:
        layers = tuple(int(l) for l in json.loads(meta["layers"]))
        count = int(meta["count"])
        moments = {layer: tensors[f"layer.{layer}"] for layer in layers}
    except (KeyError, ValueError, TypeError) as exc:
        raise ForgottenStateError(f"{path}: malformed metadata or tensors ({type(exc).__name__}: {exc})") from exc
    if len(tensors) != len(layers):
        raise ForgottenStateError(f"{path}: tensors {sorted(tensors)} do not match layers {list(layers)}")
    state = ForgottenState(str(meta.get("module_tmp", "")), layers, moments, count, str(meta.get("weights_digest", "")))
    return state.validate(str(path))


# ----------------------------------------------------------------------------------------------
# The state on a model object
# ----------------------------------------------------------------------------------------------


def edited_weights_digest(model: nn.Module, module_tmp: str, layers: Sequence[int]) -> str:
    """A digest of the edited weights (``_DIGEST_SAMPLES`` evenly spaced values of each, exact bits): equal
    weights give equal digests; an edit or a restore changes it."""
    digest = hashlib.blake2b(digest_size=12)
    with torch.no_grad():
        for layer in sorted(layers):
            W = get_weight_matrix(get_module(model, module_tmp.format(layer))).detach().reshape(-1)
            count = min(_DIGEST_SAMPLES, W.numel())
            index = torch.arange(count, dtype=torch.int64, device=W.device) * (W.numel() - 1) // max(count - 1, 1)
            sample = W[index].to(torch.float64).cpu()
            digest.update(f"{layer}|{tuple(W.shape)}|".encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()


def model_state(model: nn.Module) -> Optional[ForgottenState]:
    """The state an earlier edit of this process left on ``model`` (None: none)."""
    return model.__dict__.get(MODEL_ATTRIBUTE)


def attach_state(model: nn.Module, state: Optional[ForgottenState]) -> None:
    """Put ``state`` on ``model`` (None removes it)."""
    if state is None:
        model.__dict__.pop(MODEL_ATTRIBUTE, None)
    else:
        model.__dict__[MODEL_ATTRIBUTE] = state


def current_state(model: nn.Module, module_tmp: str, layers: Sequence[int]) -> Optional[ForgottenState]:
    """The model's state when it still describes the model's edited weights, else None.

    A state whose digest no longer matches the weights (restored after an edit, as EasyEdit does without
    ``sequential_edit``: logged at INFO; or changed by other code: a warning) is dropped. A state of other modules or
    layers raises :class:`ForgottenStateError`.
    """
    state = model_state(model)
    if state is None:
        return None
    state.check_compatible(module_tmp, layers, "the model's forgotten-facts state (from an earlier edit)")
    digest = edited_weights_digest(model, module_tmp, layers)
    if not state.weights_digest or state.weights_digest == digest:
        return state
    kept, undone = undo_to(state, digest)
    if kept is not None:  # e.g. edit A, edit B, B's weights restored: A's facts are still forgotten
        LOG.info("the last %d edit(s) were undone (weights restored); the state keeps the %d forgotten fact(s) of "
                 "the edits still in the weights (%d dropped)", undone, kept.count, state.count - kept.count)
    elif undone > 0 or digest == state.previous_digest:  # e.g. EasyEdit without sequential_edit restores each edit
        LOG.info("the last edit was undone (weights restored); the state of %d forgotten fact(s) is dropped",
                 state.count)
    else:
        LOG.warning("the edited weights changed since the last edit recorded %d forgotten fact(s); their "
                    "protection is dropped", state.count)
    attach_state(model, kept)
    return kept
