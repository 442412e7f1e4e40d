"""Client camera cadence: where each captured frame goes, by mode (B22)."""

from __future__ import annotations

import enum

from spec.tables.base import T, Table

__all__ = ["CLIENT_CAMERA", "CameraState"]


class CameraState(enum.Enum):
    OFF = "off"
    STANDALONE = "standalone"  # frames go alone, one append per frame at the camera cadence
    RIDING = "riding"  # frames ride with the next microphone append


C = CameraState

CLIENT_CAMERA = Table(
    name="client_camera",
    doc=(
        "The camera captures one JPEG per interval (1 fps). While microphone audio is "
        "being uploaded (server-VAD mode unmuted, or a push-to-talk hold recording) each "
        "frame rides with the next audio append; otherwise it is sent alone, so a muted, "
        "empty or pending hold never stops camera observations (B20, B22)."
    ),
    states=CameraState,
    initial=C.OFF,
    terminal=frozenset(),
    transitions=(
        T(
            "enable",
            C.OFF,
            C.RIDING,
            guard="audio_flowing",
            effect="capture_now",
            behaviours=("B22",),
        ),
        T("enable", C.OFF, C.STANDALONE, effect="capture_now", behaviours=("B22",)),
        T("disable", (C.STANDALONE, C.RIDING), C.OFF, effect="drop_stashed_frame"),
        T("audio_starts", C.STANDALONE, C.RIDING, behaviours=("B22",)),
        T(
            "audio_stops",
            C.RIDING,
            C.STANDALONE,
            effect="send_stashed_frame",
            behaviours=("B20", "B22"),
        ),
        T("frame", C.STANDALONE, None, effect="send_frame", behaviours=("B20", "B22")),
        T("frame", C.RIDING, None, effect="stash_frame", behaviours=("B22",)),
        T("frame", C.OFF, None),
    ),
    invariants={
        "K1": "at most one frame waits to ride with audio; a newer frame replaces it",
        "K2": "outside audio upload every captured frame is sent at the camera cadence",
    },
)
