"""How much memory one session holds at each limit of spec/limits.py (not in CI).

    python tools/session_memory.py            # the default limits
    python tools/session_memory.py --scale 0.1   # every count limit a tenth (quick)

One sans-IO `SessionProtocol` per case (the core holds a session's whole state; the
runtime adds a fixed set of tasks and queues), filled to one limit and then pushed past
it, so the bound is what is measured, not the way there. tracemalloc counts the bytes
allocated by the session after `gc.collect()`, relative to before it was created:

    max_items           items of one short `input_text` each, to max_items and past it
    max_content_parts   max_items items of max_content_parts parts each (the largest items)
    max_history_bytes   items of 64 KiB of text each, to max_history_bytes and past it
    max_responses       full turns (speech, transcript, reply, 2 s of reply audio, played
                        out and acknowledged), to max_responses and past it
    pending_input       pcm16 appended without a commit up to max_pending_input_bytes
    turns_N             N full turns: what a long conversation holds per turn

Prints one JSON object: per case the bytes held, the count reached and bytes per unit.
"""

from __future__ import annotations

import argparse
import gc
import json
import pathlib
import sys
import tracemalloc
from typing import TYPE_CHECKING, Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import numpy as np  # noqa: E402

from core.session import SessionProtocol  # noqa: E402
from spec import events as ev  # noqa: E402
from spec.effects import SubmitAsr, SubmitTts, SubmitVlm  # noqa: E402
from spec.limits import MIB, Limits  # noqa: E402
from spec.session_config import validate_session  # noqa: E402
from spec.stage_results import (  # noqa: E402
    AsrTranscript,
    TtsAudio,
    TtsDone,
    VlmDecisionResult,
    VlmDelta,
)

if TYPE_CHECKING:
    from collections.abc import Callable

SPEECH = (np.sin(np.arange(300 * 16) / 5.0) * 8000).astype("<i2").tobytes()
REPLY_MS = 2_000


class Session:
    """One protocol and the backend's part, played inline."""

    def __init__(self, limits: Limits) -> None:
        self.now = 0
        self.p = SessionProtocol(
            session_id="sess_mem",
            config=validate_session({"turn_detection": None}),
            limits=limits,
            profile="speech",
            now_ms=0,
        )
        self.outputs: list[Any] = []
        self.drain()

    def drain(self) -> list[Any]:
        out = self.p.next_outputs()
        self.outputs = out  # only the last batch: the session, not this driver, is measured
        return out

    def send(self, event: ev.ClientEvent) -> list[Any]:
        self.now += 10
        self.p.receive(event, self.now)
        return self.drain()

    def result(self, result: Any) -> list[Any]:
        self.now += 10
        self.p.backend_event(result, self.now)
        return self.drain()

    def turn(self, index: int) -> None:
        self.send(ev.InputAudioBufferAppend(audio=bytes(bytearray(SPEECH))))
        out = self.send(ev.InputAudioBufferCommit(create_response=True))
        asr = next(o for o in out if isinstance(o, SubmitAsr))
        out = self.result(AsrTranscript(asr.request_id, f"question number {index}"))
        vlm = next(o for o in out if isinstance(o, SubmitVlm))
        text = f"The answer to question {index} is short."
        self.result(VlmDelta(vlm.request_id, text))
        out = self.result(VlmDecisionResult(vlm.request_id, "speak", text))
        tts = next(o for o in out if isinstance(o, SubmitTts))
        audio = self.result(TtsAudio(tts.request_id, bytes(REPLY_MS * 48), text))
        out = audio + self.result(TtsDone(tts.request_id))
        delta = next(o for o in audio if isinstance(o, ev.ResponseOutputAudioDelta))
        self.now += REPLY_MS  # the client played it all, then says so
        self.send(
            ev.PlaybackAck(played_ms=REPLY_MS, response_id=delta.response_id, item_id=delta.item_id)
        )

    def item(self, parts: list[ev.ContentPart]) -> None:
        self.send(ev.ConversationItemCreate(item=ev.ConversationItem(content=parts)))


def measure(limits: Limits, fill: Callable[[Session], int]) -> tuple[int, int]:
    """(bytes the session holds after `fill`, the count `fill` reports)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        session = Session(limits)
        count = fill(session)
        session.outputs = []
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="scale the count limits")
    parser.add_argument("--turns", type=int, default=1000, help="turns of the turns_N case")
    args = parser.parse_args(argv)
    base = Limits()
    scaled = msgspec.structs.replace(
        base,
        max_items=max(1, int(base.max_items * args.scale)),
        max_responses=max(1, int(base.max_responses * args.scale)),
    )
    lim = scaled
    past = 1.25  # push 25 % past each limit

    def items(s: Session) -> int:
        for i in range(int(lim.max_items * past)):
            s.item([ev.ContentPart(type="input_text", text=f"note {i}")])
        return len(s.p.statistics().items)

    def parts(s: Session) -> int:
        for i in range(int(lim.max_items * past)):  # new objects each, as decoding makes
            s.item(
                [
                    ev.ContentPart(type="input_text", text=f"p{i}")
                    for _ in range(lim.max_content_parts)
                ]
            )
        return len(s.p.statistics().items) * lim.max_content_parts

    def history(s: Session) -> int:
        size = 64 * 1024
        for i in range(int(lim.max_history_bytes / size * past)):
            s.item([ev.ContentPart(type="input_text", text=f"{i:08d}".ljust(size, "h"))])
        return lim.max_history_bytes

    def responses(s: Session) -> int:
        for i in range(int(lim.max_responses * past)):
            s.turn(i)
        return len(s.p._responses)  # the responses it remembers

    def pending(s: Session) -> int:
        chunk = SPEECH * 10  # 3 s
        appended = 0
        while appended + len(chunk) <= lim.max_pending_input_bytes:
            # a new bytes object each, as base64 decoding makes
            s.send(ev.InputAudioBufferAppend(audio=bytes(bytearray(chunk))))
            appended += len(chunk)
        return s.p.pending_bytes

    def turns(s: Session) -> int:
        for i in range(args.turns):
            s.turn(i)
        return args.turns

    cases: dict[str, Callable[[Session], int]] = {
        "max_items": items,
        "max_content_parts": parts,
        "max_history_bytes": history,
        "max_responses": responses,
        "pending_input": pending,
        f"turns_{args.turns}": turns,
    }
    empty, _ = measure(lim, lambda s: 0)
    report: dict[str, Any] = {
        "limits": {
            "max_items": lim.max_items,
            "max_content_parts": lim.max_content_parts,
            "max_history_bytes": lim.max_history_bytes,
            "max_responses": lim.max_responses,
            "max_pending_input_bytes": lim.max_pending_input_bytes,
        },
        "empty_session_bytes": empty,
    }
    for name, fill in cases.items():
        held, count = measure(lim, fill)
        report[name] = {
            "held_bytes": held,
            "held_mib": round(held / MIB, 2),
            "count": count,
            "bytes_per_unit": round(held / max(1, count), 1),
        }
        print(f"{name}: {held / MIB:.2f} MiB", file=sys.stderr)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
