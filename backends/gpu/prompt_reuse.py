"""What the transformers VLM engine keeps between requests: prompts' KV and frames' encodings.

Each turn of a camera session sends a prompt that begins with the previous turn's prompt
and reply (`backends.joyai.prompt` drops history in blocks so that it does), so nearly
all of a prefill recomputes what the last request already computed. vLLM keeps that
work in its prefix cache; the transformers runtime (`hf_engines.py`) keeps it here:

- `PromptSlots`: the KV of recent requests (the prompt and the generated tokens whose
  keys and values the decode wrote), at most `slots` of them and `max_bytes` in all,
  least recently used evicted first. A request is matched by content, not by session:
  its token ids against each slot's, where an image's placeholder tokens match only if
  the image is the same (its pixels' digest). A match of at least `min_reused` tokens
  is worth it (see `MIN_REUSED_TOKENS`); the engine then prefills only the rest on top
  of the kept KV. A request whose prompt begins with a slot's whole prompt supersedes
  that slot (the same conversation moved on); any other takes a slot of its own, so two
  sessions taking turns each keep, and find, their own.
- `FrameEncodings`: the vision tower's output per frame (the merged visual embeddings
  and Qwen3-VL's deepstack features), keyed by the frame's digest, least recently used
  evicted past `max_images` (a frame's size is bounded by the stage's `max_side`, so the
  count bounds the bytes). Filled when a frame arrives
  (`HfVlmEngine.prepare_image`, ahead of its turn) and by every prefill that encodes
  one; a prefill encodes only the frames it does not find here. It also remembers each
  frame's patch grid (what its placeholder expands to), so a prompt's tokens are known
  without running the image processor on frames seen before.

Pure bookkeeping: the KV and encodings are opaque here (the engine's tensors, with their
byte sizes), so this module needs neither torch nor a model.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "MIN_REUSED_TOKENS",
    "EncodedFrame",
    "FrameEncodings",
    "ImageSpan",
    "KeptPrompt",
    "PromptSlots",
    "SlotMatch",
    "common_prefix",
    "image_digest",
]

#: the shortest kept prefix worth reusing: a GPU forward of a few dozen tokens costs
#: about what one of a single token does (both read all the weights once), so reusing
#: fewer saves nothing measurable while the copy and bookkeeping still cost
MIN_REUSED_TOKENS: Final = 64

Ids = npt.NDArray[np.int64]
Grid = tuple[int, int, int]


def image_digest(image: Any) -> bytes:
    """A decoded frame's identity: its mode, size and pixels (a PIL image)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    digest.update(image.tobytes())
    return digest.digest()


def common_prefix(a: Ids, b: Ids) -> int:
    """How many leading token ids `a` and `b` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


@dataclass(frozen=True, slots=True)
class ImageSpan:
    """One image's placeholder tokens in a prompt: positions [start, end)."""

    start: int
    end: int
    digest: bytes
    grid: Grid  # the patch grid (t, h, w) the vision tower sees


@dataclass(slots=True, eq=False)  # a slot is itself: found and removed by identity
class KeptPrompt:
    """One slot: the token ids whose KV is kept (the prompt, then generated tokens)."""

    ids: Ids
    spans: tuple[ImageSpan, ...]
    prompt_tokens: int  # of `ids`, the prompt's; the rest were generated after it
    kv: Any  # the engine's tensors for every id of `ids`
    nbytes: int


@dataclass(frozen=True, slots=True)
class SlotMatch:
    """The best slot for a new prompt. `reused`: tokens whose kept KV the prefill uses
    (0: prefill it all); `covers`: the new prompt begins with the slot's whole prompt,
    so the slot is superseded by the new request's own and is replaced by it."""

    slot: KeptPrompt | None = None
    reused: int = 0
    covers: bool = False


