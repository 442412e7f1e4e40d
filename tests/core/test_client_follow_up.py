"""B31 on the client side: a response the server creates for a background answer (no hold
asked for it) is played and shown like any reply, and `delegation_failed` is a notice."""

from __future__ import annotations

from core.client_protocol import ClientProtocol
from tests.web.trace_scenarios import b31_follow_up_reply_plays_like_any_reply


def test_b31_the_client_plays_and_shows_a_follow_up_reply_like_any_reply() -> None:
    protocol = ClientProtocol("ptt")
    outputs = [
        out for entry in b31_follow_up_reply_plays_like_any_reply() for out in protocol.step(entry)
    ]
    follow_up = [o for o in outputs if o.get("response_id") == "resp_2"]
    assert [o for o in follow_up if o["kind"] == "play"], "the follow-up's audio is played"
    finals = [o for o in follow_up if o["kind"] == "transcript" and o["final"]]
    assert [(o["role"], o["text"]) for o in finals] == [("assistant", "w0 w1 w2")]
    notices = [o for o in outputs if o["kind"] == "notice"]
    assert [(n["level"], n["code"]) for n in notices] == [("error", "delegation_failed")]
    snapshot = protocol.snapshot()
    assert snapshot["connection"] == "ready"  # a notice never ends the call
    assert {p["response_id"]: p["state"] for p in snapshot["playbacks"]}["resp_2"] == "drained"
    assert all(h["state"] == "settled" for h in snapshot["holds"])  # the note settled the hold
