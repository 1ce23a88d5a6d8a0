"""Write hparams/ZeroUnlearn-GD/<model>-<variant>.yaml (variant `many` or `robust`) for every model with a paper YAML
but no measured file of that variant, by `zerounlearn init-hparams --<variant>` from the model's config (no weights:
the architecture's shapes below, as the model's config.json gives them; init-hparams builds the modules on the meta
device).

Each file is the model's paper YAML (init-hparams' nearest shipped YAML, checked to be that file) with the paper's
`layers`, `model_name` and `device`, and the variant's rule of zerounlearn_editor.methods.zerounlearn_gd.variants
(many_mode_settings, robust_settings); its header says it is derived, not measured. SmolLM2's files are measured and
not written here. tests/methods/test_many_yamls.py checks that the shipped files are what this writes.

Run from the repository root: OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/many/make_many_yamls.py [--variant
robust] [MODEL ...]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import yaml

from zerounlearn_editor.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2] / "hparams" / "ZeroUnlearn-GD"


def _llama(**kw: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(**kw)


def _qwen3(**kw: Any) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(**kw)


def _gpt2(**kw: Any) -> Any:
    from transformers import GPT2Config

    return GPT2Config(**kw)


CONFIGS: Dict[str, Tuple[Callable[..., Any], Dict[str, Any]]] = {
    "Llama-3.2-3B-Instruct": (_llama, dict(
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
        head_dim=128, vocab_size=128256, rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=True)),
    "Llama-3.1-8B-Instruct": (_llama, dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, vocab_size=128256, rms_norm_eps=1e-5, max_position_embeddings=131072,
        tie_word_embeddings=False)),
    "Qwen3-4B": (_qwen3, dict(
        hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=True)),
    "gpt2-xl": (_gpt2, dict(n_embd=1600, n_layer=48, n_head=25, vocab_size=50257, n_positions=1024)),
}
"""The models' architectures (shapes of their published config.json files); only the module structure and the depth
reach the written YAML."""


VARIANTS = ("many", "robust")
"""The variants whose derived files this writes."""


def many_yaml(model: str, out: Path, variant: str = "many") -> Path:
    """Write ``<model>-<variant>.yaml`` to ``out`` by ``init-hparams --<variant>`` from the model's config."""
    if variant not in VARIANTS:
        raise SystemExit(f"--variant must be one of {VARIANTS}, got {variant!r}")
    paper_path = ROOT / f"{model}.yaml"
    paper = yaml.safe_load(paper_path.read_text(encoding="utf-8"))
    build, shape = CONFIGS[model]
    with tempfile.TemporaryDirectory() as tmp:
        build(**shape).save_pretrained(tmp)
        args = ["init-hparams", "--model", tmp, "--method", "ZeroUnlearn-GD", f"--{variant}",
                "--layers", ",".join(str(l) for l in paper["layers"]), "--out", str(out),
                "--set", f"model_name={paper['model_name']}", "--set", f"device={paper['device']}"]
        if cli_main(args) != 0:
            raise SystemExit(f"init-hparams --{variant} failed for {model}")
    first = out.read_text(encoding="utf-8").splitlines()[0]
    if f"from the shipped ZeroUnlearn-GD/{paper_path.name};" not in first:
        raise SystemExit(f"{model}: init-hparams based the file on another YAML than {paper_path.name}: {first}")
    return out


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description="derived -many / -robust YAMLs by init-hparams")
    parser.add_argument("--variant", choices=VARIANTS, default="many")
    parser.add_argument("models", nargs="*", metavar="MODEL")
    args = parser.parse_args(argv)
    for model in args.models or sorted(CONFIGS):
        if model not in CONFIGS:
            parser.error(f"unknown model {model!r}; choose from {sorted(CONFIGS)}")
        print(many_yaml(model, ROOT / f"{model}-{args.variant}.yaml", args.variant))


if __name__ == "__main__":
    main()
