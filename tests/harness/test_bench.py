"""The bench (``zerounlearn bench``) end to end on a tiny Llama with a tiny CounterFact file."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
import yaml

from tiny_models import TINY_FACTS, tiny_hparams_dict, tiny_llama, tiny_tokenizer, write_corpus, write_tiny_counterfact
from zerounlearn_editor.cli import build_parser
from zerounlearn_editor.cli import main as cli_main
from zerounlearn_editor.harness import (
    BenchConfig,
    BenchConfigError,
    EditOutcome,
    HParamsLookup,
    MethodSpec,
    ModelFingerprint,
    ModelStateError,
    PreparedMethod,
    default_registry,
    easyedit_baselines,
    load_runfile,
    parse_seeds,
    run_bench,
    runner,
)
from zerounlearn_editor.support.files import sha256_of_json

FACTS = TINY_FACTS
PPL_TEXT = " ".join(
    ["the city of paris is a large city in france", "many people live in london and it was known for its river"] * 4
)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Dict[str, Path]:
    """Tiny data, corpus, perplexity text and an ``hparams/<Method>/tiny.yaml`` tree."""
    root = tmp_path_factory.mktemp("bench")
    data = write_tiny_counterfact(root / "counterfact_tiny.json")
    corpus = write_corpus(root / "corpus.jsonl")
    ppl = root / "ppl.txt"
    ppl.write_text(PPL_TEXT, encoding="utf-8")
    stats = root / "stats"
    for alg in ("ZeroUnlearn", "ZeroUnlearn-GD"):
        _write_yaml(root / "hparams" / alg / "tiny.yaml", tiny_hparams_dict(stats, corpus, alg_name=alg))
    for alg in ("GA", "NPO"):
        config = dict(alg_name=alg, model_name="tiny", device="cpu", layers=[1, 2], num_steps=3, lr=1e-2)
        if alg == "NPO":
            config["beta"] = 0.1
        _write_yaml(root / "hparams" / alg / "tiny.yaml", config)
    return {
        "root": root,
        "data": data,
        "corpus": corpus,
        "ppl": ppl,
        "main": root / "hparams" / "ZeroUnlearn" / "tiny.yaml",
    }


def _write_yaml(path: Path, config: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


def _config(ws: Dict[str, Path], out: Path, methods: List[str], seeds=(1, 2), **changes) -> BenchConfig:
    config = BenchConfig(
        hparams=str(ws["main"]),
        data=str(ws["data"]),
        seeds=list(seeds),
        methods=list(methods),
        out=str(out),
        n=3,
        ppl_tokens=40,
        ppl_text=str(ws["ppl"]),
        progress=False,
    )
    return dataclasses.replace(config, **changes)


def _no_loader(name: str, device: str):
    raise AssertionError("the model must not be loaded")


def test_parse_seeds():
    assert parse_seeds("1-3,7") == [1, 2, 3, 7]
    assert parse_seeds("2") == [2]
    assert parse_seeds([3, 1, 3]) == [3, 1]
    for bad in ("3-1", "a", "", True):
        with pytest.raises(BenchConfigError):
            parse_seeds(bad)


def test_bench_end_to_end_then_resume(tok, workspace, tmp_path, monkeypatch):
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    methods = ["base", "ZeroUnlearn", "ZeroUnlearn-GD", "GA", "NPO"]
    out = tmp_path / "out"
    summary = run_bench(_config(workspace, out, methods), model=model, tok=tok)

    assert before.differences(model) == []
    for seed in (1, 2):
        record = json.loads((out / f"seed_{seed}.json").read_text())
        assert record["seed"] == seed and len(record["case_ids"]) == 3
        assert set(record["methods"]) == set(methods)
        for name in methods:
            entry = record["methods"][name]
            assert entry["status"] == "ok", (name, entry)
            assert {"eff", "gen", "spe", "eff_prob", "ppl", "spe_distinct", "neighbours_named"} <= set(entry["metrics"])
            # the same batch marks for every row of the seed
            assert entry["metrics"]["neighbours_named"] == record["methods"]["base"]["metrics"]["neighbours_named"]
            assert len(entry["requests"]) == 3
            assert "pre" in entry["requests"][0]
        zu = record["methods"]["ZeroUnlearn"]
        assert "post" in zu["requests"][0] and "neighborhood_acc" in zu["requests"][0]["post"]["locality"]
        assert zu["edited_parameters"] == ["model.layers.1.mlp.down_proj.weight", "model.layers.2.mlp.down_proj.weight"]
        assert zu["metrics"]["edit_seconds"] > 0
        # the base row is the "pre" of every method
        assert record["methods"]["base"]["requests"][0]["pre"] == zu["requests"][0]["pre"]
        # same target settings in both tiny YAMLs: ZeroUnlearn-GD reuses ZeroUnlearn's targets and is charged for them
        gd = record["methods"]["ZeroUnlearn-GD"]
        assert "targets_reused_from" not in zu["details"]
        assert gd["details"]["targets_reused_from"] == "ZeroUnlearn"
        assert gd["details"]["timings"]["targets"] == zu["details"]["timings"]["targets"] > 0
        assert gd["metrics"]["edit_seconds"] > gd["details"]["timings"]["targets"]
    assert (
        json.loads((out / "seed_1.json").read_text())["case_ids"]
        != json.loads((out / "seed_2.json").read_text())["case_ids"]
    )
    markdown = (out / "summary.md").read_text()
    for name in methods:
        assert f"| {name} |" in markdown
    assert "Eff ↓" in markdown and "PPL ↓" in markdown and " ± " in markdown and "Eff 1st ↓" in markdown
    assert summary["methods"]["ZeroUnlearn"]["metrics"]["eff_first"]["n"] == 2
    assert summary["methods"]["ZeroUnlearn"]["metrics"]["eff"]["n"] == 2
    assert summary["methods"]["ZeroUnlearn"]["metrics"]["spe_distinct"]["n"] == 2
    assert "spe_distinct" not in markdown  # a summary.json diagnostic, not a table column
    assert json.loads((out / "summary.json").read_text())["methods"]["base"]["status"] == "ok"

    # Resume: every seed is finished, so nothing is scored, prepared or loaded.
    def fail(*args, **kwargs):
        raise AssertionError("finished seeds must be skipped")

    monkeypatch.setattr(runner, "score_cases", fail)
    monkeypatch.setattr(runner, "_run_plan", fail)
    again = run_bench(_config(workspace, out, methods), loader=_no_loader)
    assert again["methods"] == summary["methods"]


def test_resume_runs_only_missing_methods(tok, workspace, tmp_path):
    out = tmp_path / "out"
    model = tiny_llama(tok)
    run_bench(_config(workspace, out, ["base", "ZeroUnlearn"], seeds=[4]), model=model, tok=tok)
    path = out / "seed_4.json"
    record = json.loads(path.read_text())
    del record["methods"]["ZeroUnlearn"]
    path.write_text(json.dumps(record))

    calls: List[str] = []
    registry = default_registry()
    spec = registry["ZeroUnlearn"]

    def prepare(ctx):
        prepared = spec.prepare(ctx)
        inner = prepared.edit

        def edit(*args):
            calls.append("ZeroUnlearn")
            return inner(*args)

        return dataclasses.replace(prepared, edit=edit)

    registry["ZeroUnlearn"] = MethodSpec("ZeroUnlearn", spec.describe, prepare)
    run_bench(_config(workspace, out, ["base", "ZeroUnlearn"], seeds=[4]), model=model, tok=tok, registry=registry)
    assert calls == ["ZeroUnlearn"]
    assert json.loads(path.read_text())["methods"]["ZeroUnlearn"]["status"] == "ok"

    # A stored seed of another configuration is an error, not a silent mix.
    with pytest.raises(BenchConfigError, match="n: 3 there, 2 here"):
        run_bench(_config(workspace, out, ["base"], seeds=[4], n=2), model=model, tok=tok)


def _faulty_spec() -> MethodSpec:
    """A method that edits a weight but returns an empty weights_copy (so it is never undone)."""

    def prepare(ctx):
        def edit(model, tok, requests, stats):
            with torch.no_grad():
                model.model.layers[0].mlp.down_proj.weight.add_(1.0)
            return EditOutcome({})

        return PreparedMethod("Faulty", edit)

    return MethodSpec("Faulty", lambda lookup: {"faulty": True}, prepare)


@pytest.mark.parametrize("order", [["Faulty", "ZeroUnlearn"], ["ZeroUnlearn", "Faulty"]])
def test_unrestored_edit_is_detected(tok, workspace, tmp_path, order):
    registry = default_registry()
    registry["Faulty"] = _faulty_spec()
    model = tiny_llama(tok)
    config = _config(workspace, tmp_path / "out", order, seeds=[1])
    with pytest.raises(ModelStateError, match="model.layers.0.mlp.down_proj.weight"):
        run_bench(config, model=model, tok=tok, registry=registry)


@dataclasses.dataclass
class _FakeHParams:
    """Stands in for EasyEdit's ROME/MEMIT hparams classes (same field names, fewer of them)."""

    alg_name: str
    layers: List[int]
    rewrite_module_tmp: str
    stats_dir: str
    mom2_dataset: str
    mom2_n_samples: int
    mom2_dtype: str
    v_loss_layer: int
    model_name: str
    device: str
    mom2_adjustment: bool = False


