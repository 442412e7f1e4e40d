"""Generated documents in docs/ match what spec/ generates now (run `make docs`), and so do
the generated spans of the hand-written documents (the behaviour range)."""

from __future__ import annotations

import json
import pathlib

import pytest

from spec.behaviours_doc import (
    RANGE_CLOSE,
    RANGE_OPEN,
    behaviour_range,
    unmarked_ranges,
    with_behaviour_range,
)
from spec.docs_index import DOCUMENTS, MARKED_DOCUMENTS

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rel", sorted(DOCUMENTS))
def test_generated_document_is_fresh(rel: str) -> None:
    path = ROOT / rel
    assert path.exists(), f"{rel} missing: run `make docs`"
    assert path.read_text() == DOCUMENTS[rel](), f"{rel} is stale: run `make docs`"


def test_schema_has_a_discriminated_union_per_direction() -> None:
    schema = json.loads((ROOT / "docs/protocol.schema.json").read_text())
    for name in ("ClientEvent", "ServerEvent"):
        union = schema["$defs"][name]
        assert union["discriminator"]["propertyName"] == "type"
        assert len(union["discriminator"]["mapping"]) == len(union["anyOf"])


def test_asyncapi_references_every_message_of_the_schema() -> None:
    schema = json.loads((ROOT / "docs/protocol.schema.json").read_text())
    text = (ROOT / "docs/asyncapi.yaml").read_text()
    assert text.splitlines()[1] == 'asyncapi: "3.0.0"'
    for name in ("ClientEvent", "ServerEvent"):
        for ref in schema["$defs"][name]["discriminator"]["mapping"].values():
            assert f"protocol.schema.json{ref}" in text


@pytest.mark.parametrize("rel", sorted(MARKED_DOCUMENTS))
def test_hand_written_document_quotes_the_current_behaviour_range(rel: str) -> None:
    """Each marked document holds the range between markers, that range is the catalogue's
    now, and no `B<n>..B<m>` range is written by hand outside the markers."""
    text = (ROOT / rel).read_text()
    assert RANGE_OPEN in text and RANGE_CLOSE in text, f"{rel} has no behaviour range markers"
    assert text == MARKED_DOCUMENTS[rel](text), f"{rel} is stale: run `make docs`"
    assert unmarked_ranges(text) == [], f"{rel}: write these between the range markers"


def test_a_stale_range_between_markers_is_rewritten() -> None:
    stale = f"the behaviours {RANGE_OPEN}B1..B27 and B31{RANGE_CLOSE} are catalogued"
    fresh = with_behaviour_range(stale)
    assert fresh != stale
    assert fresh == f"the behaviours {RANGE_OPEN}{behaviour_range()}{RANGE_CLOSE} are catalogued"
    assert with_behaviour_range(fresh) == fresh
    assert unmarked_ranges("ids B1..B27 and B31") == ["B1..B27"]
    assert unmarked_ranges(fresh) == []


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        (["B1", "B2", "B3"], "B1..B3"),
        ([f"B{n}" for n in range(1, 28)] + ["B31"], "B1..B27 and B31"),
        ([f"B{n}" for n in range(1, 29)] + ["B31", "B32"], "B1..B28, B31 and B32"),
        (["B7"], "B7"),
        (["B3", "B1", "B2", "B2"], "B1..B3"),
        (["B1", "B2", "B5", "B6", "B7", "B9"], "B1, B2, B5..B7 and B9"),
    ],
)
def test_behaviour_range_compresses_runs_of_three_or_more(ids: list[str], expected: str) -> None:
    assert behaviour_range(ids) == expected


def test_behaviour_range_of_the_catalogue() -> None:
    from spec.behaviours import BEHAVIOURS

    assert behaviour_range() == behaviour_range(b.id for b in BEHAVIOURS)
    assert behaviour_range().startswith("B1..")
    with pytest.raises(ValueError, match="not a behaviour id"):
        behaviour_range(["D27"])
