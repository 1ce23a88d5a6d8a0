"""The context second moment's positions (``context_nullspace_weight``): every real token of a row
but its first one and the lookup token (the prompts' relation context)."""
from __future__ import annotations

from tiny_models import tiny_tokenizer
from zerounlearn_editor.engine.encoding import encode_rows
from zerounlearn_editor.engine.keys import context_position_mask


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