def _fake_easyedit(calls: List[Dict[str, Any]]):
    def apply(model, tok, requests, hparams, copy=False, return_orig_weights=False, **kwargs):
        calls.append({"alg": hparams.alg_name, "requests": requests, "hparams": hparams})
        weights_copy = {}
        for layer in hparams.layers:
            name = f"{hparams.rewrite_module_tmp.format(layer)}.weight"
            param = dict(model.named_parameters())[name]
            weights_copy[name] = param.detach().clone()
            with torch.no_grad():
                param.mul_(0.5)
        print("EasyEdit-style chatter that must not reach stdout")
        return model, weights_copy if return_orig_weights else {}

    return easyedit_baselines.EasyEditAPI(
        alg_dict={"ROME": apply, "MEMIT": apply}, hparams_classes={"ROME": _FakeHParams, "MEMIT": _FakeHParams}
    )


def test_easyedit_methods_through_alg_dict(tok, workspace, tmp_path, monkeypatch, capsys):
    calls: List[Dict[str, Any]] = []
    api = _fake_easyedit(calls)
    monkeypatch.setattr(easyedit_baselines, "load_easyedit", lambda: (api, None))
    model = tiny_llama(tok)
    before = ModelFingerprint.of(model)
    out = tmp_path / "out"
    run_bench(_config(workspace, out, ["base", "ROME", "MEMIT"], seeds=[1]), model=model, tok=tok)
    assert before.differences(model) == []
    assert "chatter" not in capsys.readouterr().out

    rome = [c for c in calls if c["alg"] == "ROME"]
    memit = [c for c in calls if c["alg"] == "MEMIT"]
    assert len(rome) == 3 and all(len(c["requests"]) == 1 for c in rome)  # ROME: one fact per call
    assert len(memit) == 1 and len(memit[0]["requests"]) == 3  # MEMIT: the whole batch
    assert all(r["target_new"] == tok.eos_token for c in calls for r in c["requests"])
    hp = memit[0]["hparams"]
    assert hp.layers == [1, 2] and rome[0]["hparams"].layers == [2]
    assert hp.mom2_dataset == workspace["corpus"].stem  # reads our statistics file offline
    assert hp.stats_dir == str(workspace["root"] / "stats") and hp.mom2_dtype == "float64"
    assert hp.v_loss_layer == 3 and hp.device == "cpu" and "llama" in hp.model_name
    npz = (
        Path(hp.stats_dir)
        / "tiny-llama"
        / f"{hp.mom2_dataset}_stats"
        / f"model.layers.1.mlp.down_proj_{hp.mom2_dtype}_mom2_{hp.mom2_n_samples}.npz"
    )
    assert npz.is_file()
    record = json.loads((out / "seed_1.json").read_text())
    assert record["methods"]["ROME"]["details"]["calls"] == 3
    assert record["methods"]["MEMIT"]["status"] == "ok"


