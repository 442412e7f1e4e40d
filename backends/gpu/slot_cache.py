"""The batched decoders' KV cache: one row per slot (`batched_decode.SlotDecoder`).

A transformers `Cache` whose `update` writes each batch row's new keys and values at
that row's own positions (a decode step: any rows, one position each; a prefill chunk:
one row, consecutive positions) and returns the rows' KV up to the attended length, as a
view when the rows are consecutive, else gathered.
"""

from __future__ import annotations

from typing import Any

__all__ = ["slot_cache"]


def slot_cache(layers: int, rows: int, heads: int, max_len: int, head_dim: int, **like: Any) -> Any:
    """A transformers `Cache` whose `update` writes each batch row's new keys and
    values at that row's own positions and returns the rows' KV up to the attended
    length (`SlotCache.prepare` says which rows, where, and how far)."""
    import torch
    from transformers import Cache

    class SlotCache(Cache):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(layers=[])
            shape = (rows, heads, max_len, head_dim)
            self.keys = [torch.zeros(shape, **like) for _ in range(layers)]
            self.values = [torch.zeros(shape, **like) for _ in range(layers)]
            self.rows: Any = None  # (B,) cache row of each batch row
            self.write: Any = None  # (B, Q) positions the new keys go to
            self.attend = 0  # positions returned to the attention
            self.first: int | None = None  # rows are first, first + 1, ...: read a view
            self.chunk_start: int | None = None  # one row, positions chunk_start..: slices

        def prepare(
            self, rows: Any, write: Any, attend: int, *, first: int | None, chunk: int | None
        ) -> None:
            self.rows, self.write, self.attend = rows, write, attend
            self.first, self.chunk_start = first, chunk

        def update(
            self, key_states: Any, value_states: Any, layer_idx: int, *_: Any, **__: Any
        ) -> Any:
            keys, values = self.keys[layer_idx], self.values[layer_idx]
            if self.chunk_start is not None:  # a prefill chunk: one row, consecutive
                row, start = self.first, self.chunk_start
                end = start + key_states.shape[-2]
                keys[row, :, start:end] = key_states[0]
                values[row, :, start:end] = value_states[0]
            else:
                # advanced indices around a slice: the indexed shape is (B, Q, heads, dim)
                rows = self.rows.unsqueeze(1)
                keys[rows, :, self.write] = key_states.transpose(1, 2)
                values[rows, :, self.write] = value_states.transpose(1, 2)
            if self.first is not None:
                span = slice(self.first, self.first + key_states.shape[0])
                return keys[span, :, : self.attend], values[span, :, : self.attend]
            return keys[self.rows, :, : self.attend], values[self.rows, :, : self.attend]

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return self.attend

    return SlotCache()
