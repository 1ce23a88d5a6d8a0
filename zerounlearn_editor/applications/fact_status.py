"""The status of each fact a ledger lists, as of the latest edit (:mod:`zerounlearn_editor.applications.ledger`).

"Answered" is what greedy decoding gives (:func:`is_answered`): every answer token is the argmax after the prompt
and the answer's earlier tokens (teacher-forced accuracy 1.0, the criterion of ``EditReport.still_answered``), or the
answer is named, as a whole word, anywhere in the greedy continuation the report shows (e.g. ``":\n\n* French"`` for
the answer ``French``: the answer is not the next token, but the model still gives it). Each fact carries
``answered_before`` (before an edit that targeted it: a fact edited again keeps ``True``), ``answered`` (after
the latest edit), the first edit (its own or a later one) after which it was not answered
(``first_unanswered_edit``) and the status those give (:func:`fact_status`):

- ``forgotten``: answered before its edit, not answered now;
- ``not_known``: not answered before its edit (nothing to forget), not answered now;
- ``still_answered``: answered before its edit and after every edit since (its edit did not remove it);
- ``taught``: not answered before its edit, answered after it and every edit since (its edit taught it);
- ``came_back``: not answered after an earlier edit (forgotten, or not known then), answered again now;
- ``no_answer``: the fact has no answer (not scored).

Only ``forgotten`` means the model no longer gives the fact; a ledger never writes it for a fact the model gives.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

STATUS_LABELS: Dict[str, str] = {
    "forgotten": "forgotten (answered before its edit, not now)",
    "not_known": "not known before its edit (nothing to forget)",
    "still_answered": "still answered (its edit did not remove it)",
    "taught": "taught (not answered before its edit, answered after it)",
    "came_back": "came back (not answered after an earlier edit, answered again now)",
    "no_answer": "no answer given (not scored)",
}
"""Every status, in the order a report lists them, with what it means."""

ANSWERED_STATUSES = ("still_answered", "taught", "came_back")
"""The statuses of a fact the model gives (NOT forgotten)."""

CONTINUATION_TOKENS = 8
"""The greedy continuation's length in tokens: the report shows it, and a fact it names is answered."""

ANSWERED_RULE = (f"answer tokens greedy, or the answer named in the {CONTINUATION_TOKENS}-token greedy "
                 "continuation")
"""The rule :func:`is_answered` applies, as a ledger records it (``answered_rule``); a ledger without it was
written under the rule before it: the answer's tokens greedy only."""

FactKey = Tuple[str, str]


def fact_key(fact: Mapping[str, Any]) -> FactKey:
    """A fact's identity in a ledger: its prompt and subject (they fix its key vector)."""
    return fact["prompt"], fact["subject"]


def _spaced(char: str) -> bool:
    """Whether ``char`` belongs to a word of a script that separates words by spaces (a letter or digit that is not
    East Asian wide: "北京" is named inside "北京市是", "Paris" not inside "Parisian")."""
    return (char.isalnum() or char == "_") and unicodedata.east_asian_width(char) not in ("W", "F")


def names_answer(text: str, answer: str) -> bool:
    """Whether ``text`` (a greedy continuation) names ``answer`` as a whole word or phrase: case-insensitive, both
    in Unicode NFC, runs of whitespace equal, not inside a longer word or number (``Paris`` in ``" Paris."`` or
    ``":\n* paris"``, not in ``"Parisian"``; ``3`` not in ``"3.5"`` or ``"1,3"``); a wide-script answer (Chinese,
    Japanese) anywhere. An empty answer names nothing."""
    words = unicodedata.normalize("NFC", answer).split()
    if not words:
        return False
    pattern = r"\s+".join(re.escape(w) for w in words)
    if _spaced(words[0][0]):
        pattern = r"(?<!\w)(?<!\d[.,])" + pattern
    if _spaced(words[-1][-1]):
        pattern += r"(?!\w)(?![.,]\d)"
    return re.search(pattern, unicodedata.normalize("NFC", text), flags=re.IGNORECASE) is not None


def is_answered(acc: Optional[float], answer: Optional[str], continuation: str) -> Optional[bool]:
    """Whether the model gives a fact: its answer's tokens are the greedy ones (teacher-forced accuracy ``acc`` of
    1.0) or its greedy ``continuation`` names the answer (:func:`names_answer`); None: no answer (not scored)."""
    if acc is None or not answer:
        return None
    return acc == 1.0 or names_answer(continuation, answer)


