"""The bounded summary memory of the turns the VLM's history window drops (B29), in both
stages that run the JoyAI weights: a background summary by the same model when the
window overflows, shown with later prompts; bounded in sessions, size and time; a
failure never touches a reply; off by default and with the setting.

Every wait is for an event (a job settling, a gate), never for time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from backends.base import HistoryTurn, PromptContext, VlmAction, VlmDecisionResult, VlmRequest
from backends.gpu.engine_api import EnginePrompt, Sampling
from backends.gpu.placement import PlacementError, default_placement, parse_placement
from backends.gpu.vlm import VlmStage
from backends.joyai.memory import (
    MAX_LINES,
    SummaryMemory,
    SummarySettings,
    cut_at_sentence,
    session_of,
)
from backends.joyai.prompt import SUMMARY_HEADER, build_prompt
from backends.remote.config import RemoteConfigError, StageConfig, parse_remote_config
from backends.remote.stages import RemoteVlm
from runtime.host import SessionHost
from spec import events as ev
from spec.session_config import DEFAULT_INSTRUCTIONS
from tests.backends.remote_fleet import FakeReplica
from tests.backends.test_gpu_stages import FakeEngine
from tests.backends.test_remote_turns import (  # noqa: F401 (fleet: a fixture)
    QUESTION,
    Client,
    _jpeg,
    fleet,
    remote_table,
    serve_one,
    with_host,
)

SUMMARY = "The user asked about the red door. The assistant said it was shut."
REPLY = "</response> The door is open now."


def _history(pairs: int) -> PromptContext:
    """`pairs` earlier question/answer ticks with times, then a camera tick: far over a
    512-token window at one token per word."""
    turns: list[HistoryTurn] = []
    times: list[float | None] = []
    for i in range(pairs):
        turns.append(HistoryTurn("user", f"Question number {i} about the red door, is it open?"))
        times.append(float(i))
        turns.append(HistoryTurn("assistant", f"Answer number {i}: the red door is shut."))
        times.append(None)
    return PromptContext(
        system=DEFAULT_INSTRUCTIONS,
        history=tuple(turns),
        transcript="And now?",
        time_s=float(pairs),
        history_times_s=tuple(times),
    )


class SummaryEngine(FakeEngine):
    """Replies with `REPLY`; a summary job (`.../summary-N`) gets the next scripted
    behaviour: a text, "hang" (until `gate` is set), or "fail"."""

    def __init__(self, *summaries: str) -> None:
        super().__init__([REPLY])
        self.summaries = list(summaries)
        self.gate = anyio.Event()
        self.summary_started = anyio.Event()

    def summary_jobs(self) -> list[tuple[str, EnginePrompt, Sampling]]:
        return [s for s in self.submitted if "/summary-" in s[0]]

    def replies(self) -> list[tuple[str, EnginePrompt, Sampling]]:
        return [s for s in self.submitted if "/summary-" not in s[0]]

    async def submit(self, request_id: str, prompt: EnginePrompt, sampling: Sampling) -> Any:
        if "/summary-" not in request_id:
            return await super().submit(request_id, prompt, sampling)
        self.submitted.append((request_id, prompt, sampling))
        return self._summary(self.summaries.pop(0))

    async def _summary(self, behaviour: str) -> AsyncIterator[str]:
        self.summary_started.set()
        if behaviour == "hang":
            await self.gate.wait()
        if behaviour == "fail":
            raise RuntimeError("the summary request failed")
        await anyio.sleep(0)
        yield behaviour


def _stage(engine: FakeEngine, **summary: Any) -> VlmStage:
    placement = replace(default_placement().vlm, max_model_len=512)
    settings = SummarySettings(**{"enabled": True, **summary})
    return VlmStage(engine, placement, sampling=Sampling(max_tokens=64), summary=settings)


async def _ask(stage: VlmStage | RemoteVlm, request_id: str, context: PromptContext) -> Any:
    return [out async for out in stage.generate(VlmRequest(request_id, context))]


async def _said(stage: VlmStage | RemoteVlm, request_id: str, context: PromptContext) -> Any:
    """The decision of one request (its deltas streamed before it), its request id left
    out so decisions of different requests compare."""
    return replace((await _ask(stage, request_id, context))[-1], request_id="")


SPOKEN = VlmDecisionResult("", VlmAction.SPEAK, "The door is open now.")


def test_b29_an_over_budget_history_starts_one_background_summary_and_a_later_prompt_shows_it() -> (
    None
):
    engine = SummaryEngine(SUMMARY)

    async def main() -> None:
        async with _stage(engine) as stage:
            first = await _ask(stage, "sess_a/resp_1", _history(40))
            assert (
                replace(first[-1], request_id="") == SPOKEN
            )  # the reply did not wait for the summary
            await stage.memory.settled()
            assert len(engine.summary_jobs()) == 1
            job_id, prompt, sampling = engine.summary_jobs()[0]
            assert job_id == "sess_a/summary-1"
            assert prompt.images == ()  # text only
            assert "<0.0 seconds> Q: Question number 0" in prompt.text
            assert "A: Answer number 0: the red door is shut." in prompt.text
            assert sampling.max_tokens == 1200 // 3
            # the first prompt had no summary yet; the next one opens with it
            assert SUMMARY_HEADER not in engine.replies()[0][1].text
            await _ask(stage, "sess_a/resp_2", _history(41))
            later = engine.replies()[1][1].text
            assert f"{SUMMARY_HEADER}\n{SUMMARY}\n\n" in later
            assert later.index(SUMMARY_HEADER) < later.index("[User Query")
            # another session's prompt is untouched
            await _ask(stage, "sess_b/resp_1", PromptContext(system="s", transcript="Hi?"))
            assert SUMMARY_HEADER not in engine.replies()[2][1].text

    anyio.run(main)


def test_b29_the_summary_with_the_window_stays_within_the_budget() -> None:
    context = _history(40)
    words = lambda text: len(text.split())  # noqa: E731
    plain = build_prompt(context, count_tokens=words, budget_tokens=448)
    summarised = build_prompt(context, count_tokens=words, budget_tokens=448, summary=SUMMARY)
    assert summarised.prompt_tokens <= 448
    # the summary is a fixed cost; turns leave a whole block at a time (prompt.py), so it
    # may fit in the block's room
    assert summarised.dropped_turns >= plain.dropped_turns
    assert build_prompt(context, count_tokens=words, budget_tokens=448, summary=None) == plain


def test_b29_a_failed_or_timed_out_summary_leaves_the_reply_alone_and_keeps_the_old_summary() -> (
    None
):
    engine = SummaryEngine(SUMMARY, "hang", "fail")

    async def main() -> None:
        async with _stage(engine, timeout_s=0.05) as stage:
            await _ask(stage, "sess_a/resp_1", _history(40))
            await stage.memory.settled()
            state = stage.memory.state("sess_a")
            assert state is not None and state.summary == SUMMARY
            # a new batch left the window: its job outlives summary_timeout_s
            assert await _said(stage, "sess_a/resp_2", _history(48)) == SPOKEN
            await stage.memory.settled()
            assert state.failures == 1 and state.summary == SUMMARY
            # the failure is retried with the next batch only (no turn left the window
            # since: turns leave by whole blocks, prompt.py); that job fails outright
            assert await _said(stage, "sess_a/resp_3", _history(48)) == SPOKEN
            assert len(engine.summary_jobs()) == 2
            assert await _said(stage, "sess_a/resp_4", _history(58)) == SPOKEN
            await stage.memory.settled()
            assert len(engine.summary_jobs()) == 3
            assert state.failures == 2 and state.summary == SUMMARY
            # the kept summary still opens the prompts, and every reply was spoken
            assert await _said(stage, "sess_a/resp_5", _history(58)) == SPOKEN
            assert SUMMARY in engine.replies()[-1][1].text

    anyio.run(main)


def test_b29_with_summary_memory_off_no_summary_job_runs_and_prompts_are_unchanged() -> None:
    engine = SummaryEngine(SUMMARY)
    placement = replace(default_placement().vlm, max_model_len=512)
    assert placement.summary_memory is False  # off by default

    async def main() -> None:
        async with VlmStage(engine, placement, sampling=Sampling(max_tokens=64)) as stage:
            for n in (40, 50, 60):
                assert await _said(stage, f"sess_a/resp_{n}", _history(n)) == SPOKEN
            assert stage.memory.jobs() == [] and len(stage.memory) == 0
            words = engine.count_tokens
            plain = build_prompt(_history(60), count_tokens=words, budget_tokens=448)
            assert engine.replies()[-1][1].text == plain.text

    anyio.run(main)
    assert engine.summary_jobs() == []


def test_b29_two_overflows_while_a_job_runs_start_no_second_job() -> None:
    engine = SummaryEngine("hang")

    async def main() -> None:
        async with _stage(engine) as stage:
            await _ask(stage, "sess_a/resp_1", _history(40))
            await engine.summary_started.wait()
            await _ask(stage, "sess_a/resp_2", _history(50))
            await _ask(stage, "sess_a/resp_3", _history(60))
            assert len(engine.summary_jobs()) == 1
            engine.gate.set()
            await stage.memory.settled()
            state = stage.memory.state("sess_a")
            assert state is not None and state.summary == "hang"

    anyio.run(main)


def test_b29_jobs_still_running_are_cancelled_when_the_stage_is_released() -> None:
    engine = SummaryEngine("hang")

    async def main() -> None:
        stage = _stage(engine)
        async with stage:
            await _ask(stage, "sess_a/resp_1", _history(40))
            await engine.summary_started.wait()
            job = stage.memory.jobs()[0]
        assert job.cancelled() and stage.memory.jobs() == []

    anyio.run(main)


def test_b29_the_memory_is_bounded_in_sessions_and_characters() -> None:
    long_text = "</response> " + " ".join(f"Sentence {i} is here." for i in range(500))
    asked: list[str] = []

    async def summarize(messages: list[tuple[str, str]], max_tokens: int, job_id: str) -> str:
        asked.append(job_id)
        return long_text

    async def main() -> SummaryMemory:
        memory = SummaryMemory(
            SummarySettings(enabled=True, max_chars=100, max_sessions=2), summarize
        )
        for session in ("sess_a", "sess_b", "sess_c"):
            memory.observe(f"{session}/resp_1", _history(10), dropped_turns=8)
            await memory.settled()
        return memory

    memory = anyio.run(main)
    assert asked == ["sess_a/summary-1", "sess_b/summary-1", "sess_c/summary-1"]
    assert len(memory) == 2 and memory.state("sess_a") is None  # least recently used
    state = memory.state("sess_c")
    assert state is not None and state.summary is not None
    assert len(state.summary) <= 100 and state.summary.endswith(".")
    assert "</response>" not in state.summary  # the weights' markers never stay
    # a request id without a session has no memory
    assert session_of("warmup-vlm") is None and session_of("sess_c/resp_9") == "sess_c"
    assert memory.summary("warmup-vlm") is None


def test_b29_fewer_dropped_turns_than_a_batch_start_no_job() -> None:
    async def summarize(messages: list[tuple[str, str]], max_tokens: int, job_id: str) -> str:
        raise AssertionError("no job expected")

    async def main() -> None:
        memory = SummaryMemory(SummarySettings(enabled=True, every_turns=8), summarize)
        memory.observe("sess_a/resp_1", _history(10), dropped_turns=7)
        assert memory.jobs() == []

    anyio.run(main)


def test_b29_cut_at_sentence_keeps_whole_sentences_within_the_bound() -> None:
    assert cut_at_sentence("One two.  Three four. Five", 20) == "One two. Three four."
    assert cut_at_sentence("One two three four five six", 14) == "One two three"
    assert cut_at_sentence("Short.", 100) == "Short."


def _sse(*pieces: str) -> bytes:
    chunks = [{"choices": [{"delta": {"content": p}}]} for p in pieces]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def test_b29_the_remote_stage_summarises_through_the_same_servers() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(200, json={})
        body = json.loads(request.content)
        bodies.append(body)
        summary_job = body["messages"][0]["content"].startswith("You keep the memory")
        text = SUMMARY if summary_job else REPLY
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, content=_sse(text), headers=headers)

    config = StageConfig(
        stage="vlm", urls=("http://127.0.0.1:9",), model="joyai", max_model_len=1024,
        summary_memory=True,
    )  # fmt: skip

    async def main() -> None:
        async with RemoteVlm(config, transport=httpx.MockTransport(handler)) as stage:
            assert await _said(stage, "sess_a/resp_1", _history(40)) == SPOKEN
            await stage.memory.settled()
            jobs = [b for b in bodies if b["max_tokens"] == 400]
            assert len(jobs) == 1
            # a job shows the newest MAX_LINES dropped turns at most (a bounded prompt)
            lines = jobs[0]["messages"][1]["content"].splitlines()
            assert len(lines) == 1 + MAX_LINES and lines[-1].startswith("A: Answer number 35")
            assert await _said(stage, "sess_a/resp_2", _history(41)) == SPOKEN
            first_user = next(m for m in bodies[-1]["messages"] if m["role"] == "user")
            assert first_user["content"].startswith(f"{SUMMARY_HEADER}\n{SUMMARY}\n\n")

    anyio.run(main)


def test_b29_summary_settings_are_checked_in_both_config_files() -> None:
    table = {
        "asr": {"urls": ["http://127.0.0.1:1"], "model": "asr"},
        "tts": {"urls": ["http://127.0.0.1:2"], "model": "tts"},
    }
    vlm = {"urls": ["http://127.0.0.1:3"], "model": "vlm"}
    good = {
        "summary_memory": True,
        "summary_max_chars": 600,
        "summary_timeout_s": 5,
        "summary_every_turns": 4,
    }
    config = parse_remote_config({**table, "vlm": {**vlm, **good}}).vlm
    assert (config.summary_memory, config.summary_max_chars) == (True, 600)
    assert (config.summary_timeout_s, config.summary_every_turns) == (5.0, 4)
    assert parse_placement({"vlm": good}).vlm.summary_every_turns == 4
    bad = [
        ("summary_memory", "yes"),
        ("summary_max_chars", 0),
        ("summary_timeout_s", -1),
        ("summary_every_turns", 1.5),
    ]
    for key, value in bad:
        with pytest.raises(RemoteConfigError, match=key):
            parse_remote_config({**table, "vlm": {**vlm, key: value}})
        with pytest.raises(PlacementError, match=key):
            parse_placement({"vlm": {key: value}})
    with pytest.raises(PlacementError, match="applies only to the vlm"):
        parse_placement({"tts": {"summary_memory": True}})


def _camera_ticks(ticks: int) -> PromptContext:
    """A camera-only session: `ticks` silent ticks (each alike but for its time)."""
    turns: list[HistoryTurn] = []
    times: list[float | None] = []
    for i in range(ticks):
        turns += [HistoryTurn("user", ""), HistoryTurn("assistant", "")]
        times += [float(i), None]
    return PromptContext(
        system="Tell me when someone comes in.",
        history=tuple(turns),
        time_s=float(ticks),
        history_times_s=tuple(times),
    )


def test_b29_alike_silent_ticks_are_told_apart_so_every_new_batch_is_summarised() -> None:
    batches: list[list[str]] = []
    earlier: list[str] = []

    async def summarize(messages: list[tuple[str, str]], max_tokens: int, job_id: str) -> str:
        lines = messages[1][1].splitlines()
        earlier.append(lines[0])
        batches.append(lines[lines.index("Ticks:") + 1 :])
        return f"Nobody came in ({len(batches)})."

    async def main() -> None:
        memory = SummaryMemory(SummarySettings(enabled=True, every_turns=8), summarize)
        memory.observe("sess_a/resp_1", _camera_ticks(20), dropped_turns=10)
        await memory.settled()
        # four more ticks left the window: a silence closes both batches
        memory.observe("sess_a/resp_2", _camera_ticks(24), dropped_turns=18)
        await memory.settled()

    anyio.run(main)
    assert len(batches) == 2
    assert batches[0][0] == "<0.0 seconds> (camera)" and batches[0][-1] == "(silent)"
    assert batches[1][0] == "<5.0 seconds> (camera)" and len(batches[1]) == 8
    assert batches[1][-1] == "(silent)"
    # each job builds on the summary before it
    assert earlier == ["Ticks:", "Earlier summary: Nobody came in (1)."]


def test_b29_through_the_runtime_a_session_is_summarised_under_its_own_id(
    fleet: dict[str, FakeReplica],  # noqa: F811
) -> None:
    """The runtime's engine request ids (`sess_x/resp_n`) key the memory: a served
    session's dropped ticks are summarised by the same servers and its later prompt
    opens with the summary (the replicas answer every chat request alike)."""
    table = remote_table(
        fleet, max_model_len=900, image_tokens=16, summary_memory=True, summary_every_turns=2
    )

    async def run(host: SessionHost) -> Any:
        backend = host.backend
        assert backend is not None
        vlm: RemoteVlm = backend.vlm  # type: ignore[attr-defined]

        async def session(client: Client) -> None:
            await client.send(QUESTION)
            for _ in range(12):
                done = await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))
                assert done[-1].response.status == "completed"
            await vlm.memory.settled()
            await client.turn(ev.InputAudioBufferAppend(video_frames=[_jpeg()]))

        await serve_one(host, session)

    anyio.run(with_host, table, run)
    # in the order they arrived: the balancer spreads them over both replicas
    arrived = sorted(
        (
            seen
            for name in ("vlm0", "vlm1")
            for seen in fleet[name].requests("/v1/chat/completions")
        ),
        key=lambda seen: seen.started,
    )
    chats = [seen.body for seen in arrived]
    jobs = [c for c in chats if c["messages"][0]["content"].startswith("You keep the memory")]
    assert jobs and all(job["max_tokens"] == 400 for job in jobs)
    replies = [c for c in chats if c not in jobs]
    last_user = next(m for m in replies[-1]["messages"] if m["role"] == "user")
    text = (
        last_user["content"]
        if isinstance(last_user["content"], str)
        else (last_user["content"][0]["text"])
    )
    assert text.startswith(f"{SUMMARY_HEADER}\nHello there. I see a cat.")
