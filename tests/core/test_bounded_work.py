"""Per-event work is linear in what the event touches (docs/session-semantics.md section
10): a `response.create` over a long history does not compare every queued commit with
every other one (40,000 items used to stall the event loop for 15 s)."""

from __future__ import annotations

from typing import Any

import pytest

from core.session import SessionProtocol
from core.statemachines.commit import Commit
from spec import events as ev
from spec.effects import SubmitVlm
from spec.limits import Limits


def _session_with_items(n: int) -> SessionProtocol:
    p = SessionProtocol(session_id="s", limits=Limits(max_pending_input_bytes=1 << 30))
    for i in range(n):
        part = ev.ContentPart(type="input_text", text=f"word{i}")
        p.receive(ev.ConversationItemCreate(item=ev.ConversationItem(content=[part])), i)
    p.next_outputs()
    return p


@pytest.mark.parametrize("n", [1_500])
def test_response_create_over_many_queued_items_never_compares_commits_pairwise(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _session_with_items(n)
    comparisons = 0

    def counting_eq(self: Commit, other: Any) -> bool:
        nonlocal comparisons
        comparisons += 1
        return self is other

    monkeypatch.setattr(Commit, "__eq__", counting_eq, raising=False)
    p.receive(ev.ResponseCreate(), n)
    out = p.next_outputs()
    [vlm] = [o for o in out if isinstance(o, SubmitVlm)]
    assert vlm.prompt.transcript is not None and vlm.prompt.transcript.count("word") == n
    assert comparisons <= n  # was n * (n - 1) / 2: quadratic in the history
