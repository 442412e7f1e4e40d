"""JoyAI prompts that extend each other: in a steady camera session, history
frames and history turns leave the prompt in blocks (`backends/joyai/prompt.py`), so
that between two drops each tick's prompt begins with the previous prompt exactly, its
rendered text and its images, and vLLM's prefix cache (on for the in-process engine)
reuses everything but the new tick. The budget, `max_images`, the current tick's frames
and the summary of dropped turns hold as before.

The session is built here as the core builds it (`core.prompt_input`, `core.turn_log`):
a frame per tick, a question every few ticks answered in words, silence on the others,
and history frames bounded by the core's own `max_context_images` (oldest out first,
set equal to the stage's `max_images` as the defaults are). Tokens are counted by a
deterministic stand-in tokenizer, a word or special marker each.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field, replace

import pytest

from backends.base import HistoryTurn, PromptContext
from backends.gpu.engines import engine_kwargs
from backends.gpu.placement import default_placement
from backends.joyai.memory import MAX_LINES, SummaryMemory, SummarySettings
from backends.joyai.prompt import (
    SUMMARY_HEADER,
    BuiltPrompt,
    build_prompt,
    frame_block_ticks,
    time_marker,
)
from spec.session_config import DEFAULT_INSTRUCTIONS

QUESTION_EVERY = 5  # ticks
IMAGE_TOKENS = 16


def count_words(text: str) -> int:
    """A stand-in tokenizer: one token per whitespace-separated word or special marker."""
    return len(text.replace("<|", " <|").replace("|>", "|> ").split())


def _frame(tick: int) -> bytes:
    return f"frame-{tick}".encode()


def _question(tick: int) -> str | None:
    return f"What is on the table now, at tick {tick}?" if tick % QUESTION_EVERY == 2 else None


@dataclass
class SteadySession:
    """A camera session's history as the core keeps it: every tick a user turn with its
    time and frame, then its answer (an empty text: a silence); at most `max_frames`
    history frames, the oldest out first (`core.turn_log.TurnLog`)."""

    max_frames: int
    history: list[HistoryTurn] = field(default_factory=list)
    times: list[float | None] = field(default_factory=list)
    frames: list[tuple[bytes, ...]] = field(default_factory=list)

    def context(self, tick: int) -> PromptContext:
        return PromptContext(
            system=DEFAULT_INSTRUCTIONS,
            history=tuple(self.history),
            transcript=_question(tick),
            frames=(_frame(tick),),
            time_s=float(tick),
            history_times_s=tuple(self.times),
            history_frames=tuple(self.frames),
        )

    def answered(self, tick: int) -> None:
        """The tick's request was submitted (its frame is kept) and answered."""
        question = _question(tick)
        self.history.append(HistoryTurn("user", question or ""))
        self.times.append(float(tick))
        self.frames.append((_frame(tick),))
        kept = sum(len(f) for f in self.frames)
        for i, frames in enumerate(self.frames):
            if kept <= self.max_frames:
                break
            leave = min(len(frames), kept - self.max_frames)
            self.frames[i] = frames[leave:]
            kept -= leave
        answer = f"A red cup next to a plate, seen at tick {tick}." if question else ""
        self.history.append(HistoryTurn("assistant", answer))
        self.times.append(None)
        self.frames.append(())


def _run(ticks: int, *, max_images: int, budget: int) -> list[tuple[PromptContext, BuiltPrompt]]:
    session = SteadySession(max_frames=max_images)
    prompts = []
    for tick in range(ticks):
        context = session.context(tick)
        built = build_prompt(
            context,
            count_tokens=count_words,
            budget_tokens=budget,
            image_tokens=IMAGE_TOKENS,
            max_images=max_images,
        )
        prompts.append((context, built))
        session.answered(tick)
    return prompts


def _extends(before: BuiltPrompt, after: BuiltPrompt) -> bool:
    """`after` begins with `before`: its text, and its images as a prefix extension."""
    return after.text.startswith(before.text) and (
        after.images[: len(before.images)] == before.images
    )


def _extension_share(built: list[BuiltPrompt]) -> float:
    pairs = list(itertools.pairwise(built))
    return sum(_extends(a, b) for a, b in pairs) / len(pairs)


def test_a_steady_camera_session_prompt_begins_with_the_previous_one_in_nine_of_ten_ticks() -> None:
    """32 images a prompt (and kept by the core), 400 ticks, a budget that history
    outgrows many times over: frames leave 16 ticks at a time, turns a quarter of the
    budget at a time (before: the newest 31 frames slid by one each tick and the oldest
    turn left on each over-budget tick, 7.8% of prompts extended the previous one)."""
    built = [b for _, b in _run(400, max_images=32, budget=3000)]
    budget_drops = len({b.dropped_turns for b in built}) - 1
    assert budget_drops >= 3  # the budget was outgrown again and again
    assert _extension_share(built) >= 0.9  # measured: 93.0%


def test_with_the_default_eight_images_prompts_break_only_where_a_whole_block_leaves() -> None:
    """At `max_images = 8` (a tick's frame and 7 of history) a frame block is 4 ticks,
    so at most 3 prompts in 4 can extend the previous one; each that does not lost a
    whole block of frames or of turns (before: 1.8% extended, one frame or one turn
    left on every tick)."""
    built = [b for _, b in _run(400, max_images=8, budget=2000)]
    block = frame_block_ticks(8)
    for before, after in itertools.pairwise(built):
        if not _extends(before, after):
            turns_left = after.dropped_turns > before.dropped_turns
            frames_left = len(before.images) - len(after.images) + 1  # + the new tick
            assert turns_left or frames_left >= block
    assert _extension_share(built) >= 0.7  # measured: 73.9%, at most 75%


