"""Every generated document: path under the repository root -> its renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.diagrams import DIAGRAMS
from spec.schema import asyncapi_yaml, protocol_schema_json

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DOCUMENTS"]

DOCUMENTS: dict[str, Callable[[], str]] = {
    "docs/protocol.schema.json": protocol_schema_json,
    "docs/asyncapi.yaml": asyncapi_yaml,
    **DIAGRAMS,
}
