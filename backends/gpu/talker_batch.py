"""The tensor side of the batched streaming TTS: Qwen3-TTS's Talker and code predictor
stepping many streams at once, one codec frame per stream per step.

`qwen_tts` generates one utterance (or a padded batch started together) with
transformers' `generate`; streams that join and leave at any frame need their own step,
written here around its modules (the same modules, weights and prompt layout):

- `talker_prompt` builds a CustomVoice prompt as `Qwen3TTSForConditionalGeneration.
  generate` does with `non_streaming_mode` (the whole text prefilled), split into the
  speaker prefix (role tokens, the think / language / speaker codec ids), which depends
  on (speaker, language) only, and the text part. Its `match_ids` name each position for
  `SlotScheduler`'s prefix matching: prefix positions by the (speaker, language) key,
  text positions by their text ids, in ranges no codec id reaches, so a slot's old
  codec frames never pass for a prompt.
- `TalkerBatch` holds a `SlotDecoder` over the Talker (its KV rows, per-slot sampling
  state, CUDA Graphs per rows bucket on CUDA) and the speaker prefixes' KV, computed
  once per (speaker, language) and copied into a slot that does not hold it
  (`load_prefix`). `frame_step` runs, for every decoding slot at once, the code
  predictor (the frame's other codebooks; its KV is per frame, so the rows run in
  lockstep in one small cache) and then ONE Talker forward on the frames' summed
  embeddings, sampling each slot's next first-codebook id.

Each slot samples with its own settings and counter-based noise (`SlotDecoder`'s for the
Talker; the predictor's from the same hash of the slot's seed and its frame and group),
so a stream's codes never depend on which others share the step.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from backends.gpu.batched_decode import SlotDecoder, _mix32

if TYPE_CHECKING:
    from collections.abc import Sequence

    from backends.gpu.engine_api import Sampling

__all__ = ["TalkerBatch", "TalkerPrompt", "TtsSampling", "talker_prompt"]

#: text ids for matching sit above every codec id; the prompt's last two positions
#: (text end, codec start) are constants above them
_TEXT_IDS: Final = 1 << 32
_TAIL_IDS: Final = 1 << 33
_MASK32: Final = 0xFFFFFFFF
#: first-codebook ids a stream samples before it may end (qwen_tts's `min_new_tokens`)
MIN_FRAMES: Final = 2


@dataclass(frozen=True, slots=True)
class TtsSampling:
    """A stream's sampling: the Talker's (first codebook) and the code predictor's
    (the frame's other codebooks; temperature 0: greedy, top-k 0: off)."""

    talker: Sampling
    predictor_temperature: float = 0.0
    predictor_top_k: int = 0

    @classmethod
    def of_checkpoint(cls, model: Any) -> TtsSampling:
        """What `qwen_tts` samples a checkpoint with: its `generate_config.json` over
        the package's defaults (do_sample, top-k 50, temperature 0.9, repetition 1.05)."""
        from backends.gpu.engine_api import Sampling

        given = model._merge_generate_kwargs()
        return cls(
            Sampling(
                temperature=float(given["temperature"]) if given["do_sample"] else 0.0,
                top_k=int(given["top_k"]),
                top_p=float(given["top_p"]),
                repetition_penalty=float(given["repetition_penalty"]),
            ),
            float(given["subtalker_temperature"]) if given["subtalker_dosample"] else 0.0,
            int(given["subtalker_top_k"]),
        )


@dataclass(frozen=True, slots=True)
class TalkerPrompt:
    """A stream's Talker input: `embeds` (1, n, hidden), of which the first
    `prefix_len` are the speaker prefix named `prefix_key`; `pad_embed` (hidden,) is
    added to every frame's input (the non-streaming text's trailing pad)."""

    prefix_key: tuple[str, str]
    embeds: Any
    prefix_len: int
    pad_embed: Any
    match_ids: tuple[int, ...]


def _key_ids(key: tuple[str, str], length: int) -> list[int]:
    digest = int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=6).digest(), "big")
    return [-1 - (digest * 4096 + i) for i in range(length)]


