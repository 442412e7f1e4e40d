"""A filled-in sample instance of every wire event, built from its type information, so
an event added to a union is round-tripped without anyone writing a sample by hand."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import inspect as mi


def sample_value(t: mi.Type) -> Any:
    if isinstance(t, mi.Metadata):  # a documented default (spec/events/objects.py)
        return sample_value(t.type)
    if isinstance(t, mi.UnionType):
        for sub in t.types:
            if not isinstance(sub, mi.NoneType):
                return sample_value(sub)
        return None
    if isinstance(t, mi.BoolType):
        return True
    if isinstance(t, mi.IntType):
        return max(1, (t.ge or 0), (t.gt or 0) + 1)
    if isinstance(t, mi.FloatType):
        return 0.5 if (t.le is not None and t.le <= 1) else 1.5
    if isinstance(t, mi.StrType):
        return "x"
    if isinstance(t, mi.BytesType):
        return b"\x00\x01\xff"
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.ListType):
        return [sample_value(t.item_type)]
    if isinstance(t, mi.DictType):
        return {"k": "v"}
    if isinstance(t, mi.AnyType):
        return "any"
    if isinstance(t, mi.StructType):
        return sample_struct(t)
    raise TypeError(f"no sample for {t!r}")


def sample_struct(t: mi.StructType) -> Any:
    kwargs = {f.name: sample_value(f.type) for f in t.fields}
    return t.cls(**kwargs)


def samples(union: Any) -> list[Any]:
    info = mi.type_info(union)
    assert isinstance(info, mi.UnionType)
    return [sample_struct(t) for t in info.types if isinstance(t, mi.StructType)]


def minimal(union: Any) -> list[Any]:
    """Each event with only its required fields."""
    out = []
    for t in mi.type_info(union).types:
        kwargs = {f.name: sample_value(f.type) for f in t.fields if f.required}
        out.append(t.cls(**kwargs))
    return out


__all__ = ["minimal", "msgspec", "sample_struct", "sample_value", "samples"]
