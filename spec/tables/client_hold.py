"""Client PTT hold: one push-to-talk hold (or one server-VAD commit) from press to its end."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = [
    "AWAITING_REPLY_STATES",
    "CLIENT_HOLD",
    "LIVE_HOLD_STATES",
    "UPLOADING_HOLD_STATES",
    "HoldState",
]


class HoldState(enum.Enum):
    NEW = "new"  # created; neither pressed nor committed yet
    PRESSED = "pressed"  # button down, nothing uploaded yet
    MUTED = "muted"  # button down with the microphone muted: nothing is uploaded
    RECORDING = "recording"  # at least one audio append of this hold was sent
    EMPTY = "empty"  # released having uploaded nothing: no commit is sent
    SUBMITTED = "submitted"  # released; its commit is pending, keyed by its event id
    ACKNOWLEDGED = "acknowledged"  # `input_audio_buffer.committed`: a reply is owed
    ANSWERING = "answering"  # a response answering it was created
    NO_RESPONSE = "no_response"  # committed with `no_response: true` (quiet audio)
    REJECTED = "rejected"  # its commit was refused by an `error` carrying its event id
    SETTLED = "settled"  # its response ended (done in any status) or was interrupted
    CUT = "cut"  # the link dropped while the button was down: no commit (B42)


H = HoldState

#: a hold in one of these states keeps the turn watchdog armed (B23)
AWAITING_REPLY_STATES = frozenset({H.SUBMITTED, H.ACKNOWLEDGED, H.ANSWERING})
#: the button is down: microphone audio belongs to this hold
LIVE_HOLD_STATES = frozenset({H.PRESSED, H.MUTED, H.RECORDING})
#: the button is down and the microphone is not muted: its audio is uploaded
UPLOADING_HOLD_STATES = frozenset({H.PRESSED, H.RECORDING})

CLIENT_HOLD = Table(
    name="client_hold",
    doc=(
        "The client's view of one push-to-talk hold (B20). A hold that uploaded nothing "
        "(muted or released at once) ends `empty` without a commit. A released hold sends "
        "one commit and waits for exactly one acknowledgement keyed by the commit's event "
        "id: `no_response`, a rejection, or `committed` followed by the response that "
        "answers it. A server-VAD commit is a hold the server made: it starts acknowledged."
    ),
    states=HoldState,
    initial=H.NEW,
    terminal=frozenset({H.EMPTY, H.NO_RESPONSE, H.REJECTED, H.SETTLED, H.CUT}),
    groups={
        "awaiting_reply": AWAITING_REPLY_STATES,
        "live": LIVE_HOLD_STATES,
        "uploading": UPLOADING_HOLD_STATES,
    },
    transitions=(
        T("press", H.NEW, H.MUTED, guard="mic_muted", behaviours=("B20",)),
        T("press", H.NEW, H.PRESSED, behaviours=("B20",)),
        T("server_commit", H.NEW, H.ACKNOWLEDGED, behaviours=("B20",)),
        T("mute", H.PRESSED, H.MUTED, behaviours=("B20",)),
        T("mute", H.RECORDING, None),
        T("unmute", H.MUTED, H.PRESSED, behaviours=("B20",)),
        T("unmute", H.RECORDING, None),
        T("upload", H.PRESSED, H.RECORDING, behaviours=("B20",)),
        T("release", (H.PRESSED, H.MUTED), H.EMPTY, behaviours=("B20",)),
        T("release", H.RECORDING, H.SUBMITTED, effect="send_commit", behaviours=("B20", "B23")),
        T("committed", H.SUBMITTED, H.ACKNOWLEDGED, behaviours=("B20",)),
        T("committed_no_response", H.SUBMITTED, H.NO_RESPONSE, behaviours=("B20", "B23")),
        T(
            "rejected",
            H.SUBMITTED,
            H.REJECTED,
            effect="report_rejection",
            behaviours=("B20", "B23"),
        ),
        T("answer", H.ACKNOWLEDGED, H.ANSWERING, behaviours=("B20",)),
        T("settle", H.ANSWERING, H.SETTLED, behaviours=("B20", "B23")),
        T("interrupt", H.ANSWERING, H.SETTLED, behaviours=("B21", "B23")),
        T("cut", (H.PRESSED, H.MUTED, H.RECORDING), H.CUT, behaviours=("B42",)),
    ),
    invariants={
        "H1": "a hold sends at most one commit, and only after it uploaded audio",
        "H2": "a muted or empty hold sends no commit",
        "H3": "a submitted hold ends in exactly one of no_response, rejected, settled",
        "H4": "an acknowledgement or rejection finishes only the hold whose event id it carries",
    },
)
