"""References between code and documents stay inside the repository and resolve: every
Markdown document a file names exists here, no file cites an issue tracker or a design
document kept elsewhere, and every `AMBIGUITY` note of the reference model points at its
own decision in docs/session-semantics.md section 11 (and every decision is pointed at)."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEMANTICS = ROOT / "docs/session-semantics.md"
#: the reference model, one module per seam of core
MODEL = sorted((ROOT / "spec/reference").glob("*.py"))
#: where a decision outside the session model is made (the transport's origin policy and
#: its handling of frames no session sees)
DECIDING_CODE = (
    *MODEL,
    ROOT / "transport/access_policy.py",
    ROOT / "transport/websocket.py",
    ROOT / "transport/calls.py",
    ROOT / "transport/call_channel.py",
)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".js", ".mjs", ".html", ".css", ".sh", ".yaml"}
SKIPPED_DIRS = {"node_modules", "__pycache__", "build", "dist", "test-artifacts"}
#: a Markdown document named in running text or a link
MD_NAME = re.compile(r"(?<![\w/.-])([\w./-]*\w\.md)\b")
#: citations of things that are not in the repository
OUTSIDE = (
    re.compile(r"\bissue \d"),
    re.compile(r"\bstyle[ -]anchors?\b"),
    re.compile(r"\bupstream[\w -]*protocol[\w ]* section \d"),
)


def _text_files() -> list[pathlib.Path]:
    files = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT).parts
        if any(p.startswith(".") or p in SKIPPED_DIRS or p.endswith(".egg-info") for p in rel):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile"):
            files.append(path)
    return sorted(files)


def test_every_markdown_document_named_exists_in_the_repository() -> None:
    missing = []
    for path in _text_files():
        for m in MD_NAME.finditer(path.read_text(errors="replace")):
            name = m.group(1)
            if name.startswith("//"):  # a URL
                continue
            if not ((ROOT / name).is_file() or (path.parent / name).is_file()):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, f"documents that are not in the repository: {missing}"


def test_no_file_cites_an_issue_or_a_document_kept_elsewhere() -> None:
    this = pathlib.Path(__file__).resolve()
    found = []
    for path in _text_files():
        if path.resolve() == this:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(p.search(line) for p in OUTSIDE):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "cite a document inside the repository instead:\n" + "\n".join(found)


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
    text = "\n".join(path.read_text() for path in DECIDING_CODE)
    notes = re.findall(r"# AMBIGUITY \(([^)]*)\)", text)
    assert notes, "no AMBIGUITY notes found"
    pointed = []
    for note in notes:
        m = re.fullmatch(r"docs/session-semantics\.md, decision (D\d+)", note)
        assert m, f"AMBIGUITY ({note}) does not name its decision"
        pointed.append(m.group(1))
    assert len(pointed) == len(set(pointed)), "two notes share a decision"
    assert sorted(pointed, key=lambda d: int(d[1:])) == _decisions()
