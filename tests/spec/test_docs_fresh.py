"""Generated documents in docs/ match what spec/ generates now (run `make docs`)."""

from __future__ import annotations

import json
import pathlib

import pytest

from spec.docs_index import DOCUMENTS

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
