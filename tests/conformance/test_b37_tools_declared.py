"""B37: a session declares function tools and a tool choice; `session.updated` echoes
them, and a malformed or oversized declaration is a typed error naming its field that
changes nothing (docs/session-semantics.md 3.7), driven on `SessionProtocol` alone."""

from __future__ import annotations

from typing import Any

import pytest

from spec import events as ev
from spec.errors import ErrorCode
from spec.limits import MAX_TOOL_BYTES, MAX_TOOL_NESTING, MAX_TOOLS
from tests.conformance.harness import Driver

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def _nested(levels: int) -> dict[str, Any]:
    """An object schema whose properties nest `levels` objects deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


def update(**session: Any) -> ev.SessionUpdate:
    return ev.SessionUpdate(session=ev.SessionPatch(**session))


def test_b37_session_update_with_a_function_tool_is_echoed_not_dropped() -> None:
    # the regression: tools were answered `session.updated` with the tools silently dropped
    d = Driver()
    out = d.send(update(tools=[WEATHER], tool_choice="required"))
    [updated] = d.events("session.updated", out)
    assert updated.session.tools == [WEATHER]
    assert updated.session.tool_choice == "required"
    assert d.p.config.tools[0].name == "get_weather"


def test_b37_a_named_tool_choice_must_name_a_declared_function() -> None:
    d = Driver()
    d.send(update(tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}))
    assert d.p.config.tool_choice.name == "get_weather"
    error = d.refuse(update(tool_choice={"type": "function", "name": "book_flight"}))
    assert error.code is ErrorCode.BAD_EVENT and error.param == "session.tool_choice.name"
    # removing the named tool while the choice names it is refused too
    error = d.refuse(update(tools=[]))
    assert error.param == "session.tools"


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ("get_weather", "session.tools"),
        ([42], "session.tools[0]"),
        ([{**WEATHER, "type": "mcp"}], "session.tools[0].type"),
        ([{**WEATHER, "name": "get weather!"}], "session.tools[0].name"),
        ([{**WEATHER, "name": ""}], "session.tools[0].name"),
        ([{**WEATHER, "name": "x" * 65}], "session.tools[0].name"),
        ([{**WEATHER, "description": 7}], "session.tools[0].description"),
        ([{**WEATHER, "parameters": "city"}], "session.tools[0].parameters"),
        ([{**WEATHER, "parameters": {"type": "array"}}], "session.tools[0].parameters.type"),
        ([{**WEATHER, "parameters": _nested(MAX_TOOL_NESTING + 1)}], "session.tools[0].parameters"),
        ([WEATHER, WEATHER], "session.tools[1].name"),
        ([{**WEATHER, "description": "x" * MAX_TOOL_BYTES}], "session.tools[0]"),
        (
            [{**WEATHER, "name": f"f{i}"} for i in range(MAX_TOOLS + 1)],
            "session.tools",
        ),
    ],
)
def test_b37_malformed_or_oversized_tools_are_refused_with_their_path(
    tools: object, param: str
) -> None:
    d = Driver()
    d.send(update(tools=[WEATHER]))
    error = d.refuse(update(tools=tools, instructions="changed"))
    assert error.code is ErrorCode.BAD_EVENT and error.param == param
    assert [t.name for t in d.p.config.tools] == ["get_weather"]  # nothing changed
    assert d.p.config.instructions is None


@pytest.mark.parametrize("choice", ["sometimes", {"type": "mcp"}, 3])
def test_b37_an_unknown_tool_choice_is_refused(choice: object) -> None:
    error = Driver().refuse(update(tool_choice=choice))
    assert error.code is ErrorCode.BAD_EVENT and error.param == "session.tool_choice"


def test_b37_null_tools_clear_them_and_tool_choice_defaults_to_auto() -> None:
    d = Driver()
    d.send(update(tools=[WEATHER], tool_choice="none"))
    out = d.send(update(tools=None, tool_choice=None))
    [updated] = d.events("session.updated", out)
    assert updated.session.tools == [] and updated.session.tool_choice == "auto"


def test_b37_an_unknown_key_of_a_tool_is_ignored() -> None:
    d = Driver()
    d.send(update(tools=[{**WEATHER, "strict": True}]))
    assert d.p.config.tools[0].public() == WEATHER
