"""One strict reader (:func:`~zerounlearn_editor.support.structured_files.read_structured`) behind the four
loaders: a repeated key, a parse error or non-UTF-8 bytes come back as each caller's own error, naming the file."""
from __future__ import annotations

import pytest

from zerounlearn_editor.data.record_files import RecordFileError, read_record_list
from zerounlearn_editor.data.records import read_json_records
from zerounlearn_editor.data.types import DataFormatError
from zerounlearn_editor.engine.hparams import HParamsError, load_config_file
from zerounlearn_editor.harness.bench_config import BenchConfigError
from zerounlearn_editor.harness.runfile import load_runfile
from zerounlearn_editor.support.structured_files import read_structured

LOADERS = [
    (load_config_file, HParamsError, "yaml"),
    (read_record_list, RecordFileError, "yaml"),
    (load_runfile, BenchConfigError, "yaml"),
    (read_json_records, DataFormatError, "json"),
]


@pytest.mark.parametrize("load, error, suffix", LOADERS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_repeated_key_is_the_callers_error(tmp_path, load, error, suffix):
    path = tmp_path / f"x.{suffix}"
    path.write_text("- {a: 1, a: 2}\n" if suffix == "yaml" else '[{"a": 1, "a": 2}]', encoding="utf-8")
    with pytest.raises(error, match=r"x\.%s: cannot parse .*duplicate key" % suffix):
        load(path)
    path.write_bytes(b"a: \xe9\n")
    with pytest.raises(error, match=r"x\.%s: not UTF-8 text" % suffix):
        load(path)


def test_reader_by_suffix(tmp_path):
    def fail(message):
        return ValueError(message)

    lines = tmp_path / "a.jsonl"
    lines.write_text('{"a": 1}\n\n{"b": 2}\n', encoding="utf-8")
    assert read_structured(lines, "lines", fail) == [{"a": 1}, {"b": 2}]
    lines.write_text('{"a": 1}\n{"b": \n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: invalid JSON"):
        read_structured(lines, "lines", fail)
    tagged = tmp_path / "t.yaml"
    tagged.write_text("a: !!python/object:os.system {}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot parse the test file"):
        read_structured(tagged, "the test file", fail)