def test_easyedit_missing_is_reported(tok, workspace, tmp_path, monkeypatch):
    monkeypatch.setattr(easyedit_baselines, "easyedit_available", lambda: False)
    out = tmp_path / "out"
    run_bench(_config(workspace, out, ["base", "ROME", "FT"], seeds=[1]), model=tiny_llama(tok), tok=tok)
    markdown = (out / "summary.md").read_text()
    for name in ("ROME", "FT"):
        assert f"| {name} | skipped: EasyEdit not importable (set EASYEDIT_PATH) |" in markdown


def test_method_hparams_lookup_errors(tok, workspace, tmp_path):
    config = _config(workspace, tmp_path / "out", ["base", "GA"], method_hparams={"GA": str(tmp_path / "nope.yaml")})
    with pytest.raises(BenchConfigError, match="nope.yaml"):
        run_bench(config, model=tiny_llama(tok), tok=tok)
    with pytest.raises(BenchConfigError, match="unknown method 'XYZ'"):
        run_bench(_config(workspace, tmp_path / "out", ["base", "XYZ"]), model=tiny_llama(tok), tok=tok)


def _runfile(tmp_path: Path, run: Dict[str, Any], top: Dict[str, Any] = None) -> Path:
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(dict({"runs": [run]}, **(top or {}))), encoding="utf-8")
    return path