def talker_prompt(model: Any, text: str, *, speaker: str, language: str) -> TalkerPrompt:
    """The CustomVoice prompt of `qwen_tts`'s `generate` (`non_streaming_mode=True`, no
    instruction) for `model` (`qwen_tts.Qwen3TTSModel`)."""
    import torch

    inner = model.model
    talker, config = inner.talker, inner.config
    tc = config.talker_config
    model._validate_languages([language])
    model._validate_speakers([speaker])
    ids = model._tokenize_texts([model._build_assistant_text(text)])[0].to(talker.device)

    def text_embed(token_ids: Any) -> Any:
        return talker.text_projection(talker.get_text_embeddings()(token_ids))

    def codec_embed(codec_ids: list[int]) -> Any:
        return talker.get_input_embeddings()(torch.tensor([codec_ids], device=talker.device))

    bos, eos, pad = text_embed(
        torch.tensor(
            [[config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]],
            device=talker.device,
        )
    ).chunk(3, dim=1)
    language_id = None if language.lower() == "auto" else tc.codec_language_id[language.lower()]
    dialect = tc.spk_is_dialect.get(speaker.lower(), False)
    if language.lower() in ("chinese", "auto") and dialect:
        language_id = tc.codec_language_id[dialect]
    think = (
        [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
        if language_id is None
        else [tc.codec_think_id, tc.codec_think_bos_id, language_id, tc.codec_think_eos_id]
    )
    codec = torch.cat(
        [
            codec_embed(think),
            codec_embed([tc.spk_id[speaker.lower()]]),
            codec_embed([tc.codec_pad_id, tc.codec_bos_id]),
        ],
        dim=1,
    )
    prefix = torch.cat(
        [
            text_embed(ids[:, :3]),  # the role: "<|im_start|>assistant\n"
            torch.cat([pad.expand(-1, codec.shape[1] - 2, -1), bos], dim=1) + codec[:, :-1],
        ],
        dim=1,
    )
    words = ids[:, 3:-5]
    body = torch.cat([text_embed(words), eos], dim=1) + codec_embed(
        [tc.codec_pad_id] * (words.shape[1] + 1)
    )
    start = pad + codec_embed([tc.codec_bos_id])
    embeds = torch.cat([prefix, body, start], dim=1)
    key = (speaker.lower(), language.lower())
    match = [
        *_key_ids(key, prefix.shape[1]),
        *(_TEXT_IDS + int(i) for i in words[0].tolist()),
        _TAIL_IDS,
        _TAIL_IDS + 1,
    ]
    return TalkerPrompt(key, embeds, int(prefix.shape[1]), pad.reshape(-1), tuple(match))


class TalkerBatch:
    """Many streams' Talker + code predictor over `slots` KV rows: see the module."""

    def __init__(
        self,
        model: Any,
        *,
        slots: int,
        max_len: int,
        device: str,
        dtype: Any,
        graphs: bool,
    ) -> None:
        import torch

        inner = model.model
        self.model = model
        self.talker = inner.talker
        self.predictor = inner.talker.code_predictor
        tc = inner.config.talker_config
        self.groups = int(tc.num_code_groups)
        self.eos_id = int(tc.codec_eos_token_id)
        vocab = int(tc.vocab_size)
        # qwen_tts's generate never samples the top 1024 ids but the end of speech
        never = [i for i in range(vocab - 1024, vocab) if i != self.eos_id]
        self.decoder = SlotDecoder(
            self.talker.model,
            self.talker.codec_head,
            tc,
            slots=slots,
            max_len=max_len,
            device=device,
            dtype=dtype,
            mrope=True,
            graphs=graphs,
            suppress_ids=never,
        )
        hidden = int(tc.hidden_size)
        self.device = torch.device(device)
        with torch.inference_mode():
            #: per slot: the hidden state that sampled its pending first id
            self._hidden = torch.zeros(slots, hidden, dtype=dtype, device=self.device)
            self._pad = torch.zeros(slots, hidden, dtype=dtype, device=self.device)
        self._frames = [0] * slots  # frames each slot's predictor sampled (its counter)
        self._predictor_sampling: list[tuple[float, int, int]] = [(0.0, 0, 0)] * slots
        self._prefixes: dict[tuple[str, str], tuple[Any, int]] = {}

    @property
    def prefixes_computed(self) -> int:
        """Speaker prefixes whose KV was computed (once each)."""
        return len(self._prefixes)

    def begin(self, slot: int, prompt: TalkerPrompt, sampling: TtsSampling, reused: int) -> None:
        """A stream takes `slot`, of whose prompt the slot holds `reused` positions'
        KV: its sampling state is reset and the speaker prefix loaded if missing."""
        import torch

        self.decoder.begin(slot, sampling.talker)
        seed = int(self.decoder._seed[slot])
        self._predictor_sampling[slot] = (
            sampling.predictor_temperature,
            sampling.predictor_top_k,
            seed,
        )
        self._frames[slot] = 0
        with torch.inference_mode():
            self._pad[slot] = prompt.pad_embed
        if reused < prompt.prefix_len:
            cache, length = self._prefix(prompt)
            self.decoder.load_prefix(slot, cache, length)

    def _prefix(self, prompt: TalkerPrompt) -> tuple[Any, int]:
        known = self._prefixes.get(prompt.prefix_key)
        if known is None:
            import torch
            from transformers import DynamicCache

            with torch.inference_mode():
                cache = DynamicCache()
                self.talker.model(
                    inputs_embeds=prompt.embeds[:, : prompt.prefix_len],
                    past_key_values=cache,
                    use_cache=True,
                )
            known = (cache, prompt.prefix_len)
            self._prefixes[prompt.prefix_key] = known
        return known

    def prefill(self, slot: int, prompt: TalkerPrompt, start: int, end: int) -> Any | None:
        """Prompt positions `start`..`end` of `slot` (those in the loaded prefix are
        skipped); the logits of the last position, or None when nothing ran."""
        import torch

        start = max(start, prompt.prefix_len)
        if start >= end:
            return None
        logits = self.decoder.prefill_chunk(
            slot, [], start, inputs_embeds=prompt.embeds[:, start:end]
        )
        with torch.inference_mode():
            self._hidden[slot] = self.decoder.last_hidden[-1]
        return logits

    def frame_step(
        self, slots: Sequence[int], first_ids: Sequence[int], first: Sequence[tuple[int, Any]]
    ) -> tuple[list[list[int]], list[int]]:
        """One step: each of `slots` completes the frame of its pending first id
        `first_ids[i]` (the predictor) and feeds it to the Talker; the `first` (slot,
        prefill logits) are sampled beside. The frames (codes per slot of `slots`) and
        the sampled ids (`slots`, then `first`'s), from one host transfer each."""
        import torch

        with torch.inference_mode():
            frames = None
            embeds = None
            if slots:
                rows = torch.tensor(list(slots), dtype=torch.long, device=self.device)
                ids = torch.tensor(list(first_ids), dtype=torch.long, device=self.device)
                frames, embeds = self._frames_of(slots, rows, ids)
            parts = []
            if slots:
                parts.append(
                    self.decoder.forward_step(slots, list(first_ids), inputs_embeds=embeds)
                )
                # a prompt's last hidden was kept by `prefill`
                hidden = self.decoder.last_hidden[: len(slots)]
                self._hidden[rows] = hidden.to(self._hidden.dtype)
            parts += [logits.reshape(1, -1) for _, logits in first]
            sampling = [*slots, *(slot for slot, _ in first)]
            if not parts:
                return [], []
            logits = parts[0] if len(parts) == 1 else torch.cat(parts)
            # as qwen_tts's `min_new_tokens=2`: no stream ends before its second frame id
            young = [i for i, slot in enumerate(sampling) if self._frames[slot] < MIN_FRAMES]
            if young:
                logits = logits.clone()
                logits[young, self.eos_id] = float("-inf")
            sampled = self.decoder.sample(sampling, logits).tolist()
        return ([] if frames is None else frames.tolist()), sampled

    def _frames_of(self, slots: Sequence[int], rows: Any, ids: Any) -> tuple[Any, Any]:
        """The frames (B, groups) of first ids `ids` and the Talker's next inputs."""
        import torch
        from transformers import DynamicCache

        predictor = self.predictor
        talker_embed = self.talker.get_input_embeddings()
        first = talker_embed(ids)
        inputs = torch.stack([self._hidden[rows], first], dim=1)
        cache = DynamicCache()
        codes = [ids]
        summed = first
        for group in range(self.groups - 1):
            out = predictor.model(
                inputs_embeds=predictor.small_to_mtp_projection(inputs),
                past_key_values=cache,
                use_cache=True,
            )
            logits = predictor.lm_head[group](out.last_hidden_state[:, -1, :])
            code = self._pick(slots, logits, group)
            codes.append(code)
            embedded = predictor.model.codec_embedding[group](code)
            summed = summed + embedded
            inputs = embedded.unsqueeze(1)
        for slot in slots:
            self._frames[slot] += 1
        return torch.stack(codes, dim=1), summed + self._pad[rows]

    def _pick(self, slots: Sequence[int], logits: Any, group: int) -> Any:
        """Each row's code: greedy at temperature 0, else a draw (top-k, temperature)
        from noise of the slot's seed, frame and group alone."""
        import torch

        picked = logits.argmax(dim=-1)
        settings = [self._predictor_sampling[slot] for slot in slots]
        if not any(temperature > 0 for temperature, _, _ in settings):
            return picked
        drawn = []
        for row, (slot, (temperature, top_k, seed)) in enumerate(zip(slots, settings, strict=True)):
            if temperature <= 0:
                drawn.append(picked[row])
                continue
            scores = logits[row].float() / temperature
            if 0 < top_k < scores.shape[-1]:
                kth = torch.topk(scores, top_k).values[-1]
                scores = scores.masked_fill(scores < kth, float("-inf"))
            counter = (self._frames[slot] * self.groups + group) & _MASK32
            token_ids = torch.arange(scores.shape[-1], device=self.device)
            key = _mix32(
                torch.tensor(seed ^ int(_mix32(torch.tensor(counter))), device=self.device)
            )
            bits = _mix32(key ^ ((token_ids * 0x2545F491) & _MASK32)) >> 9
            uniform = (bits.float() + 0.5) / float(1 << 23)
            drawn.append((torch.softmax(scores, -1) / -torch.log(uniform)).argmax())
        return torch.stack(drawn)
