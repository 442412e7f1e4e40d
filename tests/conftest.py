from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# `ci` is derandomized so `make test` is repeatable; `nightly` runs 10x the examples.
settings.register_profile(
    "ci",
    max_examples=100,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=1000,
    stateful_step_count=80,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