RUN = dict(name="cf", hparams="h.yaml", data="counterfact", n=5, seeds="1-3", methods="base,ZeroUnlearn", out="o")


def test_runfile_is_strict(tmp_path):
    configs = load_runfile(_runfile(tmp_path, dict(RUN, ppl_tokens=100, methods=["base", "GA"])))
    assert configs[0].seeds == [1, 2, 3] and configs[0].methods == ["base", "GA"] and configs[0].ppl_tokens == 100
    path = _runfile(tmp_path, dict(RUN, ppl_tokenz=100))
    with pytest.raises(BenchConfigError, match=r"runs.yaml: run 0 \(cf\): unknown key\(s\) \['ppl_tokenz'\]"):
        load_runfile(path)
    with pytest.raises(BenchConfigError, match=r"unknown top-level key\(s\) \['extra'\]"):
        load_runfile(_runfile(tmp_path, RUN, {"extra": 1}))
    with pytest.raises(BenchConfigError, match=r"missing key\(s\) \['out'\]"):
        load_runfile(_runfile(tmp_path, {k: v for k, v in RUN.items() if k != "out"}))
    with pytest.raises(BenchConfigError, match="'n'"):
        load_runfile(_runfile(tmp_path, dict(RUN, n="five")))


def test_cli_bench_arguments(tmp_path, capsys):
    args = build_parser().parse_args(
        ["bench", "--hparams", "h.yaml", "--data", "counterfact", "--seeds", "1-2", "--methods", "base,ZeroUnlearn",
         "--method-hparams", "GA=ga.yaml", "--out", "o"]
    )
    assert args.func.__name__ == "_cmd_bench" and args.method_hparams == ["GA=ga.yaml"]
    with pytest.raises(SystemExit, match="--runfile takes its settings from the file"):
        cli_main(["bench", "--runfile", str(_runfile(tmp_path, RUN)), "--n", "3"])


def test_hparams_lookup(workspace, tmp_path):
    from zerounlearn_editor.harness.method_specs import load_main_hparams

    main = workspace["main"]
    lookup = HParamsLookup(main, load_main_hparams(str(main)), {"NPO": str(main)})
    root = workspace["root"] / "hparams"
    assert lookup.path_for("ZeroUnlearn") == main
    assert lookup.path_for("ZeroUnlearn-GD") == root / "ZeroUnlearn-GD" / "tiny.yaml"
    assert lookup.path_for("NPO") == main  # the override wins
    full = root / "GA" / "tiny-full.yaml"
    full.write_text((root / "GA" / "tiny.yaml").read_text(), encoding="utf-8")
    assert lookup.path_for("GA-full", "GA", "-full") == full
    with pytest.raises(BenchConfigError, match="--method-hparams NPO-full=PATH"):
        lookup.path_for("NPO-full", "NPO", "-full")


def test_failing_method_is_recorded_and_the_bench_goes_on(tok, workspace, tmp_path):
    def prepare(ctx):
        def edit(model, tok, requests, stats):
            raise LookupError("lm_head.weight")

        return PreparedMethod("Broken", edit)

    registry = default_registry()
    registry["Broken"] = MethodSpec("Broken", lambda lookup: {}, prepare)
    out = tmp_path / "out"
    run_bench(_config(workspace, out, ["base", "Broken", "ZeroUnlearn"], seeds=[1]), model=tiny_llama(tok), tok=tok,
              registry=registry)
    record = json.loads((out / "seed_1.json").read_text())
    assert record["methods"]["Broken"]["status"] == "error"
    assert record["methods"]["ZeroUnlearn"]["status"] == "ok"
    assert "| Broken | error: LookupError: lm_head.weight |" in (out / "summary.md").read_text()


