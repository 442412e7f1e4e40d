"""A session's function tools and its tool choice: the OpenAI Realtime `tools` and
`tool_choice` session fields, validated (B37).

`validate_tools` and `validate_tool_choice` are called by `spec.session_config.
validate_session` only; each either returns the canonical value or raises
`InvalidSessionConfig` with `bad_event` and the JSON path of the first bad value
(`session.tools[2].name`), so a client that declares a tool it misspelled learns which
field, instead of a session that silently never calls it.

The tools are kept as data: the session echoes them, the VLM stage gets them in its prompt,
and a function call the model makes is accepted only for a tool the session offers
(`ToolChoice.offers`).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from spec.errors import ErrorCode, InvalidSessionConfig
from spec.limits import MAX_TOOL_BYTES, MAX_TOOL_NESTING, MAX_TOOLS, MAX_TOOLS_BYTES

__all__ = [
    "DEFAULT_DELEGATION_TOOL",
    "TOOL_CHOICE_AUTO",
    "TOOL_CHOICE_MODES",
    "TOOL_NAME",
    "FunctionTool",
    "ToolChoice",
    "delegation_arguments",
    "function_result_text",
    "validate_tool_choice",
    "validate_tools",
]

#: a function name as OpenAI accepts it: letters, digits, `_` and `-`, at most 64
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: the string forms of `tool_choice`
TOOL_CHOICE_MODES = ("auto", "none", "required")
#: the keys a function tool may hold; others (a newer client's) are ignored, as unknown
#: event fields are
_TOOL_KEYS = ("type", "name", "description", "parameters")

_encoder = msgspec.json.Encoder()


class FunctionTool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One declared function tool (`{"type": "function", name, description, parameters}`)."""

    name: str
    description: str | None = None
    #: the JSON Schema of the arguments object, as the client gave it
    parameters: dict[str, Any] | None = None
    type: str = "function"

    def public(self) -> dict[str, Any]:
        """The wire form, as echoed in the session object."""
        tool: dict[str, Any] = {"type": "function", "name": self.name}
        if self.description is not None:
            tool["description"] = self.description
        if self.parameters is not None:
            tool["parameters"] = self.parameters
        return tool


class ToolChoice(msgspec.Struct, frozen=True, kw_only=True):
    """`tool_choice` after validation: a mode, or one named function (`mode` "function")."""

    mode: str = "auto"
    name: str | None = None

    def offers(self, name: str, tools: tuple[FunctionTool, ...]) -> bool:
        """Whether a call of `name` is one the session lets the model make."""
        if self.mode == "none" or not any(t.name == name for t in tools):
            return False
        return self.mode != "function" or self.name == name

    def forces_call(self, tools: tuple[FunctionTool, ...]) -> bool:
        """Whether a response offered `tools` must call one (section 3.8): `required`, or
        a named function; not while no tool is offered."""
        return self.mode in ("required", "function") and bool(tools)

    def public(self) -> str | dict[str, str]:
        if self.mode == "function":
            return {"type": "function", "name": self.name or ""}
        return self.mode


#: the default choice: the model calls an offered function when it sees fit
TOOL_CHOICE_AUTO = ToolChoice()

#: the function JoyAI's delegation becomes when a session offers one of this name
#: (B40); `session.extra_body.delegation_tool` (or the operator's default) names another
DEFAULT_DELEGATION_TOOL = "delegate"


def delegation_arguments(tool: FunctionTool, question: str) -> str:
    """The JSON arguments a delegated question becomes (B40): the question as the value
    of the tool's one string parameter (its only property, else its only required one,
    else `question`)."""
    properties = (tool.parameters or {}).get("properties")
    names = list(properties) if isinstance(properties, dict) else []
    required = (tool.parameters or {}).get("required")
    if len(names) == 1:
        key = names[0]
    elif isinstance(required, list) and len(required) == 1 and isinstance(required[0], str):
        key = required[0]
    else:
        key = "question"
    return _encoder.encode({key: question}).decode()