def fact_status(answered_before: Optional[bool], answered: Optional[bool],
                first_unanswered_edit: Optional[int]) -> str:
    """The status (a key of :data:`STATUS_LABELS`) of a fact answered (or not) before the edit that last targeted
    it and after the latest edit; ``first_unanswered_edit``: the first edit after which it was not answered (None:
    answered after every edit since its first)."""
    if answered is None or answered_before is None:
        return "no_answer"
    if not answered:
        return "forgotten" if answered_before else "not_known"
    if first_unanswered_edit is not None:
        return "came_back"
    return "still_answered" if answered_before else "taught"


def new_fact_record(fact: Mapping[str, Any], edit: int, time: str, answered_before: Optional[bool],
                    answered: Optional[bool], earlier: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The ledger record of ``fact`` (an edit request: prompt, subject, ground_truth) edited by edit ``edit``.
    ``earlier``: the ledger's record of the same fact when an earlier edit targeted it too (its edits and the edit
    that first left it unanswered are kept)."""
    unanswered = earlier.get("first_unanswered_edit") if earlier else None
    if earlier and earlier.get("answered_before"):
        answered_before = True  # known before its first edit: forgotten again if this edit removes it
    if unanswered is None and answered is False:
        unanswered = edit
    return {"prompt": fact["prompt"], "subject": fact["subject"], "answer": fact.get("ground_truth"), "edit": edit,
            "edits": (list(earlier["edits"]) if earlier else []) + [edit], "time": time,
            "answered_before": answered_before, "answered": answered,
            "status": fact_status(answered_before, answered, unanswered), "first_unanswered_edit": unanswered,
            "status_since_edit": edit, "as_of_edit": edit}


def rescored_record(record: Mapping[str, Any], answered: Optional[bool], edit: int) -> Dict[str, Any]:
    """An earlier fact's ledger ``record`` after edit ``edit`` (which did not target it) left it ``answered``."""
    unanswered = record.get("first_unanswered_edit")
    if unanswered is None and answered is False:
        unanswered = edit
    status = fact_status(record.get("answered_before"), answered, unanswered)
    since = record.get("status_since_edit", edit) if status == record.get("status") else edit
    return dict(record, answered=answered, status=status, first_unanswered_edit=unanswered, status_since_edit=since,
                as_of_edit=edit)


def merged_facts(earlier: Sequence[Mapping[str, Any]], earlier_answered: Sequence[Optional[bool]],
                 facts: Sequence[Mapping[str, Any]], before: Sequence[Optional[bool]],
                 after: Sequence[Optional[bool]], edit: int, time: str) -> List[Dict[str, Any]]:
    """The ledger's facts after edit ``edit``: each earlier record re-scored (``earlier_answered``), or replaced
    by its new record when this edit targets the same fact again (one record a fact), then this edit's new facts
    (``before`` / ``after``: answered before and after this edit), in file order."""
    targeted = {fact_key(f): i for i, f in enumerate(facts)}
    out: List[Dict[str, Any]] = []
    for record, answered in zip(earlier, earlier_answered):
        i = targeted.pop(fact_key(record), None)
        if i is None:
            out.append(rescored_record(record, answered, edit))
        else:
            out.append(new_fact_record(facts[i], edit, time, before[i], after[i], earlier=record))
    out += [new_fact_record(facts[i], edit, time, before[i], after[i]) for i in sorted(targeted.values())]
    return out


def status_counts(statuses: Iterable[str]) -> Dict[str, int]:
    """``{status: count}`` over :data:`STATUS_LABELS` (every status, zeros included)."""
    counts = dict.fromkeys(STATUS_LABELS, 0)
    for status in statuses:
        counts[status] += 1
    return counts


def format_counts(counts: Mapping[str, int]) -> str:
    """``"1 forgotten, 49 not known before, ..."``: the non-zero counts (``"none"`` without any)."""
    names = {"forgotten": "forgotten", "not_known": "not known before (nothing to forget)",
             "still_answered": "still answered (NOT forgotten)", "taught": "taught (answered now, not before)",
             "came_back": "came back (NOT forgotten)", "no_answer": "no answer given"}
    parts = [f"{counts[s]} {names[s]}" for s in STATUS_LABELS if counts.get(s)]
    return ", ".join(parts) if parts else "none"


def edit_count(facts: Sequence[Mapping[str, Any]]) -> int:
    """How many fact edits the records stand for (a fact edited twice counts twice, as in the carried state)."""
    return sum(len(f.get("edits") or [f.get("edit")]) for f in facts)


__all__ = ["ANSWERED_RULE", "ANSWERED_STATUSES", "CONTINUATION_TOKENS", "STATUS_LABELS", "edit_count", "fact_key",
           "fact_status", "format_counts", "is_answered", "merged_facts", "names_answer", "new_fact_record",
           "rescored_record", "status_counts"]
