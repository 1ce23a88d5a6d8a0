"""The README's key table is generated from the code, and every key earns its place.

Rules checked here:

* every hyperparameter field has help text on the field (``metadata["help"]``), and no help names another key;
* the README's table between the markers equals ``hparams_doc.key_table()`` (regenerate with
  ``python -m zerounlearn_editor.cli.hparams_doc``);
* every key is set by at least one shipped YAML (``hparams/ZeroUnlearn*/*.yaml``) or is an
  experiment: declared in a class's ``EXPERIMENTAL_KEYS`` (set under ``experimental:``), or the
  ``experimental`` mapping itself. A key with a default counts as used when any shipped YAML sets
  it (explicitly, even to the default), which is how EasyEdit's host fields count.
"""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from tiny_models import REPO_ROOT
from zerounlearn_editor.cli.hparams_doc import END, START, field_help, key_table, main, method_classes, replace_table
from zerounlearn_editor.engine.retired_keys import RETIRED_KEYS

ROOT = REPO_ROOT
SHIPPED = sorted(p for cls in method_classes() for p in (ROOT / "hparams" / cls.ALG_NAME).glob("*.yaml"))
# 59 before issue 27 (50 after retiring what lost, +1 fluency_max_increase), then 4 single-valued settings fixed;
# forgotten_protection_weight (issue 37) was a key, then moved under experimental:, then left the package (issue 47);
# +1: fewshot_contexts graduated from experimental: (issue 45; the -deep.yaml files set it); +2:
# rank_below_alternatives and quantized_forget_keys graduated (issue 45; the -robust.yaml files set them); +1:
# nullspace_text_weight graduated (issue 48; init-hparams writes it, gemma-3-270m-rules.yaml sets it); +1:
# suppress_rank_limit graduated (issue 48; the <model>-many.yaml files set it); +1: repair_rounds graduated (issue 48;
# gemma-3-270m-many.yaml sets it)
MAX_KEYS = 54


def _all_keys():
    return {f.name for cls in method_classes() for f in dataclasses.fields(cls)}


def test_every_key_has_help_text_and_no_help_is_orphaned():
    keys = _all_keys()
    assert not keys - set(field_help()), f"keys without help text: {sorted(keys - set(field_help()))}"
    assert not set(field_help()) - keys, f"help text for no key: {sorted(set(field_help()) - keys)}"
    assert all(text.strip() for text in field_help().values())


def test_readme_table_is_the_generated_one():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert replace_table(text, key_table()) == text, (
        "README key table is stale: run python -m zerounlearn_editor.cli.hparams_doc"
    )
    assert main(["--check", str(ROOT / "README.md")]) == 0


def test_every_key_is_used_by_a_shipped_yaml_or_experimental():
    assert len(SHIPPED) >= 18
    used = {key for path in SHIPPED for key in yaml.safe_load(path.read_text(encoding="utf-8"))}
    experiments = {"experimental"} | {key for cls in method_classes() for key in cls.EXPERIMENTAL_KEYS}
    unused = sorted(_all_keys() - used - experiments)
    assert not unused, f"keys used by no shipped YAML and not under 'experimental:': {unused}"
    assert not used - _all_keys(), f"shipped YAMLs set unknown keys {sorted(used - _all_keys())}"


def test_key_count_does_not_grow_back():
    assert len(_all_keys()) <= MAX_KEYS, sorted(_all_keys())
    assert not _all_keys() & set(RETIRED_KEYS), "a retired key is a field again"


def test_table_rows_name_methods_defaults_and_escape_pipes():
    table = key_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(_all_keys())
    assert "| `forget_weight` | ZeroUnlearn | `1.0` |" in table
    assert "| `norm_weight` | ZeroUnlearn-GD | `0.1` |" in table
    assert "| `layers` | both | required |" in table
    assert "| `experimental` | both | `{}` |" in table
    assert all(row.count(" | ") == 3 for row in rows), "a '|' inside a cell was not escaped"


def test_replace_table_needs_both_markers(tmp_path):
    with pytest.raises(ValueError, match="hparams-table"):
        replace_table("no markers here", "| a |")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold\n{END}\ntail\n", encoding="utf-8")
    assert main(["--check", str(readme)]) == 1
    assert main([str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == f"intro\n{START}\n{key_table()}\n{END}\ntail\n"
    assert main(["--check", str(readme)]) == 0