def test_known_only_threshold_is_passed_and_a_short_pool_is_an_error(tok, workspace, tmp_path, monkeypatch):
    model = tiny_llama(tok)
    seen = []

    def keep_first_two(model_, tok_, cases, n, min_accuracy=1.0, **kwargs):
        seen.append(min_accuracy)
        return list(cases)[:2]

    monkeypatch.setattr(runner, "select_known_cases", keep_first_two)
    out = tmp_path / "out"
    config = _config(workspace, out, ["base"], known_only=True, known_min_accuracy=0.5)
    with pytest.raises(BenchConfigError, match=r"only 2 .* cases reach forget-prompt accuracy 0.5, n=3 needed"):
        run_bench(config, model=model, tok=tok)
    assert seen == [0.5] and not out.exists()

    summary = run_bench(dataclasses.replace(config, n=2), model=model, tok=tok)
    record = json.loads((out / "seed_1.json").read_text())
    assert record["run"]["known_min_accuracy"] == 0.5
    assert sorted(map(str, record["case_ids"])) == ["0", "1"]
    assert summary["methods"]["base"]["status"] == "ok"
    with pytest.raises(BenchConfigError, match="known_min_accuracy must be in"):
        dataclasses.replace(config, known_min_accuracy=0.0).validate()


def test_runfile_reads_known_min_accuracy(tmp_path):
    configs = load_runfile(_runfile(tmp_path, dict(RUN, known_only=True, known_min_accuracy=0.5)))
    assert configs[0].known_only and configs[0].known_min_accuracy == 0.5
    with pytest.raises(BenchConfigError, match="known_min_accuracy"):
        load_runfile(_runfile(tmp_path, dict(RUN, known_min_accuracy="half")))


def test_shared_targets_equal_a_fresh_optimisation(tok, workspace):
    from zerounlearn_editor import ZeroUnlearnGDHyperParams, ZeroUnlearnHyperParams
    from zerounlearn_editor.engine.pipeline import neutral_targets
    from zerounlearn_editor.harness import SharedTargets

    model = tiny_llama(tok)
    zu = ZeroUnlearnHyperParams.from_hparams(str(workspace["main"]))
    gd = ZeroUnlearnGDHyperParams.from_hparams(str(workspace["root"] / "hparams" / "ZeroUnlearn-GD" / "tiny.yaml"))
    requests = [
        {"prompt": "the capital of {} is", "subject": s, "ground_truth": a, "target_new": ""} for s, a in FACTS[:3]
    ]
    shared = SharedTargets()
    first, info = shared.get_or_compute("ZeroUnlearn", model, tok, requests, zu)
    assert set(info) == {"target_seconds"}
    again, info = shared.get_or_compute("ZeroUnlearn-GD", model, tok, requests, gd.replace(chunk_size=1))
    assert again is first and info["targets_reused_from"] == "ZeroUnlearn"
    fresh = neutral_targets(model, tok, requests, gd)
    assert torch.equal(fresh.z, first.z) and torch.equal(fresh.nll, first.nll)
    # another setting or other requests: optimised anew
    other, info = shared.get_or_compute("ZeroUnlearn-GD", model, tok, requests, gd.replace(v_lr=0.1))
    assert other is not first and "targets_reused_from" not in info
    other_requests, _ = shared.get_or_compute("ZeroUnlearn-GD", model, tok, requests[:2], gd.replace(v_lr=0.1))
    assert other_requests.z.shape[0] == 2


def test_bench_summary_gives_the_perplexity_tokens_measured(tok, workspace, tmp_path):
    """Issue 46 item 6: ``ppl_tokens`` beyond the text's length: the seed files record and summary.md prints the
    tokens measured, not the option."""
    measured = len(tok(PPL_TEXT)["input_ids"])
    assert measured < 1000
    summary = run_bench(_config(workspace, tmp_path, ["base"], seeds=[1], ppl_tokens=1000), model=tiny_llama(tok),
                        tok=tok)
    assert json.loads((tmp_path / "seed_1.json").read_text())["ppl_tokens_measured"] == measured
    assert summary["ppl_tokens_measured"] == str(measured)
    text = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert f"perplexity on the first {measured} tokens of ppl.txt" in text and "1000 tokens" not in text


