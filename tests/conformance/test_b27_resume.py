"""B27: a dropped connection resumes with nothing lost (docs/session-semantics.md D27,
D28). The sans-IO parts: the resume journal and the attachment machine."""

from __future__ import annotations

import pytest

from core.journal import ReplayImpossible, ResumeJournal
from core.statemachines.attachment import Attachment
from spec.errors import ErrorCode, InvalidResumeToken, UnknownSession
from spec.tables import AttachmentState


def _journal(max_bytes: int = 1_000, max_age_ms: int = 60_000) -> ResumeJournal[str]:
    return ResumeJournal(max_bytes=max_bytes, max_age_ms=max_age_ms)


def _fill(journal: ResumeJournal[str], count: int, size: int = 10, at_ms: int = 0) -> None:
    for _ in range(count):
        journal.append(f"event_{journal.last_seq + 1}", size, at_ms)


def test_b27_a_replay_after_k_is_every_journaled_event_above_k_in_order() -> None:
    journal = _journal()
    _fill(journal, 6)
    assert [e.seq for e in journal.replay_after(0, 0)] == [1, 2, 3, 4, 5, 6]
    assert [e.payload for e in journal.replay_after(4, 0)] == ["event_5", "event_6"]
    assert journal.replay_after(6, 0) == []  # the client has everything
    with pytest.raises(ReplayImpossible) as info:
        journal.replay_after(7, 0)  # a cursor beyond anything sent
    assert info.value.reason == "journal_gap"


def test_b27_an_ack_trims_the_journal_and_a_cursor_behind_it_is_a_gap() -> None:
    journal = _journal()
    _fill(journal, 5)
    journal.ack(3)
    assert journal.kept() == ["event_4", "event_5"]
    assert journal.bytes == 20
    journal.ack(1)  # acks never move back
    assert journal.first_seq == 4
    assert [e.seq for e in journal.replay_after(3, 0)] == [4, 5]
    with pytest.raises(ReplayImpossible) as info:
        journal.replay_after(2, 0)
    assert info.value.reason == "journal_gap"


def test_b27_the_byte_and_age_bounds_drop_the_oldest_and_an_early_cursor_overflows() -> None:
    journal = _journal(max_bytes=35, max_age_ms=100)
    _fill(journal, 5)  # 50 bytes > 35: events 1 and 2 leave
    assert journal.first_seq == 3 and journal.bytes == 30
    with pytest.raises(ReplayImpossible) as info:
        journal.replay_after(1, 0)
    assert info.value.reason == "journal_overflow"
    assert [e.seq for e in journal.replay_after(2, 0)] == [3, 4, 5]
    _fill(journal, 1, at_ms=150)  # 3..5 are older than 100 ms now
    assert journal.kept() == ["event_6"]
    with pytest.raises(ReplayImpossible):
        journal.replay_after(4, 150)


def test_b27_every_resume_rotates_the_token_and_a_used_token_is_refused() -> None:
    attachment = Attachment("sess_1", "token_1")
    attachment.detach()
    assert attachment.reattach("token_1", "token_2") is False  # resumed
    assert (attachment.token, attachment.generation) == ("token_2", 2)
    assert attachment.reattach("token_2", "token_3") is True  # replaced a live connection
    with pytest.raises(InvalidResumeToken) as info:
        attachment.reattach("token_2", "token_4")
    assert info.value.code is ErrorCode.INVALID_RESUME_TOKEN
    assert (attachment.token, attachment.generation) == ("token_3", 3)


def test_b27_an_expired_or_closed_session_cannot_be_resumed() -> None:
    expired = Attachment("sess_1", "token_1")
    expired.detach()
    expired.expire()
    assert expired.state is AttachmentState.EXPIRED
    with pytest.raises(UnknownSession) as info:
        expired.reattach("token_1", "token_2")
    assert info.value.code is ErrorCode.UNKNOWN_SESSION
    closed = Attachment("sess_2", "token_1")
    closed.close()
    with pytest.raises(UnknownSession):
        closed.reattach("token_1", "token_2")
