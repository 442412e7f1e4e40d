"""`core.session.SessionProtocol` against the independent reference model, step by step.

The state machine lives in `tests.stateful.machine`; this module plugs the real session
in. It skips cleanly until `core.session` exists.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

from spec.limits import Limits
from spec.session_config import SessionConfig
from tests.stateful.machine import SessionMachine

session = pytest.importorskip("core.session")


def _make_sut(config: SessionConfig, limits: Limits, profile: str) -> Any:
    return session.SessionProtocol(
        session_id="s1", config=config, limits=limits, profile=profile, now_ms=0
    )


class SessionVsReference(SessionMachine):
    make_sut = staticmethod(_make_sut)


TestSessionVsReference = SessionVsReference.TestCase
# more programs than the profile's default (ci: 800, about 30 s while they agree), capped
# for the long profiles
TestSessionVsReference.settings = settings(
    settings(), max_examples=min(settings().max_examples * 8, 2000)
)
