"""Protocol documents generated from the event unions: JSON Schema and AsyncAPI 3.0.

Pure functions returning text; `tools/gen_docs.py` writes them to `docs/`, and a test
fails when the committed copies are stale.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import msgspec

from spec.events import ClientEventT, ServerEventT
from spec.version import PROTOCOL_VERSION, __version__

__all__ = ["asyncapi_yaml", "protocol_schema_json"]


def _clean(node: Any) -> Any:
    """Descriptions come from docstrings; msgspec versions differ in how they dedent them,
    so normalize them here to keep the committed documents stable across versions."""
    if isinstance(node, dict):
        return {
            k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else _clean(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def _schema() -> dict[str, Any]:
    (client, server), components = msgspec.json.schema_components([ClientEventT, ServerEventT])
    client, server, components = _clean(client), _clean(server), _clean(components)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "joyduplex realtime protocol",
        "description": f"Wire events of protocol version {PROTOCOL_VERSION}.",
        "$defs": {
            **components,
            "ClientEvent": client,
            "ServerEvent": server,
        },
    }


def protocol_schema_json() -> str:
    """`docs/protocol.schema.json`: both unions, with a tag discriminator each."""
    text = json.dumps(_schema(), indent=2, sort_keys=True)
    return text + "\n"


def _tags(union: Any) -> list[tuple[str, str, str]]:
    info = msgspec.inspect.type_info(union)
    assert isinstance(info, msgspec.inspect.UnionType)
    out = []
    for t in info.types:
        assert isinstance(t, msgspec.inspect.StructType)
        out.append((str(t.tag), t.cls.__name__, (t.cls.__doc__ or "").strip().splitlines()[0]))
    return sorted(out)


def _yaml(value: Any, indent: int = 0) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict | list) and v:
                lines.append(f"{pad}{k}:")
                lines.extend(_yaml(v, indent + 1))
            else:
                lines.append(f"{pad}{k}: {json.dumps(v)}")
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict | list) and v:
                sub = _yaml(v, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {json.dumps(v)}")
    return lines


def asyncapi_yaml() -> str:
    """`docs/asyncapi.yaml`: the `/v1/realtime` channel and its messages (AsyncAPI 3.0)."""
    client, server = _tags(ClientEventT), _tags(ServerEventT)
    messages: dict[str, Any] = {}
    for tag, name, summary in [*client, *server]:
        messages[name] = {
            "name": tag,
            "summary": summary,
            "contentType": "application/json",
            "payload": {"$ref": f"protocol.schema.json#/$defs/{name}"},
        }
    doc = {
        "asyncapi": "3.0.0",
        "info": {
            "title": "joyduplex realtime API",
            "version": __version__,
            "description": (
                "Full-duplex voice and camera sessions with a vision-language model. "
                "OpenAI Realtime GA event names plus duplex extensions; one JSON object "
                f"per websocket text frame, discriminated by `type`. Protocol {PROTOCOL_VERSION}."
            ),
        },
        "servers": {
            "local": {"host": "127.0.0.1:8000", "protocol": "ws", "description": "joyduplex serve"}
        },
        "channels": {
            "realtime": {
                "address": "/v1/realtime",
                "description": "A realtime session (alias /v1/duplex).",
                "messages": {
                    name: {"$ref": f"#/components/messages/{name}"}
                    for _, name, _ in [*client, *server]
                },
            }
        },
        "operations": {
            "sendClientEvent": {
                "action": "receive",
                "channel": {"$ref": "#/channels/realtime"},
                "summary": "Events a client sends to the server.",
                "messages": [{"$ref": f"#/channels/realtime/messages/{n}"} for _, n, _ in client],
            },
            "receiveServerEvent": {
                "action": "send",
                "channel": {"$ref": "#/channels/realtime"},
                "summary": "Events the server sends to a client.",
                "messages": [{"$ref": f"#/channels/realtime/messages/{n}"} for _, n, _ in server],
            },
        },
        "components": {"messages": messages},
    }
    return (
        "# generated by tools/gen_docs.py from spec/events; do not edit\n"
        + "\n".join(_yaml(doc))
        + "\n"
    )
