"""Record-list files (facts to forget / keep): formats and errors naming file, record and field."""
from __future__ import annotations

import json

import pytest

from zerounlearn_editor.data.record_files import RecordFileError, read_record_list, require_fields

RECORDS = [{"prompt": "The capital of France is", "subject": "France"}, {"prompt": "Hamlet was written by", "subject": "Hamlet"}]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".yaml", ".yml"])
def test_each_format_reads_the_same_list(tmp_path, suffix):
    path = tmp_path / f"facts{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(RECORDS), encoding="utf-8")
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n\n", encoding="utf-8")
    else:
        path.write_text("".join(f"- prompt: {r['prompt']}\n  subject: {r['subject']}\n" for r in RECORDS), encoding="utf-8")
    assert read_record_list(path) == RECORDS


@pytest.mark.parametrize(
    "name, text, fragment",
    [
        ("a.json", "{\"prompt\": 1}", "expected a list"),
        ("a.json", "[]", "empty"),
        ("a.json", "[1]", "record 0"),
        ("a.jsonl", "{\"prompt\": \"x\"}\n{oops", "line 2"),
        ("a.yaml", "- !!python/object:os.system {}\n", "cannot parse"),
        ("a.txt", "[]", "must end in"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, name, text, fragment):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecordFileError, match=fragment) as info:
        read_record_list(path, what="retain facts")
    assert str(path) in str(info.value)


def test_missing_file_and_missing_field(tmp_path):
    with pytest.raises(RecordFileError, match="not found"):
        read_record_list(tmp_path / "none.json")
    with pytest.raises(RecordFileError, match=r"record 1: field 'subject': missing"):
        require_fields([{"prompt": "a", "subject": "a"}, {"prompt": "b"}], ["prompt", "subject"], "f.json")
    with pytest.raises(RecordFileError, match=r"record 0: field 'prompt': must be a non-empty string"):
        require_fields([{"prompt": " ", "subject": "a"}], ["prompt", "subject"], "f.json")
