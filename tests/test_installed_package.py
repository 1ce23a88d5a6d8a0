"""The demo's code path from a NON-editable install, in a folder with no ``../shared`` and no data dir.

The package is built and installed with ``pip install --no-deps --target`` from a copy of the
files a release ships (no ``tests/``, no checkout around it); a subprocess then runs
``zerounlearn demo`` through the CLI with SmolLM2 swapped for a tiny 30-layer Llama (same module
names, so the shipped SmolLM2 YAML applies unchanged). Everything else is the real thing: the
YAML found inside the installed package, the built-in statistics corpus, the embedded perplexity
text, the statistics cache under ``./data/stats`` and the edit.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ["setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "hparams", "zerounlearn_editor"]

SCRIPT = r"""
import io, json, sys
from contextlib import redirect_stdout
from pathlib import Path

target = Path(sys.argv[1]).resolve()
import zerounlearn_editor
assert Path(zerounlearn_editor.__file__).resolve().is_relative_to(target), zerounlearn_editor.__file__
from zerounlearn_editor.cli import demo
from zerounlearn_editor.cli import main
from zerounlearn_editor.support.resources import hparams_path, shared_data_dir
from tiny_models import tiny_llama, tiny_tokenizer

tok = tiny_tokenizer()
demo.load_model_and_tokenizer = lambda name, device="cpu", dtype=None: (tiny_llama(tok, layers=30), tok)
out = io.StringIO()
with redirect_stdout(out):
    code = main(["demo", "--ppl-tokens", "600", "--quiet"])
print(json.dumps({
    "code": code,
    "table": out.getvalue(),
    "hparams": str(hparams_path("ZeroUnlearn", "SmolLM2-135M-Instruct")),
    "data_dir": str(shared_data_dir()),
    "stats": sorted(p.as_posix() for p in Path("data/stats").rglob("*.npz")),
}))
"""


def test_demo_code_path_from_a_non_editable_install(tmp_path: Path):
    source = tmp_path / "src"
    source.mkdir()
    for name in SHIPPED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, source / name)
    target = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-compile", "-q",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    installed = target / "zerounlearn_editor"
    assert (installed / "_hparams" / "ZeroUnlearn" / "SmolLM2-135M-Instruct.yaml").is_file()
    assert sorted(p.name for p in (installed / "data" / "embedded").iterdir()) == [
        "NOTICE.md", "wiki_passages_3643.jsonl.xz", "wikitext2_raw_test.txt.xz"]

    work = tmp_path / "nowhere" / "work"  # no ../shared beside it, nor beside the install
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ZEROUNLEARN_DATA_DIR", "PYTHONPATH")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(target), str(ROOT / "tests")]),
        ZEROUNLEARN_CACHE=str(tmp_path / "cache"),
        OMP_NUM_THREADS="1",
    )
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(target)], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, run.stderr[-3000:]
    assert result["data_dir"] == "None"
    assert Path(result["hparams"]).is_relative_to(installed / "_hparams")
    assert "### Forgotten facts" in result["table"] and "WikiText-2 perplexity:" in result["table"]
    assert result["stats"] == [
        f"data/stats/tiny-llama/wiki_passages_3643_stats/model.layers.{layer}.mlp.down_proj_float32_mom2_400.npz"
        for layer in (16, 17, 18)
    ]
    assert (tmp_path / "cache" / "data" / "wikitext2_raw_test.txt").is_file()
    assert "%|" not in run.stderr  # --quiet: no progress bars
