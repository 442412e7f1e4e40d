"""Function calling end to end (B37-B39): the official `openai` SDK, unchanged, declares a
function tool over /v1/realtime, receives the call with its arguments streamed, sends the
output and hears the follow-up reply (scripted backend)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.openai_sdk import sdk_client
from tests.transport.conftest import LiveServer

pytest.importorskip("openai")

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ARGUMENTS = json.dumps({"city": "Paris"})


async def _until(conn: Any, kind: str, seen: list[Any]) -> Any:
    async for event in conn:
        seen.append(event)
        if event.type == "error":
            raise AssertionError(event.error)
        if event.type == kind:
            return event
    raise AssertionError(f"the connection ended before {kind}")


def test_b38_the_openai_sdk_declares_a_tool_gets_the_call_and_hears_the_follow_up(
    live_server: LiveServer,
) -> None:
    script = live_server.script
    script.call("get_weather", ARGUMENTS, chunk=4).reply("It is sunny in Paris.")

    async def run() -> dict[str, Any]:
        client = sdk_client(live_server.url)
        first: list[Any] = []
        second: list[Any] = []
        async with client.realtime.connect(model="joyai") as conn:
            created = await _until(conn, "session.created", first)
            await conn.session.update(
                session={
                    "type": "realtime",
                    "output_modalities": ["audio"],
                    "audio": {"input": {"turn_detection": None}},
                    "tools": [WEATHER],
                    "tool_choice": "auto",
                }
            )
            updated = await _until(conn, "session.updated", first)
            await conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "What is the weather in Paris?"}],
                }
            )
            await conn.response.create()
            done = await _until(conn, "response.done", first)
            [call] = done.response.output
            await conn.conversation.item.create(
                item={
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": json.dumps({"sky": "sunny"}),
                }
            )
            await conn.response.create()
            follow_up = await _until(conn, "response.done", second)
        await client.close()
        return {
            "created": created,
            "updated": updated,
            "first": first,
            "call": call,
            "second": second,
            "follow_up": follow_up,
        }

    got = asyncio.run(asyncio.wait_for(run(), 30))
    # the SDK parses every event into its own types: the protocol is OpenAI's
    assert got["updated"].session.tools[0].name == "get_weather"
    assert got["updated"].session.tool_choice == "auto"
    first = got["first"]
    deltas = [e for e in first if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) == -(-len(ARGUMENTS) // 4) and "".join(e.delta for e in deltas) == ARGUMENTS
    [args_done] = [e for e in first if e.type == "response.function_call_arguments.done"]
    call = got["call"]
    assert (call.type, call.name, call.arguments, call.status) == (
        "function_call",
        "get_weather",
        ARGUMENTS,
        "completed",
    )
    assert args_done.call_id == call.call_id == deltas[0].call_id
    assert [e.type for e in first].count("response.output_item.added") == 1
    # the follow-up speaks from the output
    second = got["second"]
    output_added = next(e for e in second if e.type == "conversation.item.added")
    assert (output_added.item.type, output_added.item.call_id) == (
        "function_call_output",
        call.call_id,
    )
    assert any(e.type == "response.output_audio.delta" for e in second)
    transcript = [e for e in second if e.type == "response.output_audio_transcript.done"]
    assert transcript[-1].transcript == "It is sunny in Paris."
    assert got["follow_up"].response.status == "completed"
    [first_vlm, follow_vlm] = script.requests_of("vlm")[-2:]
    assert [t.name for t in first_vlm.tools] == ["get_weather"]  # type: ignore[attr-defined]
    assert follow_vlm.context.transcript == '[get_weather returned] {"sky": "sunny"}'  # type: ignore[attr-defined]


def test_b38_under_required_the_openai_sdk_is_told_when_the_model_made_no_call(
    live_server: LiveServer,
) -> None:
    """With `tool_choice: required`, a reply without a call fails unspoken with a typed
    error; the next turn, which calls, completes with the call."""
    live_server.script.reply("It is sunny in Paris.").call("get_weather", ARGUMENTS)

    async def run() -> tuple[list[Any], list[Any]]:
        client = sdk_client(live_server.url)
        first: list[Any] = []
        second: list[Any] = []
        async with client.realtime.connect(model="joyai") as conn:
            await conn.session.update(
                session={
                    "type": "realtime",
                    "audio": {"input": {"turn_detection": None}},
                    "tools": [WEATHER],
                    "tool_choice": "required",
                }
            )
            for seen in (first, second):
                await conn.conversation.item.create(
                    item={
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "Weather in Paris?"}],
                    }
                )
                await conn.response.create()
                async for event in conn:
                    seen.append(event)
                    if event.type == "response.done":
                        break
        await client.close()
        return first, second

    first, second = asyncio.run(asyncio.wait_for(run(), 30))
    [error] = [e for e in first if e.type == "error"]
    assert (error.error.type, error.error.code) == ("server_error", "tool_choice_unmet")
    done = first[-1].response
    assert (done.status, done.status_details.reason, done.output) == (
        "failed",
        "tool_choice_unmet",
        [],
    )
    assert not any(e.type.startswith("response.output_audio") for e in first)
    assert not any(e.type == "error" for e in second)
    [call] = second[-1].response.output
    assert (second[-1].response.status, call.type, call.name) == (
        "completed",
        "function_call",
        "get_weather",
    )
