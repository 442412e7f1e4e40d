"""References between code and documents stay inside the repository and resolve: every
`AMBIGUITY` note of the reference model points at its own decision in
docs/session-semantics.md section 11, and every decision is pointed at."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEMANTICS = ROOT / "docs/session-semantics.md"
MODEL = ROOT / "spec/reference_model.py"


def _decisions() -> list[str]:
    text = SEMANTICS.read_text()
    section = text.split("## 11. Decisions where the contract was silent", 1)[1]
    return re.findall(r"^### (D\d+) ", section, re.M)


def test_decisions_are_numbered_in_order_with_question_decision_and_why() -> None:
    decisions = _decisions()
    assert decisions == [f"D{n}" for n in range(1, len(decisions) + 1)]
    section = SEMANTICS.read_text().split("## 11. Decisions", 1)[1]
    for entry in re.split(r"^### ", section, flags=re.M)[1:]:
        for part in ("- Question: ", "- Decision: ", "- Why: "):
            assert part in entry, f"{entry.splitlines()[0]} lacks `{part.strip()}`"


def test_every_ambiguity_note_points_at_its_own_decision() -> None:
    text = MODEL.read_text()
    notes = re.findall(r"# AMBIGUITY \(([^)]*)\)", text)
    assert notes, "no AMBIGUITY notes found"
    pointed = []
    for note in notes:
        m = re.fullmatch(r"docs/session-semantics\.md, decision (D\d+)", note)
        assert m, f"AMBIGUITY ({note}) does not name its decision"
        pointed.append(m.group(1))
    assert len(pointed) == len(set(pointed)), "two notes share a decision"
    assert sorted(pointed, key=lambda d: int(d[1:])) == _decisions()