class PromptSlots:
    """Recent prompts' KV, matched by longest common prefix: see the module docstring.

    Not thread-safe: the engine uses it under its one-request-at-a-time lock.
    """

    def __init__(self, *, slots: int, max_bytes: int, min_reused: int = MIN_REUSED_TOKENS):
        self.slots = slots
        self.max_bytes = max_bytes
        self.min_reused = min_reused
        self._kept: list[KeptPrompt] = []  # least recently used first

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return sum(kept.nbytes for kept in self._kept)

    def kept(self) -> tuple[KeptPrompt, ...]:
        """The slots, least recently used first."""
        return tuple(self._kept)

    def clear(self) -> None:
        self._kept.clear()

    def match(self, ids: Ids, spans: tuple[ImageSpan, ...]) -> SlotMatch:
        """The slot sharing the longest prefix with the prompt `ids` (ties: the most
        recent), marked as used. At least the prompt's last token is always prefilled
        (its logits start the reply), and an image is reused whole or not at all."""
        best = SlotMatch()
        best_common = 0
        for kept in reversed(self._kept):
            common = _shared(kept, ids, spans)
            if common > best_common:
                best, best_common = SlotMatch(kept, covers=common >= kept.prompt_tokens), common
        if best.slot is None:
            return best
        reused = _image_start(spans, min(best_common, len(ids) - 1))
        self._kept.remove(best.slot)
        self._kept.append(best.slot)
        if reused < self.min_reused:
            reused = 0
        return SlotMatch(best.slot, reused, best.covers)

    def keep(self, prompt: KeptPrompt, *, replaces: KeptPrompt | None = None) -> bool:
        """Keep `prompt` as the most recent slot (instead of `replaces`, when given),
        evicting the least recently used ones past the count or the byte budget. False
        when it is not kept: no slots, or larger than the whole budget alone."""
        if replaces is not None and replaces in self._kept:
            self._kept.remove(replaces)
        if self.slots < 1 or prompt.nbytes > self.max_bytes:
            return False
        self._kept.append(prompt)
        while len(self._kept) > self.slots or self.nbytes > self.max_bytes:
            self._kept.pop(0)
        return True


def _shared(kept: KeptPrompt, ids: Ids, spans: tuple[ImageSpan, ...]) -> int:
    """Leading tokens of `ids` whose KV `kept` holds: equal ids, and an image's
    placeholders only up to the first image that is not the same one at the same place."""
    common = common_prefix(kept.ids, ids)
    theirs = {span.start: span for span in kept.spans}
    for span in spans:
        if span.start >= common:
            break
        if theirs.get(span.start) != span:
            return span.start
    return common


def _image_start(spans: tuple[ImageSpan, ...], position: int) -> int:
    """`position`, or the start of the image it falls inside (images are prefilled whole:
    their visual features enter the suffix together)."""
    for span in spans:
        if span.start < position < span.end:
            return span.start
    return position


@dataclass(frozen=True, slots=True)
class EncodedFrame:
    """The vision tower's output for one frame, as the language model takes it."""

    grid: Grid
    embeds: Any  # (tokens, hidden): the merged visual embeddings
    deepstack: tuple[Any, ...]  # per deepstack layer, (tokens, hidden)
    nbytes: int


class FrameEncodings:
    """Frames' encodings and patch grids by digest, LRU: see the module docstring.

    Thread-safe: frames are prepared in worker threads while a request runs.
    """

    def __init__(self, *, max_images: int, max_grids: int = 4096) -> None:
        self.max_images = max_images
        self.max_grids = max_grids
        self._lock = threading.Lock()
        self._encoded: OrderedDict[bytes, EncodedFrame] = OrderedDict()
        self._grids: OrderedDict[bytes, Grid] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._encoded)

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._encoded

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, digest: bytes) -> EncodedFrame | None:
        with self._lock:
            found = self._encoded.get(digest)
            if found is not None:
                self._encoded.move_to_end(digest)
            return found

    def put(self, digest: bytes, frame: EncodedFrame) -> bool:
        """Keep `frame` as the most recent; False when nothing is kept (no room at all)."""
        self.note_grid(digest, frame.grid)
        if self.max_images < 1:
            return False
        with self._lock:
            old = self._encoded.pop(digest, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._encoded[digest] = frame
            self._bytes += frame.nbytes
            while len(self._encoded) > self.max_images:
                _, evicted = self._encoded.popitem(last=False)
                self._bytes -= evicted.nbytes
        return True

    def grid(self, digest: bytes) -> Grid | None:
        with self._lock:
            return self._grids.get(digest)

    def note_grid(self, digest: bytes, grid: Grid) -> None:
        with self._lock:
            self._grids[digest] = grid
            self._grids.move_to_end(digest)
            while len(self._grids) > self.max_grids:
                self._grids.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._encoded.clear()
            self._grids.clear()
            self._bytes = 0
