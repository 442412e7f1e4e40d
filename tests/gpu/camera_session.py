"""`CameraSession`: the prompt contexts of a camera session's ticks, as a session holds
them, for the checks and measurements of the VLM's prompt reuse (the GPU check, its CPU
tests, `tools/hf_prefill_reuse.py`): a new frame each tick, the question on the first,
and each earlier tick's frame and reply in the history, with their times."""

from __future__ import annotations

from backends.base import HistoryTurn, PromptContext

__all__ = ["CameraSession"]


class CameraSession:
    def __init__(self, question: str, *, system: str = "") -> None:
        self.question = question
        self.system = system
        self.ticks = 0
        self.history: list[HistoryTurn] = []
        self.shown: list[tuple[bytes, ...]] = []

    def context(self, frame: bytes) -> PromptContext:
        """The next tick's context, showing `frame`."""
        tick = self.ticks
        return PromptContext(
            system=self.system,
            transcript=self.question if tick == 0 else None,
            frames=(frame,),
            history=tuple(self.history),
            history_frames=tuple(self.shown),
            time_s=float(tick),
            history_times_s=tuple(float(i // 2) for i in range(len(self.history))),
            asked_before=tick > 0,
        )

    def answered(self, context: PromptContext, reply: str) -> None:
        """The tick of `context` was answered with `reply`: both join the history."""
        self.history += [
            HistoryTurn("user", context.transcript or ""),
            HistoryTurn("assistant", reply),
        ]
        self.shown += [context.frames, ()]
        self.ticks += 1
