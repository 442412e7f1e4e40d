"""What the transformers VLM engine keeps between requests (`backends/gpu/prompt_reuse.py`),
as bookkeeping: slots matched by their longest common prefix, an image's placeholders
matching only for the same image, least recently used slots and frames evicted, the
byte budget kept. No torch: the KV is opaque here (the engine's tests in
`test_gpu_hf_prompt_reuse.py` run the model)."""

from __future__ import annotations

import numpy as np

from backends.gpu.prompt_reuse import (
    EncodedFrame,
    FrameEncodings,
    ImageSpan,
    KeptPrompt,
    PromptSlots,
    common_prefix,
)

PAD = 9  # an image placeholder token
GRID = (1, 4, 4)


def _ids(*parts: list[int]) -> np.ndarray:
    return np.asarray([t for part in parts for t in part], dtype=np.int64)


def _kept(
    ids: np.ndarray,
    spans: tuple[ImageSpan, ...] = (),
    *,
    prompt: int | None = None,
    nbytes: int = 100,
) -> KeptPrompt:
    return KeptPrompt(ids, spans, len(ids) if prompt is None else prompt, f"kv{len(ids)}", nbytes)


def _slots(slots: int = 4, max_bytes: int = 10_000, min_reused: int = 4) -> PromptSlots:
    return PromptSlots(slots=slots, max_bytes=max_bytes, min_reused=min_reused)


def test_common_prefix_counts_the_shared_leading_ids() -> None:
    assert common_prefix(_ids([1, 2, 3]), _ids([1, 2, 4, 5])) == 2
    assert common_prefix(_ids([1, 2]), _ids([1, 2, 3])) == 2
    assert common_prefix(_ids([7]), _ids([1])) == 0


def test_a_prompt_extending_a_kept_one_reuses_all_of_it_and_supersedes_it() -> None:
    slots = _slots()
    first = _kept(_ids(list(range(20))), prompt=16)  # 16 prompt tokens, 4 generated
    slots.keep(first)
    match = slots.match(_ids(list(range(20)), [50, 51]), ())
    assert (match.slot, match.reused, match.covers) == (first, 20, True)


def test_the_last_prompt_token_is_always_prefilled() -> None:
    slots = _slots()
    slots.keep(_kept(_ids(list(range(10)))))
    match = slots.match(_ids(list(range(10))), ())  # the same prompt again
    assert match.reused == 9 and match.covers  # its logits start the reply


def test_a_short_common_prefix_is_not_worth_reusing() -> None:
    slots = _slots(min_reused=8)
    kept = _kept(_ids(list(range(20))))
    slots.keep(kept)
    match = slots.match(_ids(list(range(6)), [99] * 10), ())
    assert match.reused == 0 and match.slot is kept and not match.covers


def test_an_image_matches_only_the_same_image() -> None:
    text, pads = [1, 2, 3, 4, 5, 6], [PAD] * 4
    same = ImageSpan(6, 10, b"frame-a", GRID)
    slots = _slots()
    slots.keep(_kept(_ids(text, pads, [7, 8]), (same,)))
    # the same frame at the same place: reused through it
    assert slots.match(_ids(text, pads, [7, 8, 20]), (same,)).reused == 12
    # another frame with the same token ids: reused up to where the image starts
    other = ImageSpan(6, 10, b"frame-b", GRID)
    match = slots.match(_ids(text, pads, [7, 8, 20]), (other,))
    assert (match.reused, match.covers) == (6, False)


def test_a_prefix_ending_inside_an_image_stops_at_the_image_start() -> None:
    span = ImageSpan(6, 10, b"frame-a", GRID)
    slots = _slots()
    # the kept sequence's tokens agree only up to the middle of the image's placeholders
    slots.keep(_kept(_ids([1, 2, 3, 4, 5, 6], [PAD, PAD], [30, 31]), ()))
    match = slots.match(_ids([1, 2, 3, 4, 5, 6], [PAD] * 4, [7]), (span,))
    assert match.reused == 6  # an image is prefilled whole


def test_two_sessions_taking_turns_each_find_their_own_slot() -> None:
    system = list(range(10))
    a = _ids(system, [100, 101, 102, 103, 104, 105])
    b = _ids(system, [200, 201, 202, 203, 204, 205])
    slots = _slots(min_reused=4)
    slots.keep(_kept(a))
    slots.keep(_kept(b))
    match_a = slots.match(_ids(a, [106, 107]), ())
    assert match_a.slot is not None and match_a.reused == len(a) and match_a.covers
    match_b = slots.match(_ids(b, [206]), ())
    assert match_b.slot is not None and match_b.reused == len(b) and match_b.covers
    # each superseding its own: A's new slot replaces A's old one, B's stays
    slots.keep(_kept(_ids(a, [106, 107])), replaces=match_a.slot)
    assert len(slots) == 2
    assert {int(k.ids[10]) for k in slots.kept()} == {100, 200}


def test_a_prompt_sharing_only_the_system_prompt_keeps_the_other_slot() -> None:
    system = list(range(10))
    slots = _slots()
    a = _kept(_ids(system, [100, 101, 102]))
    slots.keep(a)
    match = slots.match(_ids(system, [200, 201, 202]), ())
    assert match.slot is a and match.reused == 10 and not match.covers
    slots.keep(_kept(_ids(system, [200, 201, 202])), replaces=None)
    assert len(slots) == 2  # session A's slot is still there for its next turn


def test_the_least_recently_used_slot_goes_when_slots_run_out() -> None:
    slots = _slots(slots=2)
    first, second = _kept(_ids([1] * 8)), _kept(_ids([2] * 8))
    slots.keep(first)
    slots.keep(second)
    slots.match(_ids([1] * 8, [5]), ())  # first is used again: second is now the oldest
    third = _kept(_ids([3] * 8))
    slots.keep(third)
    assert slots.kept() == (first, third)


def test_the_byte_budget_holds() -> None:
    slots = _slots(slots=8, max_bytes=250)
    kept = [_kept(_ids([i] * 8), nbytes=100) for i in range(4)]
    for k in kept:
        slots.keep(k)
        assert slots.nbytes <= 250
    assert slots.kept() == tuple(kept[2:])
    # one larger than the whole budget is not kept, and evicts nothing
    assert not slots.keep(_kept(_ids([9] * 8), nbytes=300))
    assert slots.kept() == tuple(kept[2:])


def test_no_slots_keep_nothing() -> None:
    slots = _slots(slots=0)
    assert not slots.keep(_kept(_ids([1] * 8)))
    assert slots.match(_ids([1] * 8), ()).slot is None


def _frame(nbytes: int = 10) -> EncodedFrame:
    return EncodedFrame(GRID, "embeds", ("deepstack",), nbytes)


def test_frame_encodings_are_kept_least_recently_used_first_out() -> None:
    frames = FrameEncodings(max_images=2)
    frames.put(b"a", _frame())
    frames.put(b"b", _frame())
    assert frames.get(b"a") is not None  # a used again: b is the oldest
    frames.put(b"c", _frame())
    assert b"b" not in frames and b"a" in frames and b"c" in frames
    assert len(frames) == 2 and frames.nbytes == 20
    # the grids outlive the encodings: a frame seen before needs no image processor
    assert frames.grid(b"b") == GRID


def test_no_frame_encodings_keep_only_grids() -> None:
    frames = FrameEncodings(max_images=0)
    assert not frames.put(b"a", _frame())
    assert frames.get(b"a") is None and frames.grid(b"a") == GRID
