"""Write hparams/ZeroUnlearn-GD/<model>-retain.yaml = the paper YAML of the same model + the retain block.

The retain-aware settings are the ones measured best on SmolLM2 (benchmarks/RESULTS.md, "Surgical
forgetting"); every model gets the same keys so `--retain` benches and `retain=` work everywhere.
(ZeroUnlearn+R and its -retain files were retired: ZeroUnlearn-GD+R beats it at every n measured.)
tests/methods/test_retain_yamls.py checks that each -retain file differs from its paper file only there.
Run from the repository root: python benchmarks/surgical/make_retain_yamls.py
"""
from pathlib import Path

from zerounlearn_editor.cli.init_hparams import is_variant_yaml

BLOCKS = {
    "ZeroUnlearn-GD": (
        "\n# Retain-aware ZeroUnlearn-GD (opt-in; the paper's method sets it to 0): the null space avoids\n"
        "# C0 + retain_nullspace_weight * K_r K_r^T / n_r. Measured on SmolLM2: benchmarks/RESULTS.md,\n"
        "# \"Surgical forgetting\". Give the retain set as retain=[...] or retain_file.\n"
        "retain_file: null\n"
        "retain_nullspace_weight: {retain_nullspace_weight}\n"
    ),
}
SETTINGS = {
    "ZeroUnlearn-GD": dict(retain_nullspace_weight=0.1),
}

for method, block in BLOCKS.items():
    for paper in sorted(Path("hparams", method).glob("*.yaml")):
        if is_variant_yaml(paper):  # -retain*/-suppress/-deep variants, not paper YAMLs
            continue
        text = paper.read_text(encoding="utf-8").rstrip("\n") + "\n" + block.format(**SETTINGS[method])
        paper.with_name(f"{paper.stem}-retain.yaml").write_text(text, encoding="utf-8")
        print(paper.with_name(f"{paper.stem}-retain.yaml"))
