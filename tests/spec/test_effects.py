"""The `Effect` union is closed: it names every effect record of spec.effects."""

from __future__ import annotations

import dataclasses
from typing import get_args

from spec import effects
from spec.effects import Effect, ItemRef, PromptInput

#: records that effects carry, not effects themselves
_PARTS = {ItemRef, PromptInput}


def test_the_effect_union_names_every_effect_record() -> None:
    records = {
        value
        for name in effects.__all__
        if isinstance(value := getattr(effects, name), type)
        and dataclasses.is_dataclass(value)
        and value not in _PARTS
    }
    assert set(get_args(Effect)) == records
