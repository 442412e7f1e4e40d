"""Many requests decoding together on one static KV cache: a batch row per slot.

`SlotDecoder` is the tensor side of the batched transformers runtime; the bookkeeping
side (who is in which slot, which chunk runs when) is `slot_scheduler.py`. It holds, for
one decoder-only language model (Qwen3 / Qwen2 text models, or Qwen3-VL's language
model with 3-axis M-RoPE position ids and a per-slot rope offset, as `static_decode.py`
does for one request), a KV cache of `slots` rows of `max_len` positions, and:

- `prefill_chunk(slot, token_ids, start)`: one forward of a chunk of a prompt, its keys
  and values written into the slot's row at positions `start`.. (chunked prefill; KV
  already in the row before `start` is kept, which is how a session's next turn reuses
  its previous one). A prompt with images is prefilled by the model's own forward
  instead, and its KV copied in with `load_prefix` (or the chunk given
  `inputs_embeds` / `position_ids` / extra keyword arguments of the language model):
  the hooks the VLM engine needs.
- `step(slots, tokens)`: ONE forward of the whole batch, each row one token at its own
  position, then sampling for every row at once, and one transfer of the sampled ids to
  the host per step (one `.tolist()`, not one per slot).

The mask: each row gets an explicit additive 4D mask (0 for key positions up to its own,
the dtype's minimum beyond), so transformers builds none, and a row never sees a
position past its own filled length, whatever an earlier request left there. Attention
reads the cache sliced to the longest active row's filled length (plus the one written
this step), not the whole `max_len`: a batch of short prompts costs short attention. A
masked key's weight is exactly zero (exp underflows), so a row's output does not depend
on how long the others are; only the matmul shapes change with the batch, which can move
the last bits of a float on some backends (never a greedy token in the tests).

The rows: a step's batch row i reads and writes cache row `slots[i]`. When the slots are
consecutive (the scheduler fills the lowest free slot first) the cache is read as a view;
otherwise the rows' sliced KV is gathered, a copy as large as the attention's own read.

Sampling, vectorised over the rows with per-slot parameters (`begin` sets them):
repetition penalty (generated tokens' logits divided by it when positive, multiplied
when negative: `hf_engines._sample`'s rule), presence penalty (`presence_penalty`
subtracted from the logit of every token the slot has generated: vLLM's rule), then
temperature (0: greedy), top-k, top-p, and a draw. The draw is an exponential race
(argmax of p / E, which picks each token with probability p) whose noise is
counter-based: E for slot s's n-th draw and token v comes from a hash of (seed, n, v),
so a slot's samples depend on its own seed and history only, never on which other
slots share the batch (no per-slot `torch.Generator`, which would cost a kernel launch
per slot). A request without a seed gets a random one.

CUDA Graphs (`graphs=True` on a CUDA device): the forward of a step is captured per
(rows bucket, attended length bucket) and replayed; rows are padded to 1, 2, 4, 8, 16
or 32 (pad rows read and write a scratch row of the cache), and the attended length is
rounded up to a power of two from 256 (up to `max_len`), since a graph's shapes are
fixed. Sampling runs eagerly after the replay (a dozen kernels for the whole batch).
On the CPU everything runs eagerly with exact shapes; the graph path is not exercised by
the CPU tests (see the module's tests) and is kept small.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from backends.gpu.slot_cache import slot_cache

if TYPE_CHECKING:
    from collections.abc import Sequence

    from backends.gpu.engine_api import Sampling

__all__ = ["GRAPH_LENGTH_FLOOR", "GRAPH_ROW_BUCKETS", "SlotDecoder", "StepResult"]

#: padded batch sizes captured as CUDA Graphs
GRAPH_ROW_BUCKETS: Final = (1, 2, 4, 8, 16, 32)
#: the shortest attended length a graph is captured for (lengths round up to powers of 2)
GRAPH_LENGTH_FLOOR: Final = 256

_MASK32: Final = 0xFFFFFFFF
# odd multipliers below 2**31, so a 32-bit value times one stays inside int64
_MIX_A: Final = 0x7FEB352D
_MIX_B: Final = 0x5BD1E995
_TOKEN_STRIDE: Final = 0x2545F491


@dataclass(frozen=True, slots=True)
class StepResult:
    """A step's sampled ids (on the host, in the order of the rows asked for) and the
    logits they were sampled from (on the device, one row each, before penalties; with
    CUDA Graphs a view of the graph's output, valid until the next step)."""

    tokens: list[int]
    logits: Any


def _mix32(x: Any) -> Any:
    """A 32-bit integer hash (xorshift-multiply) of an int64 tensor of values < 2**32."""
    x = x ^ (x >> 16)
    x = (x * _MIX_A) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _MIX_B) & _MASK32
    return x ^ (x >> 16)


