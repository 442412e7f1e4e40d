from __future__ import annotations

import pytest

from backends.base import HistoryTurn, InvalidPromptContext, PromptContext
from backends.joyai.prompt import (
    IMAGE_PLACEHOLDER,
    JOYAI_SYSTEM_PROMPT,
    USER_QUERY_HEADER,
    build_prompt,
    render_chatml,
)
from spec.session_config import DEFAULT_INSTRUCTIONS


def count_words(text: str) -> int:
    """A stand-in tokenizer: one token per whitespace-separated word or special marker."""
    return len(text.replace("<|", " <|").replace("|>", "|> ").split())


def _history(n: int) -> tuple[HistoryTurn, ...]:
    turns = []
    for i in range(n):
        turns.append(HistoryTurn("user", f"question {i} " + "word " * 5))
        turns.append(HistoryTurn("assistant", f"answer {i} " + "word " * 5))
    return tuple(turns)


def test_layout_trained_prompt_instructions_history_then_current_tick() -> None:
    ctx = PromptContext(
        system="Be brief.",
        history=(HistoryTurn("user", "hi"), HistoryTurn("assistant", "hello")),
        transcript="  what is this? ",
        frames=(b"jpeg-1", b"jpeg-2"),
    )
    built = build_prompt(ctx, count_tokens=count_words, budget_tokens=10_000, image_tokens=10)
    assert [m.role for m in built.messages] == ["system", "user", "assistant", "user"]
    assert built.text == (
        f"<|im_start|>system\n{JOYAI_SYSTEM_PROMPT}<|im_end|>\n"
        f"<|im_start|>user\nBe brief.\n\n{USER_QUERY_HEADER}\nhi<|im_end|>\n"
        "<|im_start|>assistant\n</response> hello<|im_end|>\n"
        f"<|im_start|>user\n{USER_QUERY_HEADER}\nwhat is this?"
        f"{IMAGE_PLACEHOLDER}{IMAGE_PLACEHOLDER}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert built.images == (b"jpeg-1", b"jpeg-2")  # still raw bytes (B2)
    assert built.prompt_tokens == count_words(built.text) + 20
    assert built.dropped_turns == 0


def test_visual_only_turn_has_no_header() -> None:
    built = build_prompt(
        PromptContext(system=DEFAULT_INSTRUCTIONS, frames=(b"f",)),
        count_tokens=count_words,
        budget_tokens=1000,
    )
    assert USER_QUERY_HEADER not in built.text
    assert built.messages[-1].images == 1
    assert built.messages[-1].as_openai() == {"role": "user", "content": [{"type": "image"}]}


def test_oldest_history_is_dropped_first_and_budget_respected() -> None:
    ctx = PromptContext(system=DEFAULT_INSTRUCTIONS, history=_history(6), transcript="now")
    full = build_prompt(ctx, count_tokens=count_words, budget_tokens=100_000)
    budget = full.prompt_tokens - 20
    built = build_prompt(ctx, count_tokens=count_words, budget_tokens=budget)
    assert built.prompt_tokens <= budget
    assert built.dropped_turns > 0
    kept = [m.text for m in built.messages[1:-1]]
    # what is kept is exactly the newest suffix of the history, starting on a user turn
    expected = [
        f"{USER_QUERY_HEADER}\n{t.text.strip()}"
        if t.role == "user"
        else f"</response> {t.text.strip()}"
        for t in ctx.history[built.dropped_turns :]
    ]
    assert kept == expected
    assert built.messages[1].role == "user"
    assert "question 5" in built.text and "question 0" not in built.text


@pytest.mark.parametrize("budget", range(20, 200, 7))
def test_any_budget_is_respected_or_refused(budget: int) -> None:
    ctx = PromptContext(system="s", history=_history(4), transcript="now", frames=(b"f",))
    try:
        built = build_prompt(ctx, count_tokens=count_words, budget_tokens=budget, image_tokens=8)
    except InvalidPromptContext:
        bare = build_prompt(
            PromptContext(system="s", transcript="now", frames=(b"f",)),
            count_tokens=count_words,
            budget_tokens=10_000,
            image_tokens=8,
        )
        assert bare.prompt_tokens > budget
    else:
        assert built.prompt_tokens <= budget


def test_too_many_frames_keep_the_latest() -> None:
    frames = tuple(f"f{i}".encode() for i in range(5))
    built = build_prompt(
        PromptContext(system="s", frames=frames),
        count_tokens=count_words,
        budget_tokens=10_000,
        max_images=2,
    )
    assert built.images == (b"f3", b"f4")
    assert built.dropped_frames == 3


def test_system_and_turn_alone_over_budget_is_invalid_context_and_request_local() -> None:
    with pytest.raises(InvalidPromptContext, match="budget") as info:
        build_prompt(
            PromptContext(system="word " * 50, transcript="x"),
            count_tokens=count_words,
            budget_tokens=10,
        )
    assert info.value.stage == "vlm"
    # nothing is kept between calls: the next context that fits is built as usual
    built = build_prompt(
        PromptContext(system="s", history=(HistoryTurn("user", "hi"),), transcript="ok"),
        count_tokens=count_words,
        budget_tokens=1000,
    )
    assert built.text.endswith("<|im_start|>assistant\n")


def test_render_chatml_ends_with_generation_prompt() -> None:
    assert render_chatml([]) == "<|im_start|>assistant\n"
