"""`PieceQueue`: generated text reaches the event loop in batches, not a thread hop per
token (the transformers engines' stream; no torch needed)."""

from __future__ import annotations

import threading

from backends.gpu.hf_engines import PieceQueue

#: a hang guard only: a take still waiting after it leaves its result out, so the test
#: fails instead of hanging (the consumer is a daemon thread)
HANG_GUARD_S = 60.0


def _consumer(pieces: PieceQueue, takes: int = 1) -> tuple[threading.Thread, list[str | None]]:
    """A thread making `takes` calls of `take`; what they returned, as they return."""
    taken: list[str | None] = []
    thread = threading.Thread(
        target=lambda: taken.extend(pieces.take() for _ in range(takes)), daemon=True
    )
    thread.start()
    return thread, taken


def test_pieces_already_there_are_taken_in_one_hop_joined_in_order() -> None:
    pieces = PieceQueue()
    for i in range(50):
        pieces.put(f"t{i} ")
    pieces.close()
    assert pieces.take() == "".join(f"t{i} " for i in range(50))
    assert pieces.take() is None  # closed and drained


def test_the_first_piece_is_handed_over_without_waiting_for_a_batch() -> None:
    pieces = PieceQueue(window_s=3600.0, batch=8)  # a later take would wait for 8
    pieces.put("It")
    consumer, taken = _consumer(pieces)
    consumer.join(timeout=HANG_GUARD_S)
    assert taken == ["It"]  # at once: this window would outlast the guard


def test_a_later_take_gathers_until_the_batch_is_full() -> None:
    pieces = PieceQueue(window_s=3600.0, batch=3)
    pieces.put("a")
    assert pieces.take() == "a"
    consumer, taken = _consumer(pieces)
    for text in ("b", "c", "d"):
        pieces.put(text)
    consumer.join(timeout=HANG_GUARD_S)
    assert taken == ["bcd"]  # one hop for the three, not three


def test_closing_ends_a_take_that_waits_and_keeps_what_arrived() -> None:
    pieces = PieceQueue(window_s=3600.0, batch=8)
    pieces.put("first")
    assert pieces.take() == "first"
    consumer, taken = _consumer(pieces, takes=2)
    pieces.put("last")
    pieces.close()
    consumer.join(timeout=HANG_GUARD_S)
    assert taken == ["last", None]
