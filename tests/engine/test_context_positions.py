"""The context second moment's positions (``context_nullspace_weight``): every real token of a row
but its first one and the lookup token (the prompts' relation context)."""
from __future__ import annotations

from tiny_models import tiny_tokenizer
from zerounlearn_editor.engine.encoding import encode_rows
from zerounlearn_editor.engine.keys import context_position_mask


def test_subject_start_marks_the_subjects_first_token():
    tok = tiny_tokenizer()
    contexts = ["", "the city . ", "a "]
    prefixes, subjects, suffixes = ["the capital of ", "", "it was "], ["new france", "old germany", "paris"], [" is", " is", ""]
    batch = encode_rows(tok, contexts, prefixes, subjects, suffixes)
    for row in range(3):
        start, last = int(batch.subject_start[row]), int(batch.lookup[row])
        subject_ids = tok(subjects[row], add_special_tokens=False)["input_ids"]
        assert batch.input_ids[row, start : last + 1].tolist() == subject_ids
    assert encode_rows(tok, contexts, prefixes, subjects, suffixes, fact_token="last").subject_start is None


def test_context_mask_is_every_token_but_the_first_and_the_lookup():
    tok = tiny_tokenizer()
    batch = encode_rows(tok, ["", ""], ["the capital of ", "the capital of "], ["new france", "japan"], [" is", " is"])
    mask = context_position_mask(batch)
    assert mask[0].tolist() == [False, True, True, True, True, False, True]  # [BOS] the capital of new *france* is
    lookup = int(batch.lookup[1])
    real = batch.attention_mask[1].bool()
    expected = real.clone()
    expected[0] = False
    expected[lookup] = False
    assert mask[1].tolist() == expected.tolist()  # padding is never a context position