def _bucket(value: int, buckets: Sequence[int]) -> int:
    for bucket in buckets:
        if bucket >= value:
            return bucket
    raise ValueError(f"{value} is past the largest bucket {buckets[-1]}")


class SlotDecoder:
    """One language model's batched decode over `slots` KV rows: see the module.

    Args:
        language_model: the decoder stack (`model.model`, or Qwen3-VL's
            `model.model.language_model`).
        lm_head: the output projection.
        text_config: the decoder's config (layers, KV heads, head size).
        slots: KV rows (requests decoding at once).
        max_len: positions of one row (prompt plus generated tokens).
        mrope: the decoder takes 3-axis M-RoPE position ids (Qwen3-VL).
        graphs: capture the step as CUDA Graphs when on a CUDA device.
        suppress_ids: token ids never sampled (the generation config's).
    """

    def __init__(
        self,
        language_model: Any,
        lm_head: Any,
        text_config: Any,
        *,
        slots: int,
        max_len: int,
        device: str,
        dtype: Any,
        mrope: bool = False,
        graphs: bool = False,
        suppress_ids: Sequence[int] = (),
    ) -> None:
        import torch

        if not 1 <= slots <= GRAPH_ROW_BUCKETS[-1]:
            raise ValueError(f"slots must be 1..{GRAPH_ROW_BUCKETS[-1]}, got {slots}")
        self.language_model = language_model
        self.lm_head = lm_head
        self.slots = slots
        self.max_len = max_len
        self.device = torch.device(device)
        self.dtype = dtype
        self.mrope = mrope
        self.graphs = graphs and self.device.type == "cuda"
        heads = text_config.num_key_value_heads
        head_dim = getattr(text_config, "head_dim", None) or (
            text_config.hidden_size // text_config.num_attention_heads
        )
        layers = text_config.num_hidden_layers
        self.vocab = int(lm_head.weight.shape[0])
        rows = slots + 1  # the last: scratch, what a graph's pad rows read and write
        self._scratch = slots
        like = {"dtype": dtype, "device": self.device}
        with torch.inference_mode():
            self.cache = slot_cache(layers, rows, heads, max_len, head_dim, **like)
            self._key_positions = torch.arange(max_len, device=self.device)
            self._token_ids = torch.arange(self.vocab, device=self.device)
            self._suppress = (
                torch.tensor(sorted(set(suppress_ids)), device=self.device)
                if suppress_ids
                else None
            )
            # per-row sampling state (`begin`)
            self._temperature = torch.zeros(rows, device=self.device)
            self._top_k = torch.zeros(rows, dtype=torch.long, device=self.device)
            self._top_p = torch.ones(rows, device=self.device)
            self._repetition = torch.ones(rows, device=self.device)
            self._presence = torch.zeros(rows, device=self.device)
            self._seed = torch.zeros(rows, dtype=torch.long, device=self.device)
            self._draws = torch.zeros(rows, dtype=torch.long, device=self.device)
            self._seen = torch.zeros(rows, self.vocab, dtype=torch.bool, device=self.device)
            self._rope_delta = torch.zeros(rows, dtype=torch.long, device=self.device)
        itemsize = torch.empty((), dtype=dtype).element_size()
        #: the cache's keys and values, all rows and layers
        self.cache_bytes = layers * 2 * rows * heads * head_dim * max_len * itemsize
        self._masked = torch.finfo(dtype).min
        #: positions whose KV each slot's row holds (where its next token is written)
        self.lengths = [0] * rows
        self._host_sampling: list[tuple[float, int, float]] = [(0.0, 0, 1.0)] * rows
        self._graphs: dict[tuple[int, int, bool], Any] = {}
        self._graph_embeds: Any = None  # (32, hidden): rows fed embeddings (the TTS)
        self._graph_inputs: Any = None  # (3, 32): rows, tokens, positions
        self._graph_logits: Any = None
        self._graph_hidden: Any = None
        #: the last forward's final hidden states, a row per row of its logits (the TTS
        #: code predictor reads them); with CUDA Graphs valid until the next step
        self.last_hidden: Any = None
        self._graph_pool: Any = None

    @property
    def captured_buckets(self) -> int:
        """CUDA Graphs captured so far, one per (rows, attended length) bucket."""
        return len(self._graphs)

    # -- per-slot state -------------------------------------------------------------

    def begin(self, slot: int, sampling: Sampling) -> None:
        """A new request in `slot`: its sampling settings, a fresh draw counter and
        generated-token set, no rope offset (`load_prefix` sets a prompt's with images
        again). The row's KV stays: a prefix the scheduler found reusable."""
        import torch

        self._check_slot(slot)
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(32)
        with torch.inference_mode():
            self._temperature[slot] = max(float(sampling.temperature), 0.0)
            self._top_k[slot] = max(int(sampling.top_k), 0)
            self._top_p[slot] = float(sampling.top_p)
            self._repetition[slot] = float(sampling.repetition_penalty)
            self._presence[slot] = float(sampling.presence_penalty)
            self._seed[slot] = int(seed) & _MASK32
            self._draws[slot] = 0
            self._seen[slot] = False
            self._rope_delta[slot] = 0
        self._host_sampling[slot] = (
            float(sampling.temperature),
            int(sampling.top_k),
            float(sampling.top_p),
        )

    def set_rope_delta(self, slot: int, delta: int) -> None:
        """M-RoPE: a generated token at position p has position id p + delta (the
        offset `get_rope_index` returns for the slot's prompt)."""
        import torch

        with torch.inference_mode():
            self._rope_delta[slot] = int(delta)

    def load_prefix(self, slot: int, prompt_cache: Any, length: int, rope_delta: int = 0) -> None:
        """The hook for prompts the model's own forward prefills (images): copy the
        first `length` positions of a transformers cache (batch 1) into the slot."""
        import torch

        self._check_slot(slot)
        if length >= self.max_len:
            raise ValueError(f"prompt of {length} tokens does not fit {self.max_len} positions")
        with torch.inference_mode():
            for index, layer in enumerate(prompt_cache.layers):
                self.cache.keys[index][slot, :, :length] = layer.keys[0, :, :length]
                self.cache.values[index][slot, :, :length] = layer.values[0, :, :length]
        self.lengths[slot] = length
        self.set_rope_delta(slot, rope_delta)

    # -- forwards -------------------------------------------------------------------

    def prefill_chunk(
        self,
        slot: int,
        token_ids: Sequence[int],
        start: int,
        *,
        inputs_embeds: Any = None,
        position_ids: Any = None,
        **model_kwargs: Any,
    ) -> Any:
        """Write the KV of prompt tokens `token_ids` at positions `start`.. of `slot`
        (the row's KV before `start` is kept); the logits (1, vocab) of the last one.

        `inputs_embeds`, `position_ids` (M-RoPE: (3, 1, n)) and `model_kwargs` (Qwen3-VL:
        `visual_pos_masks`, `deepstack_visual_embeds`) pass through to the language
        model, for a chunk with images in it."""
        import torch

        self._check_slot(slot)
        n = len(token_ids) if inputs_embeds is None else int(inputs_embeds.shape[1])
        end = start + n
        if n < 1 or start > self.lengths[slot] or end > self.max_len:
            raise ValueError(
                f"chunk {start}..{end} of slot {slot} (filled {self.lengths[slot]}) "
                f"does not fit {self.max_len} positions"
            )
        with torch.inference_mode():
            keys = self._key_positions[:end]
            queries = torch.arange(start, end, device=self.device)
            mask = torch.where(keys.view(1, -1) <= queries.view(-1, 1), 0.0, self._masked)
            mask = mask.to(self.dtype).view(1, 1, n, end)
            if position_ids is None:
                ids = (queries + self._rope_delta[slot]).view(1, n)
                position_ids = ids.expand(3, 1, n) if self.mrope else ids
            self.cache.prepare(None, None, end, first=slot, chunk=start)
            inputs: dict[str, Any] = {"inputs_embeds": inputs_embeds}
            if inputs_embeds is None:
                ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
                inputs = {"input_ids": ids}
            out = self.language_model(
                **inputs,
                attention_mask=mask,
                position_ids=position_ids,
                past_key_values=self.cache,
                use_cache=True,
                **model_kwargs,
            )
            self.last_hidden = out.last_hidden_state[:, -1, :]
            logits = self.lm_head(self.last_hidden)
        self.lengths[slot] = end
        return logits

    def forward_step(
        self, slots: Sequence[int], tokens: Sequence[int], *, inputs_embeds: Any = None
    ) -> Any:
        """One forward over `slots`, each fed its token at its next position; the
        logits (len(slots), vocab), row i for `slots[i]`. `inputs_embeds`
        (len(slots), hidden): the rows' inputs instead of the tokens' embeddings (the
        TTS Talker's, a sum of a codec frame's embeddings; `tokens` are then unused)."""
        import torch

        if len(slots) != len(tokens) or not slots or len(set(slots)) != len(slots):
            raise ValueError("one token for each of distinct slots")
        positions = [self.lengths[slot] for slot in slots]
        for slot, position in zip(slots, positions, strict=True):
            self._check_slot(slot)
            if position >= self.max_len:
                raise ValueError(f"slot {slot} is full ({self.max_len} positions)")
        with torch.inference_mode():
            if self.graphs:
                logits = self._replay(slots, tokens, positions, inputs_embeds)
            else:
                packed = torch.tensor([list(slots), list(tokens), positions], device=self.device)
                rows, token_ids, where = packed[0], packed[1], packed[2]
                consecutive = list(slots) == list(range(slots[0], slots[0] + len(slots)))
                first = slots[0] if consecutive else None
                logits = self._forward(
                    rows, token_ids, where, max(positions) + 1, first, inputs_embeds
                )
        for slot in slots:
            self.lengths[slot] += 1
        return logits

    def _forward(
        self,
        rows: Any,
        tokens: Any,
        positions: Any,
        attend: int,
        first: int | None,
        embeds: Any = None,
    ) -> Any:
        """The batch's forward: tokens (B,) (or `embeds` (B, hidden)) at positions (B,)
        of cache rows (B,)."""
        import torch

        batch = int(rows.shape[0])
        keys = self._key_positions[:attend].view(1, -1)
        mask = torch.where(keys <= positions.view(-1, 1), 0.0, self._masked)
        mask = mask.to(self.dtype).view(batch, 1, 1, attend)
        ids = (positions + self._rope_delta[rows]).view(batch, 1)
        position_ids = ids.unsqueeze(0).expand(3, batch, 1) if self.mrope else ids
        self.cache.prepare(rows, positions.view(batch, 1), attend, first=first, chunk=None)
        inputs: dict[str, Any] = {"input_ids": tokens.view(batch, 1)}
        if embeds is not None:
            inputs = {"inputs_embeds": embeds.reshape(batch, 1, -1)}
        out = self.language_model(
            **inputs,
            attention_mask=mask,
            position_ids=position_ids,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.last_hidden = out.last_hidden_state[:, -1, :]
        return self.lm_head(self.last_hidden)

    # -- CUDA Graphs (a CUDA device only; the CPU tests never reach this) -------------

    def _replay(
        self,
        slots: Sequence[int],
        tokens: Sequence[int],
        positions: list[int],
        embeds: Any = None,
    ) -> Any:
        import torch

        batch = len(slots)
        rows_bucket = _bucket(batch, GRAPH_ROW_BUCKETS)
        lengths = []
        length = GRAPH_LENGTH_FLOOR
        while length < self.max_len:
            lengths.append(length)
            length *= 2
        attend = _bucket(max(positions) + 1, [*lengths, self.max_len])
        pad = rows_bucket - batch
        host = torch.tensor(
            [
                [*slots, *[self._scratch] * pad],
                [*tokens, *[0] * pad],
                [*positions, *[0] * pad],
            ]
        )
        if self._graph_inputs is None:
            top = GRAPH_ROW_BUCKETS[-1]
            self._graph_inputs = torch.zeros(3, top, dtype=torch.long, device=self.device)
            self._graph_logits = torch.zeros(top, self.vocab, dtype=self.dtype, device=self.device)
            hidden = int(self.lm_head.weight.shape[1])
            self._graph_hidden = torch.zeros(top, hidden, dtype=self.dtype, device=self.device)
            self._graph_pool = torch.cuda.graph_pool_handle()
        inputs = self._graph_inputs[:, :rows_bucket]
        inputs.copy_(host)
        graph_embeds = None
        if embeds is not None:  # the rows' inputs through a static buffer as well
            if self._graph_embeds is None:
                top = GRAPH_ROW_BUCKETS[-1]
                hidden = int(embeds.shape[-1])
                self._graph_embeds = torch.zeros(top, hidden, dtype=self.dtype, device=self.device)
            graph_embeds = self._graph_embeds[:rows_bucket]
            graph_embeds[:batch].copy_(embeds.reshape(batch, -1))
        key = (rows_bucket, attend, embeds is not None)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._capture(inputs, attend, rows_bucket, graph_embeds)
            self._graphs[key] = graph
        graph.replay()
        self.last_hidden = self._graph_hidden[:batch]
        return self._graph_logits[:batch]

    def _capture(self, inputs: Any, attend: int, batch: int, embeds: Any = None) -> Any:
        import torch

        def run() -> None:
            logits = self._forward(inputs[0], inputs[1], inputs[2], attend, None, embeds)
            self._graph_logits[:batch].copy_(logits)
            self._graph_hidden[:batch].copy_(self.last_hidden)

        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            run()  # warm-up (lazy kernels, workspaces); rewrites the same KV
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(
                graph, pool=self._graph_pool, stream=stream, capture_error_mode="thread_local"
            ):
                run()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        return graph

    # -- sampling -------------------------------------------------------------------

    def step(
        self,
        slots: Sequence[int],
        tokens: Sequence[int],
        *,
        first: Sequence[tuple[int, Any]] = (),
        inputs_embeds: Any = None,
    ) -> StepResult:
        """One engine step's forward and sampling: `slots` decode `tokens` (or
        `inputs_embeds`, see `forward_step`), and the `first` (slot, prefill logits)
        pairs (prompts completed this step) are sampled with them; ids in the order
        `slots`, then `first`'s. One host transfer."""
        import torch

        parts = []
        rows = list(slots)
        if slots:
            parts.append(self.forward_step(slots, tokens, inputs_embeds=inputs_embeds))
        for slot, logits in first:
            rows.append(slot)
            parts.append(logits.reshape(1, -1))
        if not parts:
            return StepResult([], None)
        logits = parts[0] if len(parts) == 1 else torch.cat(parts)
        sampled = self.sample(rows, logits)
        return StepResult(sampled.tolist(), logits)

    def sample(self, slots: Sequence[int], logits: Any) -> Any:
        """Ids (len(slots),) on the device, row i sampled with `slots[i]`'s settings
        from `logits[i]`; each slot's generated set and draw counter advance."""
        import torch

        with torch.inference_mode():
            rows = torch.tensor(list(slots), dtype=torch.long, device=self.device)
            scores = self._penalized(rows, logits)
            picked = scores.argmax(dim=-1)
            settings = [self._host_sampling[slot] for slot in slots]
            if any(temperature > 0 for temperature, _, _ in settings):  # host-known: no sync
                drawn = self._draw(rows, scores, settings)
                picked = torch.where(self._temperature[rows] > 0, drawn, picked)
            self._seen[rows, picked] = True
            self._draws[rows] += 1
        return picked

    def penalized_scores(self, slots: Sequence[int], logits: Any) -> Any:
        """`logits` (float32) as the slots' sampling sees them before temperature:
        suppressed ids at -inf, the repetition and presence penalties applied."""
        import torch

        with torch.inference_mode():
            rows = torch.tensor(list(slots), dtype=torch.long, device=self.device)
            return self._penalized(rows, logits)

    def _penalized(self, rows: Any, logits: Any) -> Any:
        import torch

        scores = logits.float()
        if self._suppress is not None:
            scores = scores.index_fill(-1, self._suppress, float("-inf"))
        seen = self._seen[rows]
        penalty = self._repetition[rows].unsqueeze(1)
        penalized = torch.where(scores > 0, scores / penalty, scores * penalty)
        scores = torch.where(seen, penalized, scores)
        return scores - self._presence[rows].unsqueeze(1) * seen

    def _draw(self, rows: Any, scores: Any, settings: list[tuple[float, int, float]]) -> Any:
        import torch

        temperature = self._temperature[rows]
        scores = scores / torch.where(temperature > 0, temperature, 1.0).unsqueeze(1)
        if any(top_k > 0 or top_p < 1.0 for _, top_k, top_p in settings):
            ordered, order = torch.sort(scores, dim=-1, descending=True)
            top_k = self._top_k[rows]
            keep = torch.where((top_k > 0) & (top_k < self.vocab), top_k, self.vocab)
            kth = ordered.gather(1, (keep - 1).unsqueeze(1))
            scores = scores.masked_fill(scores < kth, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            ordered = probs.gather(1, order)
            drop = torch.cumsum(ordered, dim=-1) - ordered > self._top_p[rows].unsqueeze(1)
            probs = torch.zeros_like(probs).scatter(1, order, ordered.masked_fill(drop, 0.0))
        else:
            probs = torch.softmax(scores, dim=-1)
        # the exponential race: argmax p / E with E = -log U picks v with probability p
        return (probs / -torch.log(self._uniform(rows))).argmax(dim=-1)

    def _uniform(self, rows: Any) -> Any:
        """U in (0, 1), (B, vocab): a hash of the row's seed, its draw count and the
        token id, the same whichever rows share the batch."""
        draw = _mix32((self._seed[rows] ^ _mix32(self._draws[rows] & _MASK32)).unsqueeze(1))
        tokens = (self._token_ids * _TOKEN_STRIDE) & _MASK32
        bits = _mix32(draw ^ tokens.unsqueeze(0)) >> 9  # 23 bits: exact in float32
        return (bits.float() + 0.5) / float(1 << 23)

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} is not one of 0..{self.slots - 1}")
