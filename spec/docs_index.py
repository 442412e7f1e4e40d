"""Every generated document: path under the repository root -> its renderer; and the
hand-written documents with generated spans: path -> what refreshes those spans."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.behaviours_doc import BEHAVIOURS_DOC, behaviours_markdown, with_behaviour_range
from spec.client_tables_export import CLIENT_EXPORTS
from spec.diagrams import DIAGRAMS, diagrams_of
from spec.schema import asyncapi_yaml, protocol_schema_json
from spec.tables.client_constants import CLIENT_TABLES

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DOCUMENTS", "MARKED_DOCUMENTS"]

DOCUMENTS: dict[str, Callable[[], str]] = {
    "docs/protocol.schema.json": protocol_schema_json,
    "docs/asyncapi.yaml": asyncapi_yaml,
    BEHAVIOURS_DOC: behaviours_markdown,
    **DIAGRAMS,
    **diagrams_of(CLIENT_TABLES),
    **CLIENT_EXPORTS,
}

#: hand-written documents that quote the behaviour catalogue's id range between the
#: markers of `spec.behaviours_doc` (`<!-- behaviours:range -->B1..B34<!-- /... -->`):
#: path -> the function that rewrites those spans of the document's text
MARKED_DOCUMENTS: dict[str, Callable[[str], str]] = {
    "README.md": with_behaviour_range,
    "docs/architecture.md": with_behaviour_range,
    "docs/session-semantics.md": with_behaviour_range,
}
