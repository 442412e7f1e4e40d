"""`PieceQueue`: generated text reaches the event loop in batches, not a thread hop per
token (the transformers engines' stream; no torch needed)."""

from __future__ import annotations

import threading

from backends.gpu.hf_engines import PieceQueue


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
    assert pieces.take() == "It"  # returns at once: a window this long would hang here


def test_a_later_take_gathers_until_the_batch_is_full() -> None:
    pieces = PieceQueue(window_s=3600.0, batch=3)
    pieces.put("a")
    assert pieces.take() == "a"
    taken: list[str | None] = []
    consumer = threading.Thread(target=lambda: taken.append(pieces.take()))
    consumer.start()
    for text in ("b", "c", "d"):
        pieces.put(text)
    consumer.join(timeout=60)
    assert taken == ["bcd"]  # one hop for the three, not three


def test_closing_ends_a_take_that_waits_and_keeps_what_arrived() -> None:
    pieces = PieceQueue(window_s=3600.0, batch=8)
    pieces.put("first")
    assert pieces.take() == "first"
    taken: list[str | None] = []
    consumer = threading.Thread(target=lambda: taken.extend([pieces.take(), pieces.take()]))
    consumer.start()
    pieces.put("last")
    pieces.close()
    consumer.join(timeout=60)
    assert taken == ["last", None]
