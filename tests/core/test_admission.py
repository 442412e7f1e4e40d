"""Admission across worker processes: each admits its share of `max_sessions`."""

from __future__ import annotations

import pytest

from core.admission import worker_share


@pytest.mark.parametrize(
    ("max_sessions", "workers", "share"),
    [(64, 1, 64), (64, 2, 32), (5, 2, 3), (1, 4, 1), (7, 7, 1), (64, 3, 22)],
)
def test_each_worker_admits_the_ceiling_of_an_even_share(
    max_sessions: int, workers: int, share: int
) -> None:
    assert worker_share(max_sessions, workers) == share
    assert share * workers >= max_sessions > (share - 1) * workers


def test_a_server_has_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        worker_share(64, 0)
