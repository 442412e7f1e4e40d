"""Every generated document: path under the repository root -> its renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.behaviours_doc import BEHAVIOURS_DOC, behaviours_markdown
from spec.client_tables_export import CLIENT_EXPORTS
from spec.diagrams import DIAGRAMS, diagrams_of
from spec.schema import asyncapi_yaml, protocol_schema_json
from spec.tables.client_constants import CLIENT_TABLES

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DOCUMENTS"]

DOCUMENTS: dict[str, Callable[[], str]] = {
    "docs/protocol.schema.json": protocol_schema_json,
    "docs/asyncapi.yaml": asyncapi_yaml,
    BEHAVIOURS_DOC: behaviours_markdown,
    **DIAGRAMS,
    **diagrams_of(CLIENT_TABLES),
    **CLIENT_EXPORTS,
}
