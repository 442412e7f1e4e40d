"""Commit: one accepted input commit (or queued user item) as an item-bound segment."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["COMMIT", "CommitState"]


class CommitState(enum.Enum):
    PENDING = "pending"
    NO_RESPONSE = "no_response"  # quiet: acknowledged, never answered (B6)
    RETAINED = "retained"  # acknowledged without a response; joins the next response (B14)
    DEFERRED = "deferred"  # wants a response; waits for the active one to end (B9, B16)
    ROUTED_ASR = "routed_asr"  # consumed by a response; its speech is being transcribed
    ROUTED_VLM = "routed_vlm"  # consumed by a response; enters the VLM directly (B1, B8)
    TRANSCRIBED = "transcribed"
    FAILED = "failed"  # its response failed or was cancelled before the transcript (B17)
    WITHDRAWN = "withdrawn"  # its item was deleted while queued


S = CommitState
_QUEUED = (S.RETAINED, S.DEFERRED)

COMMIT = Table(
    name="commit",
    doc=(
        "An accepted commit. It is acknowledged exactly once, on leaving `pending` (B15), "
        "then waits (retained or deferred), or is routed into a response: to the ASR when "
        "it holds speech (speech profile), else straight to the VLM. Items created by the "
        "client are adopted as segments without an acknowledgement."
    ),
    states=CommitState,
    initial=S.PENDING,
    terminal=frozenset({S.NO_RESPONSE, S.ROUTED_VLM, S.TRANSCRIBED, S.FAILED, S.WITHDRAWN}),
    transitions=(
        T("quiet", S.PENDING, S.NO_RESPONSE, effect="ack_no_response", behaviours=("B6", "B15")),
        T("retain", S.PENDING, S.RETAINED, effect="ack_committed", behaviours=("B14", "B15")),
        T("adopt", S.PENDING, S.RETAINED, behaviours=("B1",)),
        T("defer", S.PENDING, S.DEFERRED, effect="ack_committed", behaviours=("B9", "B15", "B16")),
        T("route_asr", S.PENDING, S.ROUTED_ASR, effect="ack_committed", behaviours=("B1", "B15")),
        T("route_asr", _QUEUED, S.ROUTED_ASR, behaviours=("B14", "B16")),
        T(
            "route_vlm",
            S.PENDING,
            S.ROUTED_VLM,
            effect="ack_committed",
            behaviours=("B1", "B8", "B15"),
        ),
        T("route_vlm", _QUEUED, S.ROUTED_VLM, behaviours=("B14",)),
        T("transcribe", S.ROUTED_ASR, S.TRANSCRIBED, behaviours=("B4",)),
        T("fail", S.ROUTED_ASR, S.FAILED, behaviours=("B11", "B17")),
        T("withdraw", _QUEUED, S.WITHDRAWN, behaviours=("B5",)),
    ),
    invariants={
        "I3": "every accepted commit is acknowledged exactly once, carrying its event_id",
        "COMMIT-1": "at most max_pending_commits commits are retained or deferred",
    },
)
