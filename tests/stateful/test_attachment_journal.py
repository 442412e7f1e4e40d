"""The attachment machine and the resume journal under random operation sequences
(hypothesis rule-based): numbers strictly increase, a replay after k is exactly the
journaled events above k in order and once, acks trim, the byte and age bounds hold,
every resume rotates the token, and a used or wrong token reattaches nothing (B27)."""

from __future__ import annotations

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.journal import ReplayImpossible, ResumeJournal
from core.statemachines.attachment import Attachment
from spec.errors import InvalidResumeToken, UnknownSession
from spec.tables import AttachmentState

MAX_BYTES = 64
MAX_AGE_MS = 50


class AttachmentJournal(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.journal: ResumeJournal[str] = ResumeJournal(max_bytes=MAX_BYTES, max_age_ms=MAX_AGE_MS)
        self.attachment = Attachment("sess_1", "token_0")
        self.tokens = 0
        self.used: list[str] = []
        self.now = 0
        self.sent: dict[int, str] = {}  # every event ever journaled, by seq

    def _new_token(self) -> str:
        self.tokens += 1
        return f"token_{self.tokens}"

    # --- the journal ------------------------------------------------------------------

    @rule(size=st.integers(1, 40))
    def emit(self, size: int) -> None:
        before = self.journal.last_seq
        payload = f"event_{before + 1}"
        seq = self.journal.append(payload, size, self.now)
        assert seq == before + 1  # strictly increasing, by one
        self.sent[seq] = payload

    @rule(ms=st.integers(0, 30))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        seq = data.draw(st.integers(0, self.journal.last_seq + 2))
        self.journal.ack(seq)
        assert all(e > min(seq, self.journal.last_seq) for e in self._kept_seqs())

    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        after = data.draw(st.integers(0, self.journal.last_seq + 2))
        journal = self.journal
        try:
            replay = journal.replay_after(after, self.now)
        except ReplayImpossible as exc:
            if exc.reason == "journal_overflow":
                # events above `after` are missing although the client never acked them
                assert journal.acked <= after < journal.first_seq - 1
            else:
                assert after > journal.last_seq or after < journal.acked
            return
        assert [e.seq for e in replay] == list(range(after + 1, journal.last_seq + 1))
        assert [e.payload for e in replay] == [self.sent[e.seq] for e in replay]

    # --- the attachment ---------------------------------------------------------------

    @precondition(lambda self: self.attachment.state is AttachmentState.ATTACHED)
    @rule()
    def drop(self) -> None:
        self.attachment.detach()

    @precondition(lambda self: not self.attachment.ended)
    @rule()
    def resume(self) -> None:
        old, generation = self.attachment.token, self.attachment.generation
        replaced = self.attachment.attached
        assert self.attachment.reattach(old, self._new_token()) is replaced
        self.used.append(old)
        assert self.attachment.token != old
        assert self.attachment.generation == generation + 1
        assert self.attachment.state is AttachmentState.ATTACHED

    @rule(data=st.data())
    def resume_with_a_used_or_wrong_token(self, data: st.DataObject) -> None:
        offered = data.draw(st.sampled_from([*self.used, "wrong"]))
        assume(offered != self.attachment.token)
        state, token = self.attachment.state, self.attachment.token
        generation = self.attachment.generation
        expected = UnknownSession if self.attachment.ended else InvalidResumeToken
        with pytest.raises(expected):
            self.attachment.reattach(offered, "never-used")
        assert (self.attachment.state, self.attachment.token) == (state, token)
        assert self.attachment.generation == generation

    @precondition(lambda self: self.attachment.state is AttachmentState.DETACHED)
    @rule()
    def grace_expires(self) -> None:
        self.attachment.expire()
        with pytest.raises(UnknownSession):
            self.attachment.reattach(self.attachment.token, "never-used")

    # --- invariants -------------------------------------------------------------------

    def _kept_seqs(self) -> list[int]:
        return [e.seq for e in self.journal.replay_after(self.journal.first_seq - 1, self.now)]

    @invariant()
    def bounds_hold(self) -> None:
        journal = self.journal
        kept = journal.kept()
        assert journal.bytes <= MAX_BYTES
        assert len(kept) == len(journal)
        assert kept == [self.sent[s] for s in range(journal.first_seq, journal.last_seq + 1)]
        journal.expire(self.now)
        assert all(
            self.now - e.at_ms <= MAX_AGE_MS
            for e in journal.replay_after(journal.first_seq - 1, self.now)
        )


TestAttachmentJournal = AttachmentJournal.TestCase
TestAttachmentJournal.settings = settings(settings(), max_examples=200, stateful_step_count=40)