@pytest.mark.parametrize(
    ("max_images", "budget"), [(8, 2000), (8, 700), (32, 3000), (32, 1500), (1, 600)]
)
def test_every_prompt_fits_the_budget_shows_its_tick_first_and_at_most_max_images(
    max_images: int, budget: int
) -> None:
    previous_drop = 0
    for context, built in _run(300, max_images=max_images, budget=budget):
        assert built.prompt_tokens <= budget
        assert built.prompt_tokens == count_words(built.text) + IMAGE_TOKENS * len(built.images)
        assert len(built.images) <= max_images
        assert built.images[-1] == context.frames[-1]  # the current moment, always shown
        assert built.messages[-1].images == 1 and built.text.count("<|image_pad|>") == len(
            built.images
        )
        # history frames shown are the newest the core kept, in capture order
        kept = [f for frames in context.history_frames for f in frames]
        shown = list(built.images[:-1])
        assert shown == kept[len(kept) - len(shown) :]
        # frames leaving never let older turns back in
        assert built.dropped_turns >= previous_drop
        previous_drop = built.dropped_turns


def test_the_core_dropping_frames_of_old_ticks_moves_no_block() -> None:
    """The blocks are counted on ticks, not on the frames the core still holds: a
    context whose oldest ticks lost their frames (the core's `max_context_images`) is
    rendered exactly like one that kept them all."""
    session = SteadySession(max_frames=10_000)
    for tick in range(40):
        session.answered(tick)
    full = session.context(40)
    trimmed = replace(
        full,
        history_frames=tuple(
            () if i < len(full.history) - 2 * 9 else frames
            for i, frames in enumerate(full.history_frames)
        ),  # the newest 9 ticks keep their frame, as a core bound of 9 leaves them
    )
    kept, cut = (
        build_prompt(c, count_tokens=count_words, budget_tokens=10_000, image_tokens=16)
        for c in (full, trimmed)
    )
    assert (kept.text, kept.images) == (cut.text, cut.images)
    assert len(kept.images) == 1 + 4  # the tick, and the frames of the newest whole block


def test_a_tick_of_more_frames_than_the_allowance_still_shows_its_newest_frames() -> None:
    """A spoken question carries every frame captured while it was said: when the newest
    block alone holds more than the allowance, its newest frames are shown, not none."""
    spoken = tuple(f"spoken-{i}".encode() for i in range(9))
    context = PromptContext(
        system=DEFAULT_INSTRUCTIONS,
        history=(HistoryTurn("user", "What is this?"), HistoryTurn("assistant", "A cup.")),
        history_times_s=(1.0, None),
        history_frames=(spoken, ()),
        frames=(_frame(2),),
        time_s=12.0,
    )
    built = build_prompt(context, count_tokens=count_words, budget_tokens=10_000)
    assert built.images == (*spoken[-7:], _frame(2))
    assert built.dropped_frames == 2


def _line(context: PromptContext, i: int) -> str:
    """A dropped turn as a summary job shows it (docs/deploy.md, "Summary memory")."""
    turn, time_s = context.history[i], context.history_times_s[i]
    if turn.role == "assistant":
        return f"A: {turn.text}" if turn.text else "(silent)"
    assert time_s is not None
    return f"{time_marker(time_s)} " + (f"Q: {turn.text}" if turn.text else "(camera)")


def test_a_summary_memory_summarises_exactly_the_turns_each_block_drop_left_out() -> None:
    jobs: list[list[str]] = []

    async def summarize(messages: list[tuple[str, str]], max_tokens: int, job_id: str) -> str:
        lines = messages[1][1].splitlines()
        jobs.append(lines[lines.index("Ticks:") + 1 :])
        return f"Summary number {len(jobs)} of the red cup on the table."

    async def main() -> list[tuple[PromptContext, BuiltPrompt]]:
        memory = SummaryMemory(SummarySettings(enabled=True, every_turns=8), summarize)
        session = SteadySession(max_frames=32)
        prompts = []
        for tick in range(400):
            request_id = f"sess_a/resp_{tick}"
            context = session.context(tick)
            built = build_prompt(
                context,
                count_tokens=count_words,
                budget_tokens=3000,
                image_tokens=IMAGE_TOKENS,
                max_images=32,
                summary=memory.summary(request_id),
            )
            memory.observe(request_id, context, built.dropped_turns)
            await memory.settled()
            prompts.append((context, built))
            session.answered(tick)
        await memory.aclose()
        return prompts

    prompts = asyncio.run(main())
    drops = [(c, b.dropped_turns) for (c, b) in prompts]
    firsts = [i for i in range(1, len(drops)) if drops[i][1] > drops[i - 1][1]]
    assert len(jobs) == len(firsts) >= 3  # one job per block drop: each is a batch
    summarised = 0
    for job, at in zip(jobs, firsts, strict=True):
        context, dropped = drops[at]
        start = max(summarised, dropped - MAX_LINES)
        assert job == [_line(context, i) for i in range(start, dropped)]
        summarised = dropped
    built = [b for _, b in prompts]
    assert all(b.prompt_tokens <= 3000 for b in built)
    assert f"{SUMMARY_HEADER}\nSummary number {len(jobs)} " in built[-1].text
    # a new summary changes the prompt's opening once more, right after its drop
    assert _extension_share(built) >= 0.9  # measured: 92.0%


def test_the_in_process_vlm_engine_turns_prefix_caching_on() -> None:
    placement = default_placement()
    assert engine_kwargs(placement.vlm)["enable_prefix_caching"] is True
    assert "enable_prefix_caching" not in engine_kwargs(placement.asr)
