"""Client camera cadence: each captured frame goes alone or rides with audio (B22).

Spec: `spec.tables.client_camera.CLIENT_CAMERA`.

House rules: every legal transition is a row of the spec table; this module captures
nothing itself (it asks the host with `capture_frame`); callbacks only append to the
client outbox.

Theory of operation: `ClientProtocol` keeps the camera `off` unless it is wanted and the
call is ready, and moves it between `standalone` and `riding` after every input, by
whether microphone audio is being uploaded (server VAD unmuted, or a recording PTT hold).
A frame captured while `riding` waits (only the newest) for the next audio append, so in
VAD mode frames ride with speech appends; while `standalone` each frame is sent at once
as a frames-only append, so in PTT mode the camera keeps its cadence (1 fps) outside
recording, whatever holds are pending. Leaving `riding` sends a frame still waiting.

On a WebRTC call (`captures=False`) the video track carries the camera: the machine keeps
its states (the page shows them) but asks for no capture; no frame is ever given to it.

Invariants: K1, K2 of the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.statemachines._rulebook import build, fire
from spec.tables.client_camera import CLIENT_CAMERA, CameraState

if TYPE_CHECKING:
    from transitions import EventData

    from core.statemachines.client_outbox import ClientOutbox

__all__ = ["Camera"]

_RULES = build(CLIENT_CAMERA)


class Camera:
    __slots__ = ("captures", "outbox", "stashed", "state")

    def __init__(self, outbox: ClientOutbox, *, captures: bool = True) -> None:
        self.outbox = outbox
        self.captures = captures  # False: a video track carries the camera
        self.state = CameraState.OFF
        self.stashed: str | None = None  # base64 JPEG waiting for the next audio append

    def fire(self, trigger: str, **kwargs: object) -> None:
        fire(_RULES, self, trigger, **kwargs)

    def take_stashed(self) -> list[str]:
        """The frame waiting to ride with an audio append (at most one), now taken."""
        frame, self.stashed = self.stashed, None
        return [frame] if frame is not None else []

    # --- guards ---------------------------------------------------------------------

    def audio_flowing(self, event: EventData) -> bool:
        return bool(event.kwargs["audio_flowing"])

    # --- effects --------------------------------------------------------------------

    def capture_now(self, event: EventData) -> None:
        if self.captures:
            self.outbox.emit({"kind": "capture_frame"})

    def send_frame(self, event: EventData) -> None:
        self.outbox.send(
            {"type": "input_audio_buffer.append", "video_frames": [event.kwargs["jpeg"]]}
        )

    def stash_frame(self, event: EventData) -> None:
        self.stashed = str(event.kwargs["jpeg"])

    def send_stashed_frame(self, event: EventData) -> None:
        frames = self.take_stashed()
        if frames:
            self.outbox.send({"type": "input_audio_buffer.append", "video_frames": frames})

    def drop_stashed_frame(self, event: EventData) -> None:
        self.stashed = None
