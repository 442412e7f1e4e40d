"""The hand-over between a batched engine's callers and its loop thread (no torch)."""

from __future__ import annotations

import threading

from backends.gpu.step_mailbox import StepMailbox


def test_the_loop_takes_every_post_and_abort_at_once_in_order() -> None:
    box: StepMailbox[str] = StepMailbox()
    box.post("a")
    box.post("b")
    box.abort("x")
    assert box.take(lambda: False) == (["a", "b"], ["x"])
    assert box.take(lambda: True) == ([], [])  # a busy batch steps with nothing posted


def test_a_sleeping_loop_wakes_for_a_post_from_another_thread() -> None:
    box: StepMailbox[str] = StepMailbox()
    taken: list[object] = []
    loop = threading.Thread(target=lambda: taken.append(box.take(lambda: False)))
    loop.start()
    box.post("a")
    loop.join()
    assert taken == [(["a"], [])]


def test_closing_ends_the_loop_and_leaves_the_late_posts_to_end() -> None:
    box: StepMailbox[str] = StepMailbox()
    box.post("late")
    box.close()
    assert box.take(lambda: True) is None
    assert box.left() == ["late"]
    assert box.left() == []
    box.open()
    box.post("again")
    assert box.take(lambda: False) == (["again"], [])
