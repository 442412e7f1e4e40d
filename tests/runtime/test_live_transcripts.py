"""B33 through the runtime: live transcript deltas reach the client, and a turn that ends
in the pause a partial heard is transcribed once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from backends.base import AsrRequest
from runtime.stage_executor import StageTimeouts
from spec import events as ev
from spec.limits import Limits
from tests.runtime.conftest import HANG_GUARD_S, Harness, eventually, hosted, tone

pytestmark = pytest.mark.anyio

VAD = {"turn_detection": {"type": "server_vad"}}


async def _send(client, pcm: bytes) -> None:  # type: ignore[no-untyped-def]
    for at in range(0, len(pcm), 640):  # 20 ms appends
        await client.send(ev.InputAudioBufferAppend(audio=pcm[at : at + 640]))


async def test_b33_live_deltas_reach_the_client_before_the_completed_transcript(
    harness: Harness,
) -> None:
    harness.script.say_partial("what", "what colour is this").say("never asked")
    client = await harness.connect(config=VAD)
    await _send(client, tone(400) + bytes(32 * 320))  # speech, then a 320 ms pause
    first = await client.until("conversation.item.input_audio_transcription.delta")
    assert first.delta == "what"
    await _send(client, tone(400) + bytes(32 * 800))  # more speech, then the turn ends
    completed = await client.until("conversation.item.input_audio_transcription.completed")
    assert (completed.item_id, completed.transcript) == (first.item_id, "what colour is this")
    assert (await client.until("response.done")).response.status == "completed"
    # the turn ended in the pause the second partial heard (its delta may come after the
    # commit and is then dropped): the same audio, so the commit's transcription is that
    # partial's, not one more ASR call
    asked = harness.script.requests_of("asr")
    assert [r.partial for r in asked if isinstance(r, AsrRequest)] == [True, True]
    tags = client.tags()
    assert tags.index("conversation.item.input_audio_transcription.delta") < tags.index(
        "input_audio_buffer.committed"
    )


async def test_b33_without_partials_from_the_asr_no_delta_is_sent(harness: Harness) -> None:
    harness.script.say("what colour is this")
    client = await harness.connect(config=VAD)
    await _send(client, tone(400) + bytes(32 * 320) + tone(400) + bytes(32 * 800))
    completed = await client.until("conversation.item.input_audio_transcription.completed")
    assert completed.transcript == "what colour is this"
    assert "conversation.item.input_audio_transcription.delta" not in client.tags()
    assert len(harness.script.requests_of("asr")) == 1


SEMANTIC = {"turn_detection": {"type": "semantic_vad", "eagerness": "medium"}}

#: the verdict waits for its pause's words at most its budget on the session clock: here
#: longer than any test waits, so a loaded machine never turns "held" into "without words"
PATIENT = StageTimeouts(turn_end=HANG_GUARD_S)


@pytest.fixture
async def patient() -> AsyncIterator[Harness]:
    async with hosted(
        Limits(max_outbound_events=32, max_sessions=8, slow_consumer_s=0), timeouts=PATIENT
    ) as h:
        yield h


async def _verdicts_fed(harness: Harness, count: int) -> None:
    """Wait until `count` verdicts reached the session: the executor records a verdict's
    latency and hands it over in one step, with no await between."""
    await eventually(
        f"{count} verdicts",
        lambda: (
            harness.host.metrics.value("joyduplex_stage_latency_seconds_count", stage="turn_end")
            >= count
        ),
    )


@pytest.mark.parametrize(
    ("first_pause_words", "punctuates", "turns"),
    [
        ("is the cup bigger than", False, 1),  # a word that cannot close a sentence
        ("my favourite colour", True, 1),  # no closing mark from an ASR that sets them
        ("my favourite colour", False, 2),  # ... from one that never does: no cue
        ("is this red?", True, 2),  # finished words: the model's verdict stands
    ],
)
async def test_b32_the_verdict_weighs_the_words_the_pause_partial_heard(
    patient: Harness, first_pause_words: str, punctuates: bool, turns: int
) -> None:
    """The end-of-turn model calls both pauses finished; the runtime hands the verdict the
    pause partial's words, which hold the first pause when they trail off.

    The order is forced, not raced: the partial is parked until its verdict has reached the
    session (which then waits for the words), and the next speech is sent only once the
    words have decided the pause. Speech that outran the verdict would make it stale and
    the two pauses one turn whatever the words said."""
    harness = patient
    harness.script.judge_turns(0.95, 0.95)
    harness.script.say_partial(first_pause_words, "the other one?")
    harness.script.punctuates = punctuates
    harness.script.park("asr")
    client = await harness.connect(config=SEMANTIC)
    await _send(client, tone(400) + bytes(32 * 400))  # speech, a 400 ms pause
    await harness.script.wait_parked("asr")  # the pause's partial
    await _verdicts_fed(harness, 1)  # its verdict came first: held for the words
    harness.script.release("asr")
    # the words go out, and the held verdict is applied with them, in one step
    await client.until("conversation.item.input_audio_transcription.delta")
    await _send(client, tone(400) + bytes(32 * 4200))  # speech, silence past the wait
    for _ in range(turns):
        await client.until("input_audio_buffer.committed")
    await client.until("response.done")
    tags = client.tags()
    assert tags.count("input_audio_buffer.speech_started") == turns
    assert tags.count("input_audio_buffer.committed") == turns
    assert len(harness.script.requests_of("turn_end")) == 2


async def test_b32_a_pause_while_a_cadence_partial_runs_still_reaches_the_verdict_with_its_words(
    patient: Harness,
) -> None:
    """3.3 s of speech: a cadence partial is asked and is still running (parked) when the
    pause comes. The pause asks its own (B33), the verdict waits for that one's words and
    they trail off, so the pause the model called finished is held: one turn, not two."""
    harness = patient
    harness.script.judge_turns(0.95, 0.95)
    harness.script.say_partial("is the cup bigger than", "is the")
    harness.script.punctuates = True
    harness.script.park("asr")
    client = await harness.connect(config=SEMANTIC)
    await _send(client, tone(3300) + bytes(32 * 400))  # past the 3 s cadence, a pause
    _, pause = await harness.script.wait_parked("asr", 2)
    await _verdicts_fed(harness, 1)  # held for the pause's words (else speech outruns it)
    harness.script.release("asr", pause)  # answers first: "is the cup bigger than"
    delta = await client.until("conversation.item.input_audio_transcription.delta")
    assert delta.delta == "is the cup bigger than"
    harness.script.release("asr")  # the superseded one answers "is the": dropped
    await _send(client, tone(400) + bytes(32 * 4200))  # speech, silence past the wait
    await client.until("input_audio_buffer.committed")
    await client.until("response.done")
    tags = client.tags()
    assert tags.count("input_audio_buffer.committed") == 1
    assert tags.count("conversation.item.input_audio_transcription.delta") == 1
    # the cadence's and the first pause's partials, then the last pause's, which the
    # commit reuses (the turn ended in that pause): no ASR call of its own
    asked = harness.script.requests_of("asr")
    assert [r.partial for r in asked if isinstance(r, AsrRequest)] == [True, True, True]
