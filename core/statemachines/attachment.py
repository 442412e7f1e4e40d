"""Attachment: which connection carries a resumable session.

Spec: `spec.tables.attachment.ATTACHMENT`. Diagram: `docs/statemachines/attachment.md`.

Theory of operation: a resumable session (docs/session-semantics.md D27) starts
`attached` with resume token and generation 1. A dropped connection `detach`es it; a
`session.resume` that names the current token reattaches it (`resume` from `detached`,
`replace` while the old connection is still attached), rotating the token (the caller
draws the new one: core draws no random numbers) and advancing the generation. Grace
expiry `expire`s a detached session; any other end `close`s it.

Invariants (ATTACH-1, ATTACH-2): only the current token reattaches, and every
reattachment rotates it, so a token works once; a session has at most one connection.
Refusals are typed: a token that is not the current one is `InvalidResumeToken`, a
session that has ended is `UnknownSession`; a refusal changes nothing.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from core.errors import InvalidTransition
from core.statemachines._rulebook import build, fire
from spec.errors import InvalidResumeToken, UnknownSession
from spec.tables import ATTACHMENT, AttachmentState

if TYPE_CHECKING:
    from transitions import EventData

__all__ = ["Attachment"]

_RULES = build(ATTACHMENT)


class Attachment:
    __slots__ = ("generation", "session_id", "state", "token")

    def __init__(self, session_id: str, token: str) -> None:
        self.session_id = session_id
        self.token = token
        self.generation = 1
        self.state = AttachmentState.ATTACHED

    @property
    def attached(self) -> bool:
        return self.state is AttachmentState.ATTACHED

    @property
    def ended(self) -> bool:
        return self.state in ATTACHMENT.terminal

    # --- verbs ----------------------------------------------------------------------

    def detach(self) -> None:
        fire(_RULES, self, "detach")

    def reattach(self, token: str, new_token: str) -> bool:
        """Reattach with `token`, which becomes `new_token`; True when a connection that
        was still attached is replaced.

        Raises:
            InvalidResumeToken: `token` is not the current token.
            UnknownSession: the session has ended (expired or closed).
        """
        replaced = self.attached
        try:
            fire(_RULES, self, "replace" if replaced else "resume", token=token, new=new_token)
        except InvalidTransition as exc:
            if exc.guard is not None:
                raise InvalidResumeToken(
                    "the resume token is not this session's current one", param="resume_token"
                ) from None
            raise UnknownSession(
                f"session `{self.session_id}` has ended", param="session_id"
            ) from None
        return replaced

    def expire(self) -> None:
        fire(_RULES, self, "expire")

    def close(self) -> None:
        if not self.ended:
            fire(_RULES, self, "close")

    # --- guards and effects -----------------------------------------------------------

    def token_matches(self, event: EventData) -> bool:
        offered: str = event.kwargs.get("token", "")
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def rotate(self, event: EventData) -> None:
        self.token = event.kwargs["new"]
        self.generation += 1