def test_method_signature_covers_the_retain_file_the_yaml_names(workspace, tmp_path):
    """A bench row made with a YAML's ``retain_file`` is keyed by that file's content too (the edit reads it when
    the bench passes no retain set), so a changed retain file is not resumed as "done"; a YAML without one keeps
    the YAML-only identity, so stored seed files stay valid."""
    from zerounlearn_editor.harness.method_specs import edit_method_spec, load_main_hparams

    main = workspace["main"]
    spec = edit_method_spec("ZeroUnlearn-GD")
    plain = workspace["root"] / "hparams" / "ZeroUnlearn-GD" / "tiny.yaml"
    lookup = HParamsLookup(main, load_main_hparams(str(main)), {"ZeroUnlearn-GD": str(plain)})
    assert spec.describe(lookup)["hparams"] == {"file": str(plain),
                                                "sha256": hashlib.sha256(plain.read_bytes()).hexdigest()}
    keep = tmp_path / "keep.json"
    keep.write_text(json.dumps([{"prompt": "paris is in", "subject": "paris"}]), encoding="utf-8")
    config = yaml.safe_load(plain.read_text(encoding="utf-8"))
    with_retain = tmp_path / "with_retain.yaml"
    _write_yaml(with_retain, dict(config, retain_file="keep.json", retain_nullspace_weight=0.1))
    lookup = HParamsLookup(main, load_main_hparams(str(main)), {"ZeroUnlearn-GD": str(with_retain)})
    first = spec.describe(lookup)
    assert first["hparams"]["retain_file"]["sha256"] == hashlib.sha256(keep.read_bytes()).hexdigest()
    keep.write_text(json.dumps([{"prompt": "berlin is in", "subject": "berlin"}]), encoding="utf-8")
    assert sha256_of_json(spec.describe(lookup)) != sha256_of_json(first)
    keep.unlink()
    with pytest.raises(BenchConfigError, match=r"with_retain\.yaml: retain_file '.*keep\.json' is not a file"):
        spec.describe(lookup)


def test_a_seed_file_scored_with_windows_as_tokenized_gains_no_result_where_windows_open_with_bos(tok, workspace,
                                                                                                   tmp_path):
    """The bench's seed files record ``ppl_bos_windows`` in their run settings where the perplexity opened every
    window with BOS; a seed file stored before the key (windows as tokenized) gains no method there: it is refused
    once the tokenizer is loaded, naming the key."""
    model = tiny_llama(tok)
    run_bench(_config(workspace, tmp_path, ["base"], seeds=[1]), model=model, tok=tok)
    path = tmp_path / "seed_1.json"
    record = json.loads(path.read_text())
    assert record["run"]["ppl_bos_windows"] is True
    del record["run"]["ppl_bos_windows"]
    path.write_text(json.dumps(record))
    before = path.read_text()
    with pytest.raises(BenchConfigError, match=r"seed_1\.json holds results of another configuration "
                                               r"\(ppl_bos_windows: False there, True here"):
        run_bench(_config(workspace, tmp_path, ["base", "ZeroUnlearn"], seeds=[1]), model=model, tok=tok)
    assert path.read_text() == before
    # nothing to add: the stored table is read as it is, no model needed
    run_bench(_config(workspace, tmp_path, ["base"], seeds=[1]), loader=_no_loader)
    # a seed scored now beside it (seed 2 alone checks only its own file) is written, but the table of both is refused
    run_bench(_config(workspace, tmp_path, ["base"], seeds=[2]), model=model, tok=tok)
    with pytest.raises(BenchConfigError, match=r"seed_1\.json and .*seed_2\.json hold perplexities of two window "
                                               r"layouts"):
        run_bench(_config(workspace, tmp_path, ["base"], seeds=[1, 2]), loader=_no_loader)


def test_ppl_bos_windows_follows_the_tokenizer_and_old_results_read_as_tokenized(tmp_path):
    from zerounlearn_editor.harness.stored_settings import check_ppl_windows, ppl_bos_windows

    text = tmp_path / "ppl.txt"
    text.write_text(PPL_TEXT, encoding="utf-8")
    assert ppl_bos_windows(tiny_tokenizer(), str(text)) is True
    assert ppl_bos_windows(tiny_tokenizer(bos=False), str(text)) is False
    assert ppl_bos_windows(tiny_tokenizer(), None) is False  # no perplexity
    check_ppl_windows("old.json", {}, False)  # stored before the key, no BOS: the same layout
    check_ppl_windows("new.json", {"ppl_bos_windows": True}, True)
    with pytest.raises(BenchConfigError, match=r"old\.json .*ppl_bos_windows: False there, True here"):
        check_ppl_windows("old.json", {}, True)
    with pytest.raises(BenchConfigError, match=r"new\.json .*ppl_bos_windows: True there, False here"):
        check_ppl_windows("new.json", {"ppl_bos_windows": True}, False)
