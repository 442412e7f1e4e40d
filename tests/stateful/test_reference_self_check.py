"""The stateful machine run with the reference model on both sides.

It needs no `core`: it checks the machine itself (rules, bundles, preconditions) and,
above all, that the reference model keeps the stream invariants I1-I9 and its internal
ones (I5 pending bytes, I6 idle retention, I8 playback) on long random programs, and that
it is deterministic and leaves its state untouched on every rejection.
"""

from __future__ import annotations

from hypothesis import settings

from tests.stateful.machine import SessionMachine


class ReferenceSelfCheck(SessionMachine):
    pass


TestReferenceSelfCheck = ReferenceSelfCheck.TestCase
TestReferenceSelfCheck.settings = settings(settings(), max_examples=60)
