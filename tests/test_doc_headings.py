"""Every pointer from one doc to a section of a doc names a section that exists.

The README, CONTRIBUTING.md and benchmarks/RESULTS.md point to sections by their heading in quotes. A pointer is
a quoted text that follows a doc's name (``README, "Hyperparameters"``, ``CONTRIBUTING.md, "Benchmarks"``,
``benchmarks/RESULTS.md`, "Scale"``, ``RESULTS "Scale"``, ``"n-scaling" in benchmarks/RESULTS.md``: that doc) or
``see`` / ``under``, or is followed by ``below`` / ``above`` / ``section`` (the same doc). It resolves to a
heading (``#`` lines outside code blocks; a leading ``12.`` numbering is not part of the name) or to a bold
run-in heading (``**Fluency guard.**`` at the start of a paragraph or bullet) whose text is the pointer's, or
begins with it and goes on with ``:``, ``,``, ``?`` or `` (`` (``"Scale"`` -> ``## 11. Scale (issue 37): ...``).
Quoted text elsewhere (printed messages, prompts, code) is not a pointer.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS: Dict[str, str] = {"README": "README.md", "CONTRIBUTING": "CONTRIBUTING.md", "RESULTS": "benchmarks/RESULTS.md"}
"""The docs whose pointers are checked and which pointers may name: short name -> path in the checkout."""

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(?:\d+\.\s+)?(.+?)\s*#*\s*$", re.MULTILINE)
RUN_IN = re.compile(r"^(?:[-*]\s+)?\*\*([^*\n]+?)\.?\*\*", re.MULTILINE)
QUOTED = re.compile(r'"([^"]{2,100})"')
NAMED_BEFORE = re.compile(r"\b(README|CONTRIBUTING|RESULTS)(?:\.md)?[`\])]*[,:]?\s*(?:section\s+)?$")
NAMED_AFTER = re.compile(r"^\s+in\s+`?(?:benchmarks/)?(README|CONTRIBUTING|RESULTS)\b")
SAME_BEFORE = re.compile(r"\b(?:see|under)\s+$", re.IGNORECASE)
SAME_AFTER = re.compile(r"^\s+(?:below|above|section)\b")
CONTINUES = re.compile(r"^(?:$|\s*[:,?]|\s+\()")
"""How a heading may go on after the text a pointer gives."""


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks, every run of whitespace one space (a pointer may wrap)."""
    return re.sub(r"\s+", " ", FENCE.sub(" ", text))


def section_names(text: str) -> Set[str]:
    """The headings and bold run-in headings of a markdown text (outside fenced code)."""
    body = FENCE.sub("", text)
    return {m.group(1).strip() for m in HEADING.finditer(body)} | {m.group(1).strip() for m in RUN_IN.finditer(body)}


def resolves(pointer: str, names: Set[str]) -> bool:
    """Whether ``pointer`` names one of ``names`` (equal, or a heading that begins with it, see the module doc)."""
    return any(name.startswith(pointer) and CONTINUES.match(name[len(pointer):]) for name in names)


def pointers(doc: str, text: str) -> List[Tuple[str, str]]:
    """``(target doc, quoted text)`` of every section pointer in ``text``, the text of the doc ``doc``."""
    prose = _prose(text)
    found = []
    for m in QUOTED.finditer(prose):
        before, after = prose[max(0, m.start() - 60):m.start()], prose[m.end():m.end() + 40]
        target: Optional[str] = None
        named = NAMED_BEFORE.search(before) or NAMED_AFTER.search(after)
        if named:
            target = named.group(1)
        elif SAME_BEFORE.search(before) or SAME_AFTER.search(after):
            target = doc
        if target is not None:
            found.append((target, m.group(1).strip()))
    return found


def dangling(root: Path) -> List[str]:
    """``"<doc>: "<pointer>" -> <target doc>"`` for every pointer of :data:`DOCS` that names no section."""
    texts = {name: (root / path).read_text(encoding="utf-8") for name, path in DOCS.items()}
    names = {name: section_names(text) for name, text in texts.items()}
    return [f'{DOCS[doc]}: "{pointer}" -> {DOCS[target]}' for doc, text in texts.items()
            for target, pointer in pointers(doc, text) if not resolves(pointer, names[target])]


def test_pointers_are_found_in_each_written_form():
    text = ('Keys: README, "Hyperparameters"; see `benchmarks/RESULTS.md`, "Scale" and '
            '[`RESULTS`](benchmarks/RESULTS.md), "Speed";\n'
            'as "Robustness audit" below, CONTRIBUTING.md "What is\n  validated", "n-scaling" in benchmarks/RESULTS.md,'
            ' (see "Choosing a YAML"), under "Forgetting over time". Printed: "Forgotten: 1 of 1", '
            'fluency_guard="warn".\n```bash\n# see "Not a pointer"\n```\n')
    assert pointers("README", text) == [
        ("README", "Hyperparameters"), ("RESULTS", "Scale"), ("RESULTS", "Speed"), ("README", "Robustness audit"),
        ("CONTRIBUTING", "What is validated"), ("RESULTS", "n-scaling"), ("README", "Choosing a YAML"),
        ("README", "Forgetting over time"),
    ]


def test_a_pointer_resolves_to_a_heading_or_run_in_heading_it_begins():
    names = section_names("# Doc\n## 11. Scale (issue 37): many facts\n### Memory of one edit: n = 10\n"
                          "### Is there a regime for X? (decision)\n- **Fluency guard.** Every edit ...\n"
                          "```\n## Inside code\n```\n")
    assert {"Scale (issue 37): many facts", "Fluency guard", "Doc"} <= names and "Inside code" not in names
    for pointer in ("Scale", "Memory of one edit", "Is there a regime for X?", "Fluency guard", "Doc"):
        assert resolves(pointer, names), pointer
    for pointer in ("Scal", "Memory", "Hyperparameters (YAML)", "Inside code", "Fluency"):
        assert not resolves(pointer, names), pointer


def test_a_dangling_pointer_is_reported(tmp_path):
    for name, path in DOCS.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(f"# {name}\n\n## Hyperparameters\n", encoding="utf-8")
    (tmp_path / "CONTRIBUTING.md").write_text('## Layout\nthe key table under "Hyperparameters (YAML)"; '
                                              'README, "Hyperparameters"; see "Layout".\n', encoding="utf-8")
    assert dangling(tmp_path) == ['CONTRIBUTING.md: "Hyperparameters (YAML)" -> CONTRIBUTING.md']


def test_every_section_pointer_in_the_docs_names_an_existing_section():
    found = [p for doc, path in DOCS.items() for p in pointers(doc, (REPO_ROOT / path).read_text(encoding="utf-8"))]
    assert len(found) >= 20, found  # the docs point to each other's sections; the parser still sees them
    assert not dangling(REPO_ROOT), "pointers to sections that do not exist:\n" + "\n".join(dangling(REPO_ROOT))
