"""The Python client answers function calls (B38, B39): `DuplexClient.connect(...,
functions=...)` runs the called function (sync or async), sends its output and asks for
the follow-up, whose reply it hears; a missing or failing function is answered with an
error the model hears, and the session goes on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from clients.duplex_client import DuplexClient
from spec import events as ev
from tests.transport.conftest import LiveServer

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HANG_GUARD_S = 30.0  # a hang guard only, never a speed bound


async def _ask(client: DuplexClient, text: str) -> None:
    await client.update_session(tools=[WEATHER], turn_detection=None)
    await client.send(
        ev.ConversationItemCreate(
            item=ev.ConversationItem(content=[ev.ContentPart(type="input_text", text=text)])
        )
    )
    await client.create_response()


async def _follow_up(client: DuplexClient) -> tuple[ev.ResponseDone, ev.ResponseDone]:
    """The call's response.done, then the follow-up's."""
    first = await client.wait_for("response.done", timeout=HANG_GUARD_S)
    second = await client.wait_for("response.done", timeout=HANG_GUARD_S)
    assert isinstance(first, ev.ResponseDone) and isinstance(second, ev.ResponseDone)
    return first, second


def test_b39_the_python_client_runs_an_async_function_and_hears_the_follow_up(
    live_server: LiveServer,
) -> None:
    script = live_server.script
    script.call("get_weather", json.dumps({"city": "Paris"}), chunk=3).reply("Sunny in Paris.")
    seen: list[dict[str, Any]] = []

    async def get_weather(arguments: dict[str, Any]) -> dict[str, Any]:
        seen.append(arguments)
        await asyncio.sleep(0)  # a coroutine function is awaited in the client's tasks
        return {"sky": "sunny"}

    async def test() -> None:
        async with DuplexClient.connect(
            live_server.ws_url, functions={"get_weather": get_weather}
        ) as client:
            await _ask(client, "weather in Paris?")
            first, second = await _follow_up(client)
            assert first.response.output[0].type == "function_call"
            outputs = [
                e.item
                for e in client.history
                if isinstance(e, ev.ConversationItemAdded) and e.item.type == "function_call_output"
            ]
            assert [o.output for o in outputs] == ['{"sky": "sunny"}']
            transcripts = [
                e.transcript
                for e in client.history
                if isinstance(e, ev.ResponseOutputAudioTranscriptDone)
                and e.response_id == second.response.id
            ]
            assert transcripts == ["Sunny in Paris."]

    asyncio.run(test())
    assert seen == [{"city": "Paris"}]
    assert script.requests_of("vlm")[-1].context.transcript == (  # type: ignore[attr-defined]
        '[get_weather returned] {"sky": "sunny"}'
    )


def test_b39_a_function_that_raises_is_answered_with_its_error(live_server: LiveServer) -> None:
    live_server.script.call("get_weather", "{}").reply("I could not check.")

    def get_weather(arguments: dict[str, Any]) -> str:
        raise RuntimeError("the weather service is down")

    async def test() -> None:
        async with DuplexClient.connect(
            live_server.ws_url, functions={"get_weather": get_weather}
        ) as client:
            await _ask(client, "weather?")
            await _follow_up(client)

    asyncio.run(test())
    transcript = live_server.script.requests_of("vlm")[-1].context.transcript  # type: ignore[attr-defined]
    assert transcript == '[get_weather returned] {"error": "the weather service is down"}'


def test_b39_an_answer_before_the_calls_response_is_done_still_gets_the_follow_up() -> None:
    """The order a fast function makes likely: its answer goes before the call's
    `response.done`; the follow-up is then asked for at that done (found flaky under
    load: that `response.create` was dropped)."""
    sent: list[str] = []

    async def send_text(text: str) -> None:
        sent.append(json.loads(text)["type"])

    async def test() -> None:
        from clients.function_runner import FunctionRunner
        from core.statemachines.client_outbox import EventIds

        runner = FunctionRunner({"get_weather": lambda args: "sunny"}, EventIds(), send_text)
        call = ev.ConversationItem(
            id="item_2",
            type="function_call",
            call_id="call_1",
            name="get_weather",
            arguments="{}",
            status="completed",
        )
        [to_run] = await runner.server_event(
            ev.ResponseOutputItemDone(response_id="resp_1", item=call)
        )
        await runner.run(to_run)
        assert sent == ["conversation.item.create"]
        done = ev.ResponseDone(response=ev.Response(id="resp_1", status="completed"))
        assert await runner.server_event(done) == []
        assert sent == ["conversation.item.create", "response.create"]

    asyncio.run(test())
