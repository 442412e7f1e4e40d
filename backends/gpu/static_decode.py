"""Token-by-token decoding on a static KV cache, with the step captured as a CUDA Graph.

The transformers runtime (`hf_engines.py`) prefills a prompt with the model's own
forward (vision, audio, M-RoPE: whatever the architecture does), copies the prompt's
keys and values into a `StaticCache` of `max_len` positions, and then decodes one token
per step through the language model and its head alone. Every tensor a step reads or
writes has a fixed address and shape (token, cache position, position ids, a 4D mask
over the whole cache), so on CUDA the step is captured once as a `torch.cuda.CUDAGraph`
and replayed: one launch per token instead of a few hundred kernels launched from
Python. With `graphs=False`, or on the CPU, the same step runs eagerly, which is what
the "graphs off" figures of the GPU check measure.

The explicit 4D mask is what makes capture possible: given one, transformers skips its
own mask construction (which branches on tensor values). Each prompt starts from a reset
cache, and positions beyond the current one are masked. One decoder serves one request
at a time (its buffers are shared); the engine serialises requests.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StaticDecoder"]


class StaticDecoder:
    """One language model's decode step on a static cache; graph-captured on CUDA.

    Args:
        language_model: the decoder stack (`model.model.language_model`).
        lm_head: the output projection.
        text_config: the decoder's config (sizes of the static cache).
        max_len: positions in the cache (prompt + generated tokens).
        mrope: the decoder takes 3-axis M-RoPE position ids (Qwen3-VL).
        graphs: capture the step as a CUDA Graph when on a CUDA device.
    """

    def __init__(
        self,
        language_model: Any,
        lm_head: Any,
        text_config: Any,
        *,
        max_len: int,
        device: str,
        dtype: Any,
        mrope: bool,
        graphs: bool,
    ) -> None:
        import torch
        from transformers import StaticCache

        self.language_model = language_model
        self.lm_head = lm_head
        self.max_len = max_len
        self.device = torch.device(device)
        self.graphs = graphs and self.device.type == "cuda"
        self.cache = StaticCache(config=text_config, max_cache_len=max_len)
        heads = text_config.num_key_value_heads
        head_dim = getattr(text_config, "head_dim", None) or (
            text_config.hidden_size // text_config.num_attention_heads
        )
        itemsize = torch.empty((), dtype=dtype).element_size()
        #: the static cache's keys and values, all layers: what a full slot costs
        self.cache_bytes = text_config.num_hidden_layers * 2 * heads * head_dim * max_len * itemsize
        self._token = torch.zeros(1, 1, dtype=torch.long, device=self.device)
        self._cache_position = torch.zeros(1, dtype=torch.long, device=self.device)
        axes = (3, 1, 1) if mrope else (1, 1)
        self._position_ids = torch.zeros(axes, dtype=torch.long, device=self.device)
        self._mask = torch.zeros(1, 1, 1, max_len, dtype=dtype, device=self.device)
        self._key_positions = torch.arange(max_len, device=self.device).view(1, 1, 1, -1)
        self._masked = torch.finfo(dtype).min
        self._logits: Any = None
        self._graph: Any = None
        self._rope_delta = 0
        self._filled = 0  # positions holding keys (where the next step writes)
        self.captured = False

    def load_prompt(self, prompt_cache: Any, length: int, rope_delta: int = 0) -> None:
        """Copy a prefill's keys and values (a DynamicCache of `length` positions)."""
        import torch

        if length >= self.max_len:
            raise ValueError(f"prompt of {length} tokens does not fit {self.max_len} positions")
        self.cache.reset()
        positions = torch.arange(length, device=self.device)
        for index, layer in enumerate(prompt_cache.layers):
            self.cache.update(
                layer.keys[:, :, :length],
                layer.values[:, :, :length],
                index,
                {"cache_position": positions},
            )
        self._filled = length
        self._rope_delta = int(rope_delta)

    def _set_filled(self, length: int) -> None:
        """Where the next step writes. transformers' static layers (5.x) ignore the
        cache position and append at their own counter, a tensor the captured graph
        increments in place; the capture's extra runs advance it too, so it is set
        back here. Layers without the counter take the cache position."""
        for layer in self.cache.layers:
            counter = getattr(layer, "cumulative_length", None)
            if counter is not None and hasattr(counter, "fill_"):
                counter.fill_(length)
        self._filled = length

    def _step(self) -> None:
        out = self.language_model(
            input_ids=self._token,
            attention_mask=self._mask,
            position_ids=self._position_ids,
            past_key_values=self.cache,
            cache_position=self._cache_position,
            use_cache=True,
        )
        logits = self.lm_head(out.last_hidden_state[:, -1, :])
        if self._logits is None:
            self._logits = logits
        else:
            self._logits.copy_(logits)

    def _capture(self) -> None:
        import torch

        self._step()  # allocates the logits buffer outside the graph
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._step()  # warm-up on the capture stream (lazy kernels, workspaces)
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the other stages' threads keep using the device meanwhile
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                self._step()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        self._graph = graph
        self.captured = True

    def step(self, token: int, position: int) -> Any:
        """Logits (1, vocab) for `token` written at cache `position`; a static buffer."""
        import torch

        if position >= self.max_len:
            raise ValueError(f"position {position} is past the cache's {self.max_len}")
        self._token.fill_(token)
        self._cache_position.fill_(position)
        self._position_ids.fill_(position + self._rope_delta)
        self._mask.copy_(
            torch.where(self._key_positions <= position, 0.0, self._masked).to(self._mask.dtype)
        )
        if position != self._filled:
            self._set_filled(position)
        if not self.graphs:
            self._step()
        elif self._graph is None:
            self._capture()  # the capture's own runs wrote this position already
            self._set_filled(position + 1)
        else:
            self._graph.replay()
        self._filled = position + 1
        return self._logits