def function_result_text(name: str | None, output: str) -> str:
    """The words a follow-up response's model reads for a function's output (B39): the
    output with the function named, so a reply can say where its facts came from."""
    return f"[{name or 'function'} returned] {output}"


def _refuse(param: str, message: str) -> InvalidSessionConfig:
    return InvalidSessionConfig(message, code=ErrorCode.BAD_EVENT, param=param)


def _nesting(value: Any, limit: int) -> int:
    """How deeply `value` nests lists and dicts (iterative: stops once past `limit`)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            stack.extend(
                (child, depth) for child in (node.values() if isinstance(node, dict) else node)
            )
    return deepest


def _tool(raw: object, param: str) -> FunctionTool:
    if not isinstance(raw, dict):
        raise _refuse(param, "a tool must be an object")
    kind = raw.get("type", "function")
    if kind != "function":
        raise _refuse(f"{param}.type", f"tool type `{kind}` is not supported; use `function`")
    name = raw.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise _refuse(
            f"{param}.name",
            "a function's `name` must be 1-64 letters, digits, `_` or `-`",
        )
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise _refuse(f"{param}.description", "`description` must be a string")
    parameters = raw.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise _refuse(f"{param}.parameters", "`parameters` must be a JSON Schema object")
        schema_type = parameters.get("type", "object")
        if schema_type != "object":
            raise _refuse(f"{param}.parameters.type", "the arguments of a function are an `object`")
        if _nesting(parameters, MAX_TOOL_NESTING) > MAX_TOOL_NESTING:
            raise _refuse(
                f"{param}.parameters", f"`parameters` nests more than {MAX_TOOL_NESTING} levels"
            )
    tool = FunctionTool(name=name, description=description, parameters=parameters)
    if len(_encoder.encode(tool.public())) > MAX_TOOL_BYTES:
        raise _refuse(param, f"a tool takes at most {MAX_TOOL_BYTES} bytes of JSON")
    return tool


def validate_tools(raw: object, param: str = "session.tools") -> tuple[FunctionTool, ...]:
    """The function tools of a `tools` list (null: none), in the client's order.

    Raises:
        InvalidSessionConfig: `bad_event` with the path of the first bad value: not a list,
            more than `MAX_TOOLS`, a tool that is not a function, a bad or repeated name,
            a `parameters` that is not an object schema, or tools over their byte bounds.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _refuse(param, "`tools` must be a list of function tools")
    if len(raw) > MAX_TOOLS:
        raise _refuse(param, f"a session declares at most {MAX_TOOLS} tools, got {len(raw)}")
    tools: list[FunctionTool] = []
    seen: set[str] = set()
    total = 0
    for i, entry in enumerate(raw):
        tool = _tool(entry, f"{param}[{i}]")
        if tool.name in seen:
            raise _refuse(f"{param}[{i}].name", f"function `{tool.name}` is declared twice")
        seen.add(tool.name)
        total += len(_encoder.encode(tool.public()))
        if total > MAX_TOOLS_BYTES:
            raise _refuse(param, f"a session's tools take at most {MAX_TOOLS_BYTES} bytes of JSON")
        tools.append(tool)
    return tuple(tools)


def validate_tool_choice(
    raw: object, tools: tuple[FunctionTool, ...], param: str = "session.tool_choice"
) -> ToolChoice:
    """`auto`, `none`, `required` or `{"type": "function", "name": ...}` naming a declared
    tool (null: `auto`).

    Raises:
        InvalidSessionConfig: `bad_event` with `param` (or `param.name` for a function the
            session does not declare).
    """
    if raw is None:
        return ToolChoice()
    if isinstance(raw, str):
        if raw not in TOOL_CHOICE_MODES:
            raise _refuse(param, "`tool_choice` must be auto, none, required or a function")
        return ToolChoice(mode=raw)
    if not isinstance(raw, dict) or raw.get("type") != "function":
        raise _refuse(param, "`tool_choice` must be auto, none, required or a function")
    name = raw.get("name")
    if not isinstance(name, str) or not any(t.name == name for t in tools):
        raise _refuse(f"{param}.name", f"`tool_choice` names no declared function: `{name}`")
    return ToolChoice(mode="function", name=name)
