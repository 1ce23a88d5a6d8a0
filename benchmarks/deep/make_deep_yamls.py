"""Write hparams/ZeroUnlearn-GD/<model>-deep.yaml = the paper YAML of the same model with the deep-mode keys.

The deep mode (opt-in; its keys: zerounlearn_editor.methods.zerounlearn_gd.config.deep_mode_settings) is
the levers that lowered the in-context (3-shot) recovery on the REPORT half of the known CounterFact facts
(benchmarks/RESULTS.md, "Deep forgetting"; the journey in
benchmarks/notebook/2026-11-25-deep-forgetting-*.md): targets optimised to a lower loss, with a looser norm
clamp, over more and longer context templates and few-shot prefixes of hand-written facts. Every model gets the same
keys and values, so `-deep.yaml` works everywhere (measured on SmolLM2-135M-Instruct only).
tests/methods/test_retain_yamls.py checks that each -deep file differs from its paper file only in these keys and is
what this script writes.
Run from the repository root: python benchmarks/deep/make_deep_yamls.py
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from zerounlearn_editor.cli.init_hparams import is_variant_yaml
from zerounlearn_editor.methods.zerounlearn_gd.config import deep_mode_settings

HEADER = (
    "# Deep forgetting (opt-in): the paper's ZeroUnlearn-GD with the keys marked 'deep mode' changed, so the\n"
    "# answer also stays away under in-context prompts (benchmarks/RESULTS.md, \"Deep forgetting\": what it\n"
    "# buys and what it costs). Written by benchmarks/deep/make_deep_yamls.py from the paper YAML.\n"
)


def yaml_value(value: Any) -> str:
    """``value`` as one line of flow-style YAML (``null``, ``[12, 13]``, ``{weight: 1.0, k: 3}``)."""
    return yaml.safe_dump([value], default_flow_style=True, sort_keys=False, width=10 ** 6).strip()[1:-1]


def with_settings(paper_text: str, settings: Mapping[str, Any], header: str) -> str:
    """``header`` + the paper YAML's text with each of ``settings`` set (comment: the paper's value); keys the paper
    YAML does not set are appended after it (comment: the paper sets none)."""
    text, added = paper_text, []
    for key, value in settings.items():
        pattern = re.compile(rf"^{key}:[ \t]*([^#\n]*?)[ \t]*(#.*)?$", re.MULTILINE)
        match = pattern.search(text)
        if match is None:
            added.append(f"{key}: {yaml_value(value)}  # deep mode (the paper: none)\n")
            continue
        line = f"{key}: {yaml_value(value)}  # deep mode (the paper: {match.group(1)})"
        text = text[: match.start()] + line + text[match.end():]
    return header + text.rstrip("\n") + "\n" + ("\n" + "".join(added) if added else "")


def deep_text(paper_text: str) -> str:
    """The paper YAML's text with every deep-mode key set to its value."""
    return with_settings(paper_text, deep_mode_settings(), HEADER)


def main() -> None:
    for paper in sorted(Path("hparams", "ZeroUnlearn-GD").glob("*.yaml")):
        if is_variant_yaml(paper):  # -retain*/-suppress/-deep variants, not paper YAMLs
            continue
        target = paper.with_name(f"{paper.stem}-deep.yaml")
        target.write_text(deep_text(paper.read_text(encoding="utf-8")), encoding="utf-8")
        print(target)


if __name__ == "__main__":
    main()
