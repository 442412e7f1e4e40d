"""`SessionInput`: the input side of one session: what it buffers, and the commits it
makes of it (B6-B8, B12, B13, B15).

What it owns: appends (decoded and checked by `core.append_checks`, held in the
`InputBuffer`: idle retention vs utterance capture), the `AudioClock` of the audio
received, and every commit: the client's `input_audio_buffer.commit`, the one a turn's end
makes (`end_turn`, called by `core.turn_taking`), and the frames-only one a
`response.create` makes. A commit becomes a user item and a `Commit` handed to
`core.responses.Responses`, or a quiet commit answered with `response.listen`; its bytes
move from the buffer to the commit's reservation in `PendingInput`, and silent audio is
released at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.append_checks import check_append
from core.audio import BYTES_PER_MS_16K
from core.statemachines.commit import Commit
from spec import events as ev
from spec.effects import PrepareFrame, ScoreVad
from spec.error_events import error_event
from spec.errors import ErrorCode, RemoteProtocolError

if TYPE_CHECKING:
    from core.audio import AudioClock
    from core.conversation import Conversation
    from core.outbox import Outbox
    from core.pending_input import PendingInput
    from core.responses import Responses
    from core.statemachines.input_buffer import InputBuffer
    from core.turn_taking import TurnTaking
    from spec.limits import Limits
    from spec.session_config import SessionConfig, TurnDetection

__all__ = ["SessionInput"]


class SessionInput:
    __slots__ = (
        "_buffer",
        "_clock",
        "_frames_seen",
        "_items",
        "_out",
        "_pending",
        "_turn_taking",
        "_turns",
        "config",
        "limits",
        "prepares_frames",
    )

    def __init__(
        self,
        out: Outbox,
        buffer: InputBuffer,
        clock: AudioClock,
        *,
        pending: PendingInput,
        items: Conversation,
        turns: Responses,
        turn_taking: TurnTaking,
        limits: Limits,
        config: SessionConfig,
        prepares_frames: bool = False,
    ) -> None:
        self._out = out
        self._buffer = buffer
        self._clock = clock
        self._pending = pending
        self._items = items
        self._turns = turns
        self._turn_taking = turn_taking
        self.limits = limits
        #: the session's configuration, kept current by `SessionProtocol`
        self.config = config
        #: the VLM works on a frame when it arrives: each accepted one is a `PrepareFrame`
        self.prepares_frames = prepares_frames
        self._frames_seen = 0

    def on_append(self, event: ev.InputAudioBufferAppend, now_ms: int = 0) -> None:
        buffer = self._buffer
        config = self.config
        vad = config.turn_detection is not None
        # the manual speech verdict starts a capture, and while one runs, tells a manual
        # hold's live transcripts where its pauses are (B41)
        live = self._turn_taking.live.enabled
        plan = check_append(
            event,
            config.input_format,
            self.limits,
            verdict=not vad and (live or not buffer.capturing),
        )
        pcm16, frames = plan.pcm16, plan.frames
        capture = buffer.capturing or plan.speech
        after = buffer.bytes_after(
            len(pcm16), frames, capture=capture, max_frames=self.limits.max_context_images
        )
        self._pending.ensure_room(
            self._pending.bytes - buffer.held_bytes + after,
            "commit or clear first",
            event.event_id,
        )
        if capture and not buffer.capturing:
            buffer.start_capture()
        freed = buffer.add_audio(pcm16)
        added = len(pcm16)
        if frames:
            added += sum(len(f) for f in frames)
            freed += buffer.add_frames(frames, self.limits.max_context_images)
            if self.prepares_frames:
                for frame in frames:
                    self._frames_seen += 1
                    self._out.effect(PrepareFrame(f"frame_{self._frames_seen}", frame))
        self._pending.add(added - freed)
        clock = self._clock
        if vad and pcm16:
            self._out.effect(ScoreVad(pcm16, clock.bytes // BYTES_PER_MS_16K))
        clock.bytes += len(pcm16)  # the audio clock advances (inline: once per append)
        if not vad and pcm16:
            self._turn_taking.on_manual_append(speech=plan.speech)

    def on_clear(self) -> None:
        self._pending.free(self._buffer.clear())
        self._turn_taking.reset()

    def on_commit(self, event: ev.InputAudioBufferCommit) -> None:
        if not self._buffer.since_commit:
            raise RemoteProtocolError(
                "nothing was appended since the last commit or clear",
                code=ErrorCode.INPUT_AUDIO_BUFFER_EMPTY,
                event_id=event.event_id,
            )
        quiet = not self._buffer.capturing and not self._buffer.frames
        if not quiet and self._turns.queued_commits() >= self.limits.max_pending_commits:
            raise RemoteProtocolError(
                f"{self.limits.max_pending_commits} commits are already waiting",
                code=ErrorCode.INPUT_BACKPRESSURE,
                event_id=event.event_id,
            )
        item_id = self._buffer.speech_item_id
        if self.config.turn_detection is None:
            self._turn_taking.manual_commit()
        self._turn_taking.end_utterance()
        self.commit(
            client_event_id=event.event_id,
            wants_response=event.wants_response(self.config.auto_response),
            item_id=item_id,
        )

    def commit(
        self,
        *,
        client_event_id: str | None,
        wants_response: bool,
        item_id: str | None,
        keep_until_sample: int | None = None,
    ) -> None:
        has_speech = self._buffer.capturing
        held = self._buffer.held_bytes
        keep = None
        if keep_until_sample is not None:
            keep = self._turn_taking.buffered_bytes_before(keep_until_sample)
        # the audio after a VAD end stays in the buffer: the next utterance's start (D35)
        audio, frames = self._buffer.take(keep)
        held -= self._buffer.held_bytes
        content: list[ev.ContentPart] = []
        # an audio part for speech audio, or the empty one of a quiet commit (B6); speech
        # cut to nothing by the VAD end keeps none
        if (has_speech and audio) or (not has_speech and not frames):
            content.append(ev.ContentPart(type="input_audio"))
        content.extend(ev.ContentPart(type="input_image") for _ in frames)
        item = self._items.add(item_id, "user", content)
        self._out.emit(
            ev.ConversationItemAdded(item=item.wire(), previous_item_id=item.previous_item_id)
        )
        reserved = len(audio) if has_speech else 0
        reserved += sum(len(f) for f in frames)
        self._pending.free(held - reserved)  # silent audio is released at once (B8)
        commit = Commit(
            self._out,
            item,
            pcm16=audio if has_speech else b"",
            frames=frames,
            has_speech=has_speech,
            reserved=reserved,
            client_event_id=client_event_id,
        )
        if not has_speech and not frames:  # quiet commit (B6)
            commit.quiet()
            item.complete()
            self._out.emit(ev.ResponseListen(reason="silence_or_noise"))
            return
        self._turns.accept(commit, wants_response=wants_response)

    def end_turn(self, config: TurnDetection, item_id: str, keep_until_sample: int) -> None:
        """Speech stopped (server VAD, or a reviewed pause): commit the utterance, or say
        why not."""
        if not self._buffer.since_commit:  # nothing arrived since the last commit
            self._out.emit(
                error_event(
                    ErrorCode.INPUT_AUDIO_BUFFER_EMPTY,
                    "speech ended but no audio was appended since the last commit",
                )
            )
            return
        if self._turns.queued_commits() >= self.limits.max_pending_commits:
            self._out.emit(
                error_event(
                    ErrorCode.INPUT_BACKPRESSURE,
                    "too many commits waiting; the utterance was dropped",
                )
            )
            self._pending.free(self._buffer.clear())
            return
        self.commit(
            client_event_id=None,
            wants_response=config.create_response,
            item_id=self._buffer.speech_item_id or item_id,
            keep_until_sample=keep_until_sample,
        )

    def frames_only(self) -> bool:
        """`response.create` with nothing queued: the camera frames buffered, no speech,
        commit themselves."""
        if self._buffer.capturing or not self._buffer.frames:
            return False
        self.commit(client_event_id=None, wants_response=True, item_id=None)
        return True
