"""The behaviour catalogue (`spec/behaviours.py`) is complete and names only real things:
every id B1..Bn has an entry; every section, table row, invariant and test an entry names
exists; table rows and entries agree on which behaviours a row serves; and every test
whose name carries a behaviour id refers to a catalogued one."""

from __future__ import annotations

import ast
import functools
import pathlib
import re

import pytest

from spec.behaviours import (
    ALL_TABLES,
    BEHAVIOUR_IDS,
    BEHAVIOURS,
    SEMANTICS,
    SESSION_INVARIANTS,
    Behaviour,
    RowRef,
    behaviour,
    invariant_text,
    rows_of,
    table_named,
)
from spec.behaviours_doc import github_anchor

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPECTED_IDS = tuple(f"B{n}" for n in range(1, 45))
#: `test_b05_...`, `test_b5_...`: the id a test function's name carries
FUNCTION_ID = re.compile(r"^test_b0*(\d+)_")
#: `test_b05_b08_commits.py`: the first and last id a conformance module covers
MODULE_IDS = re.compile(r"^test_b0*(\d+)(?:_b0*(\d+))?_")


def _ids(b: Behaviour) -> str:
    return b.id


@functools.cache
def _functions(path: str) -> frozenset[str]:
    """Names of the module-level test functions of a test file."""
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    )


def _headings() -> set[str]:
    text = (ROOT / SEMANTICS).read_text()
    return {m.group(1).strip() for m in re.finditer(r"^#{2,4} (.+)$", text, re.M)}


def test_every_behaviour_id_has_exactly_one_entry_in_order() -> None:
    assert BEHAVIOUR_IDS == EXPECTED_IDS
    assert [behaviour(i).id for i in EXPECTED_IDS] == list(EXPECTED_IDS)
    with pytest.raises(KeyError):
        behaviour("B99")


@pytest.mark.parametrize("entry", BEHAVIOURS, ids=_ids)
def test_entry_has_a_title_a_summary_and_sections_that_exist(entry: Behaviour) -> None:
    assert entry.title.strip() and entry.summary.strip()
    assert entry.sections, f"{entry.id} names no section of {SEMANTICS}"
    missing = set(entry.sections) - _headings()
    assert not missing, f"{entry.id}: no such heading in {SEMANTICS}: {sorted(missing)}"


@pytest.mark.parametrize("entry", BEHAVIOURS, ids=_ids)
def test_entry_names_only_existing_rows_and_invariants(entry: Behaviour) -> None:
    assert entry.rows or entry.invariants, f"{entry.id}: nothing enforces it"
    for ref in entry.rows:
        assert table_named(ref.machine) is not None, f"{entry.id}: no table `{ref.machine}`"
        assert rows_of(ref), f"{entry.id}: no row {ref}"
    for invariant in entry.invariants:
        assert invariant_text(invariant), f"{entry.id}: no invariant `{invariant}`"
    assert len(set(entry.rows)) == len(entry.rows)
    assert len(set(entry.invariants)) == len(entry.invariants)


@pytest.mark.parametrize("entry", BEHAVIOURS, ids=_ids)
def test_entry_names_existing_tests_that_carry_its_id(entry: Behaviour) -> None:
    assert any(t.startswith("tests/conformance/") for t in entry.tests), (
        f"{entry.id} has no conformance test"
    )
    assert len(set(entry.tests)) == len(entry.tests)
    for node_id in entry.tests:
        path, sep, name = node_id.partition("::")
        assert sep and "::" not in name, f"{entry.id}: `{node_id}` is not `path::function`"
        assert (ROOT / path).is_file(), f"{entry.id}: no test module {path}"
        assert name in _functions(path), f"{entry.id}: no test {node_id}"
        m = FUNCTION_ID.match(name)
        assert m and f"B{int(m.group(1))}" == entry.id, f"{entry.id}: {name} carries another id"


def test_rows_and_entries_agree_on_the_behaviours_a_row_serves() -> None:
    named: set[tuple[str, int, str]] = set()
    for entry in BEHAVIOURS:
        for ref in entry.rows:
            table = table_named(ref.machine)
            assert table is not None
            for row in rows_of(ref):
                named.add((table.name, table.transitions.index(row), entry.id))
    tagged = {
        (table.name, index, bid)
        for table in ALL_TABLES
        for index, row in enumerate(table.transitions)
        for bid in row.behaviours
    }
    assert not tagged - named, f"rows tagged but not in the catalogue: {sorted(tagged - named)}"
    assert not named - tagged, f"catalogued rows without the tag: {sorted(named - tagged)}"
    assert {bid for _, _, bid in tagged} <= set(BEHAVIOUR_IDS)


def test_table_invariants_with_session_ids_match_the_session_invariants() -> None:
    for table in ALL_TABLES:
        for key in table.invariants:
            if re.fullmatch(r"I\d+", key):
                assert key in SESSION_INVARIANTS, f"{table.name}: {key} is no session invariant"
    text = (ROOT / SEMANTICS).read_text()
    listed = re.findall(r"^- (I\d+) ", text, re.M)
    assert listed == list(SESSION_INVARIANTS), f"{SEMANTICS} section 8 lists {listed}"


def _test_files() -> list[pathlib.Path]:
    return sorted((ROOT / "tests").rglob("test_*.py"))


def test_every_behaviour_id_in_a_test_name_is_catalogued() -> None:
    unknown = []
    for path in _test_files():
        rel = path.relative_to(ROOT).as_posix()
        for name in _functions(rel):
            m = FUNCTION_ID.match(name)
            if m and f"B{int(m.group(1))}" not in BEHAVIOUR_IDS:
                unknown.append(f"{rel}::{name}")
        m = MODULE_IDS.match(path.name)
        if m:
            for group in m.groups():
                if group is not None and f"B{int(group)}" not in BEHAVIOUR_IDS:
                    unknown.append(rel)
    assert not unknown, f"behaviour ids that are not catalogued: {unknown}"


def test_conformance_tests_are_catalogued_and_stay_within_their_modules_ids() -> None:
    catalogued = {t for entry in BEHAVIOURS for t in entry.tests}
    modules = sorted((ROOT / "tests/conformance").glob("test_*.py"))
    assert modules
    for path in modules:
        m = MODULE_IDS.match(path.name)
        assert m, f"{path.name} does not name the behaviours it proves"
        first = int(m.group(1))
        last = int(m.group(2) or first)
        rel = path.relative_to(ROOT).as_posix()
        for name in _functions(rel):
            fm = FUNCTION_ID.match(name)
            assert fm, f"{rel}::{name} carries no behaviour id"
            assert first <= int(fm.group(1)) <= last, f"{rel}::{name} is outside B{first}..B{last}"
            assert f"{rel}::{name}" in catalogued, f"{rel}::{name} is not in spec/behaviours.py"


def test_lookups_of_unknown_names_find_nothing() -> None:
    assert table_named("no_such_machine") is None
    assert rows_of(RowRef("no_such_machine", "start")) == ()
    assert rows_of(RowRef("commit", "quiet", "no_such_state")) == ()
    assert invariant_text("X1") is None
    assert invariant_text("I9") == SESSION_INVARIANTS["I9"]
    assert invariant_text("K1")


def test_github_anchor() -> None:
    assert github_anchor("3.2 The pipeline: ASR, VLM, TTS (B1-B4, B8)") == (
        "32-the-pipeline-asr-vlm-tts-b1-b4-b8"
    )
    assert github_anchor("2.1 append (`input_audio_buffer.append`)") == (
        "21-append-input_audio_bufferappend"
    )
