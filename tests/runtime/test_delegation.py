"""B31 end to end: the scripted backend delegates, a fake OpenAI-compatible background
model on 127.0.0.1 answers (or fails, or is cut off), and the answer is spoken as a
follow-up response the server creates."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from backends.base import VlmAction
from backends.remote.delegation import create_delegate
from spec import events as ev
from spec.limits import Limits
from tests.runtime.conftest import Client, Harness, eventually, hosted
from tests.runtime.fake_chat_server import FakeChatServer

pytestmark = pytest.mark.anyio

NOTE = "Let me look that up."
QUESTION = "What is the distance from the Earth to the Moon?"


@contextlib.asynccontextmanager
async def delegating_host(url: str | None, **table: Any) -> AsyncIterator[Harness]:
    """A started host on the scripted backend, with the chat server at `url` (None: none)
    as its background model."""
    delegate = None
    if url is not None:
        delegate = create_delegate({"url": url, "model": "background", **table})
    async with hosted(Limits(max_sessions=4, slow_consumer_s=0), delegate=delegate) as harness:
        yield harness


@pytest.fixture
async def background() -> AsyncIterator[FakeChatServer]:
    async with FakeChatServer() as server:
        yield server


async def ask(client: Client, text: str = "How far away is the moon?") -> None:
    part = ev.ContentPart(type="input_text", text=text)
    item = ev.ConversationItem(type="message", role="user", content=[part])
    await client.send(ev.ConversationItemCreate(item=item))
    await client.send(ev.ResponseCreate())


def transcript_of(client: Client, response_id: str) -> str:
    return next(
        e.transcript
        for e in client.seen
        if e.__struct_config__.tag == "response.output_audio_transcript.done"
        and e.response_id == response_id
    )


def created(client: Client) -> list[str]:
    return [e.response.id for e in client.seen if e.__struct_config__.tag == "response.created"]


async def test_b31_a_background_answer_is_spoken_as_a_follow_up_response(
    background: FakeChatServer,
) -> None:
    async with delegating_host(background.url) as harness:
        harness.script.reply(NOTE, action=VlmAction.DELEGATE, question=QUESTION)
        client = await harness.connect()
        await ask(client)
        note = await client.until("response.done")
        assert note.response.status == "completed"
        assert transcript_of(client, note.response.id) == NOTE  # the question is never spoken
        follow_up = await client.until("response.done")
        assert follow_up.response.id != note.response.id
        assert follow_up.response.status == "completed"
        assert transcript_of(client, follow_up.response.id) == background.answer
        [item] = follow_up.response.output
        assert item.role == "assistant"
        # what the background model was asked: its system prompt, the user's words, the question
        [request] = background.requests
        assert request["model"] == "background"
        assert request["messages"][0]["role"] == "system"
        assert QUESTION in request["messages"][-1]["content"]
        assert "How far away is the moon?" in request["messages"][-1]["content"]
        # the follow-up is an ordinary turn: the session answers the next one
        harness.script.reply("Anything else?")
        await ask(client, "thanks")
        assert (await client.until("response.done")).response.status == "completed"


@pytest.mark.parametrize("interrupt", ["response.cancel", "output_audio_buffer.clear"])
async def test_b31_an_interrupt_aborts_the_delegation_and_its_late_answer_is_dropped(
    background: FakeChatServer, interrupt: str
) -> None:
    background.mode = "hold"
    async with delegating_host(background.url) as harness:
        harness.script.reply(NOTE, action=VlmAction.DELEGATE, question=QUESTION)
        client = await harness.connect()
        await ask(client)
        await client.until("response.done")
        await eventually("the question at the background model", lambda: background.held)
        if interrupt == "response.cancel":
            await client.send(ev.ResponseCancel(event_id="cancel"))
        else:
            await client.send(ev.OutputAudioBufferClear(event_id="clear"))
        await eventually("the aborted request", lambda: background.disconnected == 1)
        background.release()  # too late: the request is gone, and no answer follows
        harness.script.reply("Sure.")
        await ask(client, "never mind")
        done = await client.until("response.done")
        assert transcript_of(client, done.response.id) == "Sure."
        assert created(client) == ["resp_1", done.response.id]  # no follow-up in between
        assert not [e for e in client.seen if e.__struct_config__.tag == "error"]


async def test_b31_an_endpoint_failure_is_a_typed_error_and_the_session_goes_on(
    background: FakeChatServer,
) -> None:
    background.mode = "fail"
    async with delegating_host(background.url) as harness:
        harness.script.reply(NOTE, action=VlmAction.DELEGATE, question=QUESTION)
        client = await harness.connect()
        await ask(client)
        note = await client.until("response.done")
        assert note.response.status == "completed"  # the note was spoken all the same
        # the failure may come before or after the note ends: they race
        errors = [e for e in client.seen if e.__struct_config__.tag == "error"]
        error = errors[0] if errors else await client.until("error")
        assert error.error.code == "delegation_failed"
        assert error.error.type == "server_error"
        harness.script.reply("Still here.")
        await ask(client, "hello?")
        done = await client.until("response.done")
        assert done.response.status == "completed"
        assert transcript_of(client, done.response.id) == "Still here."


async def test_b31_without_a_background_model_the_note_is_spoken_and_the_question_dropped() -> None:
    async with delegating_host(None) as harness:
        harness.script.reply(NOTE, action=VlmAction.DELEGATE, question=QUESTION)
        client = await harness.connect()
        await ask(client)
        note = await client.until("response.done")
        assert transcript_of(client, note.response.id) == NOTE
        harness.script.reply("Next.")
        await ask(client, "next")
        done = await client.until("response.done")
        assert transcript_of(client, done.response.id) == "Next."
        assert created(client) == [note.response.id, done.response.id]
        tags: list[Any] = client.tags()
        assert "error" not in tags
