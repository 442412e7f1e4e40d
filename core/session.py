"""`SessionProtocol`: one realtime session, sans-IO, in the manner of `h11.Connection`.

House rules: nothing here awaits, sleeps, reads a clock or touches a socket; time comes in
as `now_ms` and every output goes to the outbox, pulled with `next_outputs()`. All legal
state changes are rows of the `spec` tables, fired on the machine models below; this module
only *couples* them.

Theory of operation (docs/session-semantics.md is the contract):

    client event --receive()--> checks (raise, nothing changed) --> machines --> outbox
    stage result --backend_event()--> fenced by request id --> machines --> outbox
    timers: next_deadline() / handle_timeout(now_ms): idle timeout, playback drain

Machines per session: one `InputBuffer` (idle retention vs capture, B12), one
`TurnDetector` (server VAD, B10), an `Item` per conversation item version (B5), a `Commit`
per accepted commit or queued item (B6, B14-B16), a `Response` per model turn with its
`Playback` (B11, B17, B19). At most one response is active (I1); commits that want a
response while one is active are deferred and start the next one when it ends.

Rejections: every handler checks first and raises `RemoteProtocolError` before changing
anything (the outbox included). An `InvalidTransition` escaping a handler is re-labelled at
this boundary: `InvalidState` from `receive` (the client's fault), `LocalProtocolError`
from `backend_event` (ours).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.append_checks import check_append, is_image
from core.errors import InvalidState, InvalidTransition
from core.outbox import Outbox
from core.prompt_input import build_prompt, heard_text, played_prefix
from core.statemachines.commit import Commit
from core.statemachines.input_buffer import InputBuffer
from core.statemachines.item import Item
from core.statemachines.playback import Playback
from core.statemachines.response import Response
from core.statemachines.turn_detector import TurnDetector
from spec import events as ev
from spec.effects import (
    ASR,
    TTS,
    VLM,
    Abort,
    CloseSession,
    EvictReplica,
    ItemRef,
    ScoreVad,
    SubmitAsr,
    SubmitTts,
    SubmitVlm,
)
from spec.errors import (
    ERROR_TYPE,
    CloseCode,
    ErrorCode,
    LocalProtocolError,
    RemoteProtocolError,
)
from spec.limits import Limits
from spec.session_config import SessionConfig, validate_session
from spec.stage_results import (
    AsrTranscript,
    StageFailure,
    StageResult,
    TtsAudio,
    TtsDone,
    VadScores,
    VlmDecisionResult,
    VlmDelta,
)
from spec.tables import CommitState, ItemState, PlaybackState, ResponseState

if TYPE_CHECKING:
    from collections.abc import Callable

    from spec.effects import Effect
    from spec.errors import ProtocolError

__all__ = ["SessionProtocol", "SessionStatistics"]

#: trailing silence kept on a VAD-ended utterance for the ASR (the rest only ended the turn)
ASR_TAIL_PAD_MS = 200
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")
_DATA_URL = re.compile(r"^data:image/(jpeg|jpg|png);base64,(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """A snapshot for metrics, tests and exploration (trio-style `statistics()`)."""

    closed: bool
    epoch: int
    buffer_state: str
    buffer_audio_bytes: int
    buffer_frames: int
    detector_state: str
    active_response: str | None
    active_state: str | None
    queued: tuple[tuple[str, str], ...]  # (item id, commit state)
    pending_bytes: int
    items: tuple[tuple[str, int, str], ...]  # (id, version, state)
    playing: tuple[str, ...]  # responses whose audio may still be playing


class SessionProtocol:
    """One session's protocol state. See the module docstring."""

    def __init__(
        self,
        *,
        session_id: str,
        config: SessionConfig | None = None,
        limits: Limits | None = None,
        profile: str = "speech",
        now_ms: int = 0,
    ) -> None:
        self.session_id = session_id
        self.config = config or SessionConfig()
        self.limits = limits or Limits()
        self.profile = profile
        self._out = Outbox()
        self._buffer = InputBuffer(self._out)
        self._detector = TurnDetector(self._out)
        self._items: dict[str, Item] = {}  # live versions, in conversation order
        self._versions: dict[str, int] = {}
        self._queue: list[Commit] = []  # retained, deferred and adopted, oldest first
        self._active: Response | None = None
        self._responses: dict[str, Response] = {}
        self._pending_bytes = 0
        self._audio_bytes = 0  # 16 kHz pcm16 received: the session audio clock
        self._last_activity_ms = now_ms
        self._closed = False
        self._handlers: dict[type, Callable[[Any, int], None]] = {
            ev.SessionUpdate: self._on_session_update,
            ev.InputAudioBufferAppend: self._on_append,
            ev.InputAudioBufferCommit: self._on_commit,
            ev.InputCommitAlias: self._on_commit,
            ev.InputAudioBufferClear: self._on_clear,
            ev.ConversationItemCreate: self._on_item_create,
            ev.ConversationItemDelete: self._on_item_delete,
            ev.ConversationItemRetrieve: self._on_item_retrieve,
            ev.ConversationItemTruncate: self._on_item_truncate,
            ev.ResponseCreate: self._on_response_create,
            ev.ResponseCancel: self._on_response_cancel,
            ev.OutputAudioBufferClear: self._on_output_clear,
            ev.PlaybackAck: self._on_playback_ack,
            ev.AudioPlaybackAckAlias: self._on_playback_ack,
            ev.SessionHeartbeat: self._on_heartbeat,
            ev.SessionClose: self._on_close,
            ev.SessionResume: self._on_noop,
            ev.SessionEventAck: self._on_noop,
        }
        self._results: dict[type, Callable[[Any, int], None]] = {
            VadScores: self._on_vad_scores,
            AsrTranscript: self._on_transcript,
            VlmDelta: self._on_vlm_delta,
            VlmDecisionResult: self._on_vlm_decision,
            TtsAudio: self._on_tts_audio,
            TtsDone: self._on_tts_done,
            StageFailure: self._on_stage_failure,
        }
        self._out.emit(ev.SessionCreated(session=self._public()))

    # --- public API ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def epoch(self) -> int:
        return self._out.epoch

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def receive(self, event: ev.ClientEvent, now_ms: int) -> None:
        """Apply one client event.

        Raises:
            RemoteProtocolError: the event is refused; state and outbox are unchanged.
        """
        if self._closed:
            return
        handler = self._handlers[type(event)]
        try:
            handler(event, now_ms)
        except InvalidTransition as exc:
            raise InvalidState(str(exc), event_id=event.event_id) from None
        except RemoteProtocolError as exc:
            if exc.event_id is None:
                exc.event_id = event.event_id
            raise
        self._last_activity_ms = now_ms

    def backend_event(self, result: StageResult, now_ms: int) -> None:
        """Apply one stage result; results of a response that is no longer active (or of
        an older epoch) are dropped silently (B11).

        Raises:
            LocalProtocolError: the result is impossible in the current state (a bug).
        """
        if self._closed:
            return
        try:
            self._results[type(result)](result, now_ms)
        except InvalidTransition as exc:
            raise LocalProtocolError(str(exc)) from None

    def next_outputs(self) -> list[ev.ServerEvent | Effect]:
        return self._out.drain()

    def error_event(self, exc: ProtocolError) -> ev.Error:
        """The wire error for a refused event (allocates a server event id)."""
        return ev.Error(
            event_id=self._out.next_id("event"),
            error=ev.ErrorDetail(
                type=ERROR_TYPE[exc.code].value,
                code=exc.code.value,
                message=exc.message,
                param=exc.param,
                event_id=exc.event_id,
            ),
        )

    def next_deadline(self) -> int | None:
        if self._closed:
            return None
        deadlines = [r.playback.drain_deadline() for r in self._responses.values()]
        idle = self._idle_timeout_ms()
        if idle:
            deadlines.append(self._last_activity_ms + idle)
        return min((d for d in deadlines if d is not None), default=None)

    def handle_timeout(self, now_ms: int) -> None:
        if self._closed:
            return
        for response in self._responses.values():
            deadline = response.playback.drain_deadline()
            if deadline is not None and deadline <= now_ms:
                response.playback.drain()
        idle = self._idle_timeout_ms()
        if idle and now_ms >= self._last_activity_ms + idle:
            self._close("idle_timeout")

    def statistics(self) -> SessionStatistics:
        active = self._active
        return SessionStatistics(
            closed=self._closed,
            epoch=self._out.epoch,
            buffer_state=self._buffer.state.value,
            buffer_audio_bytes=self._buffer.audio_bytes,
            buffer_frames=len(self._buffer.frames),
            detector_state=self._detector.state.value,
            active_response=active.id if active else None,
            active_state=active.state.value if active else None,
            queued=tuple((c.item.id, c.state.value) for c in self._queue),
            pending_bytes=self._pending_bytes,
            items=tuple((i.id, i.version, i.state.value) for i in self._items.values()),
            playing=tuple(r.id for r in self._responses.values() if r.playback.may_be_playing),
        )

    # --- session ------------------------------------------------------------------------

    def _public(self) -> ev.SessionObject:
        return self.config.public(self.session_id, profile=self.profile, epoch=self._out.epoch)

    def _idle_timeout_ms(self) -> int:
        seconds = self.config.idle_timeout_s
        if seconds is None:
            seconds = self.limits.idle_timeout_s
        return int(seconds * 1000)

    def _on_session_update(self, event: ev.SessionUpdate, now_ms: int) -> None:
        config = validate_session(event.session, self.config)
        vad_changed = config.turn_detection != self.config.turn_detection
        switched_on = self.config.turn_detection is None and config.turn_detection is not None
        self.config = config
        if vad_changed:
            self._detector.reset(self._audio_samples(), restart=switched_on)
        self._out.emit(ev.SessionUpdated(session=self._public()))

    def _on_heartbeat(self, event: ev.SessionHeartbeat, now_ms: int) -> None:
        self._out.emit(ev.SessionHeartbeatAck())

    def _on_noop(self, event: ev.ClientEvent, now_ms: int) -> None:
        """Transport-level events (resume, journal acks): nothing to do here."""

    def _on_close(self, event: ev.SessionClose, now_ms: int) -> None:
        self._close(event.reason)

    def _close(self, reason: str) -> None:
        active = self._active
        if active is not None:
            for request_id, stage in active.open_requests.items():
                self._out.effect(Abort(request_id, stage, active.id))
            active.open_requests.clear()
        self._out.emit(ev.SessionClosed(reason=reason))
        code = CloseCode.GOING_AWAY if reason == "shutdown" else CloseCode.NORMAL
        self._out.effect(CloseSession(reason, code))
        self._out.closed = True
        self._closed = True

    # --- input --------------------------------------------------------------------------

    def _audio_ms(self) -> int:
        return self._audio_bytes // 32

    def _audio_samples(self) -> int:
        return self._audio_bytes // 2

    def _on_append(self, event: ev.InputAudioBufferAppend, now_ms: int) -> None:
        buffer = self._buffer
        vad = self.config.turn_detection is not None
        plan = check_append(
            event, self.config.input_format, self.limits, verdict=not (vad or buffer.capturing)
        )
        pcm16, frames = plan.pcm16, plan.frames
        capture = buffer.capturing or plan.speech
        after = self._held_after(len(pcm16), frames, capture)
        if self._pending_bytes - buffer.held_bytes + after > self.limits.max_pending_input_bytes:
            raise RemoteProtocolError(
                "pending input would exceed "
                f"{self.limits.max_pending_input_bytes} bytes; commit or clear first",
                code=ErrorCode.INPUT_BACKPRESSURE,
                event_id=event.event_id,
            )
        if capture and not buffer.capturing:
            buffer.start_capture()
        freed = buffer.add_audio(pcm16)
        added = len(pcm16)
        if frames:
            added += sum(len(f) for f in frames)
            freed += buffer.add_frames(frames, self.limits.max_context_images)
        self._pending_bytes += added - freed
        if vad and pcm16:
            self._out.effect(ScoreVad(pcm16, self._audio_bytes // 32))
        self._audio_bytes += len(pcm16)

    def _held_after(self, audio: int, frames: list[bytes], capture: bool) -> int:
        """Bytes the buffer would hold after an append, without making it."""
        buffer = self._buffer
        if not capture:
            return buffer.idle_bytes_after(audio, frames)
        if not frames:
            return buffer.held_bytes + audio
        kept = (buffer.frames + frames)[-self.limits.max_context_images :]
        return buffer.audio_bytes + audio + sum(len(f) for f in kept)

    def _on_clear(self, event: ev.InputAudioBufferClear, now_ms: int) -> None:
        self._pending_bytes -= self._buffer.clear()
        self._detector.reset(self._audio_samples())

    def _on_commit(self, event: ev.InputAudioBufferCommit, now_ms: int) -> None:
        if not self._buffer.since_commit:
            raise RemoteProtocolError(
                "nothing was appended since the last commit or clear",
                code=ErrorCode.INPUT_AUDIO_BUFFER_EMPTY,
                event_id=event.event_id,
            )
        quiet = not self._buffer.capturing and not self._buffer.frames
        if not quiet and self._queued_count() >= self.limits.max_pending_commits:
            raise RemoteProtocolError(
                f"{self.limits.max_pending_commits} commits are already waiting",
                code=ErrorCode.INPUT_BACKPRESSURE,
                event_id=event.event_id,
            )
        item_id = self._buffer.speech_item_id
        if self._detector.speaking:
            self._detector.reset(self._audio_samples())
        self._commit(
            client_event_id=event.event_id,
            wants_response=event.wants_response(self.config.auto_response),
            item_id=item_id,
        )

    def _queued_count(self) -> int:
        """Commits waiting (retained or deferred); items created by the client don't count."""
        return sum(1 for c in self._queue if not c.adopted)

    def _new_item(
        self, item_id: str | None, role: str, content: list[ev.ContentPart], **kw: Any
    ) -> Item:
        item_id = item_id or self._out.next_id("item")
        version = self._versions.get(item_id, 0) + 1
        self._versions[item_id] = version
        previous = next(reversed(self._items), None)
        item = Item(
            self._out,
            item_id,
            version=version,
            role=role,
            content=content,
            previous_item_id=previous,
            **kw,
        )
        self._items[item_id] = item
        return item

    def _commit(
        self,
        *,
        client_event_id: str | None,
        wants_response: bool,
        item_id: str | None,
        keep_until_sample: int | None = None,
    ) -> None:
        has_speech = self._buffer.capturing
        held = self._buffer.held_bytes
        audio, frames = self._buffer.take()
        if keep_until_sample is not None:  # the buffer ends at the audio clock
            start = self._audio_samples() - len(audio) // 2
            keep = max(0, (keep_until_sample - start) * 2)
            if keep < len(audio):
                audio = audio[:keep]
        content: list[ev.ContentPart] = []
        # an audio part for speech audio, or the empty one of a quiet commit (B6); speech
        # cut to nothing by the VAD end keeps none
        if (has_speech and audio) or (not has_speech and not frames):
            content.append(ev.ContentPart(type="input_audio"))
        content.extend(ev.ContentPart(type="input_image") for _ in frames)
        item = self._new_item(item_id, "user", content)
        self._out.emit(
            ev.ConversationItemAdded(item=item.wire(), previous_item_id=item.previous_item_id)
        )
        reserved = len(audio) if has_speech else 0
        reserved += sum(len(f) for f in frames)
        self._pending_bytes -= held - reserved  # silent audio is released at once (B8)
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
        if not wants_response:
            commit.retain()
            self._queue.append(commit)
            self._complete_if_nothing_to_transcribe(commit)
        elif self._active is not None:
            commit.defer()
            self._queue.append(commit)
            self._complete_if_nothing_to_transcribe(commit)
        else:
            self._start_response([*self._queue, commit])

    def _needs_asr(self, commit: Commit) -> bool:
        return self.profile == "speech" and commit.has_speech and bool(commit.pcm16)

    def _complete_if_nothing_to_transcribe(self, commit: Commit) -> None:
        if not self._needs_asr(commit) and commit.item.state is ItemState.IN_PROGRESS:
            commit.item.complete()

    def _release(self, commit: Commit) -> None:
        self._pending_bytes -= commit.reserved
        commit.reserved = 0

    # --- items --------------------------------------------------------------------------

    def _on_item_create(self, event: ev.ConversationItemCreate, now_ms: int) -> None:
        item = event.item
        eid = event.event_id
        if item.type != "message":
            raise RemoteProtocolError(
                f"item type `{item.type}` is not supported; use `message`",
                code=ErrorCode.BAD_EVENT,
                param="item.type",
                event_id=eid,
            )
        if item.role not in ("user", "assistant", "system"):
            raise RemoteProtocolError(
                f"item role `{item.role}` is not one of user, assistant, system",
                code=ErrorCode.BAD_EVENT,
                param="item.role",
                event_id=eid,
            )
        if item.id is not None and item.id in self._items:
            raise RemoteProtocolError(
                f"item `{item.id}` already exists; delete it first",
                code=ErrorCode.BAD_EVENT,
                param="item.id",
                event_id=eid,
            )
        texts: list[str | None] = []
        audio = b""
        audio_index = 0
        frames: list[bytes] = []
        content: list[ev.ContentPart] = []
        for i, part in enumerate(item.content):
            where = f"item.content[{i}]"
            if part.type in ("input_text", "text", "output_text"):
                if part.text is None:
                    raise RemoteProtocolError(
                        "a text part needs `text`",
                        code=ErrorCode.BAD_EVENT,
                        param=f"{where}.text",
                        event_id=eid,
                    )
                texts.append(part.text)
                content.append(ev.ContentPart(type=part.type, text=part.text))
            elif part.type in ("input_audio", "audio", "output_audio"):
                data = part.audio or b""
                if len(data) % 2:
                    raise RemoteProtocolError(
                        "`audio` must be 16 kHz pcm16 (an even number of bytes)",
                        code=ErrorCode.BAD_AUDIO,
                        param=f"{where}.audio",
                        event_id=eid,
                    )
                if part.transcript is not None:
                    texts.append(part.transcript)
                elif data:
                    if audio:
                        raise RemoteProtocolError(
                            "at most one audio part may come without a transcript",
                            code=ErrorCode.BAD_EVENT,
                            param=f"{where}.transcript",
                            event_id=eid,
                        )
                    audio, audio_index = data, i
                    texts.append(None)  # its transcript comes from ASR
                content.append(ev.ContentPart(type=part.type, transcript=part.transcript))
            elif part.type == "input_image" and item.role == "user":
                frames.append(self._decode_image(part.image_url, f"{where}.image_url", eid))
                content.append(ev.ContentPart(type="input_image"))
            else:
                raise RemoteProtocolError(
                    f"content part type `{part.type}` is not supported for role `{item.role}`",
                    code=ErrorCode.BAD_EVENT,
                    param=f"{where}.type",
                    event_id=eid,
                )
        needs_asr = bool(audio) and item.role == "user"
        reserved = (len(audio) if needs_asr else 0) + sum(len(f) for f in frames)
        if (
            item.role == "user"
            and self._pending_bytes + reserved > self.limits.max_pending_input_bytes
        ):
            raise RemoteProtocolError(
                "pending input would exceed the limit; answer or delete items first",
                code=ErrorCode.INPUT_BACKPRESSURE,
                event_id=eid,
            )
        created = self._new_item(item.id, item.role, content)
        self._out.emit(
            ev.ConversationItemAdded(item=created.wire(), previous_item_id=created.previous_item_id)
        )
        if item.role != "user":
            created.complete()
            return
        commit = Commit(
            self._out,
            created,
            pcm16=audio if needs_asr else b"",
            frames=frames,
            has_speech=needs_asr,
            reserved=reserved,
            texts=texts,
            content_index=audio_index,
        )
        self._pending_bytes += reserved
        commit.adopt()
        self._queue.append(commit)
        self._complete_if_nothing_to_transcribe(commit)

    @staticmethod
    def _decode_image(url: str | None, param: str, eid: str | None) -> bytes:
        match = _DATA_URL.match(url or "")
        data = b""
        if match is not None:
            try:
                data = base64.b64decode(match.group(2), validate=True)
            except (binascii.Error, ValueError):
                data = b""
        if not is_image(data):
            raise RemoteProtocolError(
                "`image_url` must be a data URL of a JPEG or PNG image",
                code=ErrorCode.INVALID_IMAGE,
                param=param,
                event_id=eid,
            )
        return data

    def _find_item(self, item_id: str, eid: str | None) -> Item:
        item = self._items.get(item_id)
        if item is None:
            raise RemoteProtocolError(
                f"no item `{item_id}`", code=ErrorCode.ITEM_NOT_FOUND, param="item_id", event_id=eid
            )
        return item

    def _on_item_delete(self, event: ev.ConversationItemDelete, now_ms: int) -> None:
        item = self._find_item(event.item_id, event.event_id)
        item.delete()
        del self._items[item.id]
        for commit in [c for c in self._queue if c.item is item]:
            commit.withdraw()
            self._release(commit)
            self._queue.remove(commit)

    def _on_item_retrieve(self, event: ev.ConversationItemRetrieve, now_ms: int) -> None:
        item = self._find_item(event.item_id, event.event_id)
        self._out.emit(ev.ConversationItemRetrieved(item=item.wire()))

    def _on_item_truncate(self, event: ev.ConversationItemTruncate, now_ms: int) -> None:
        item = self._find_item(event.item_id, event.event_id)
        response = self._responses.get(item.response_id or "")
        if (
            response is None
            or item.state is not ItemState.COMPLETED
            or event.audio_end_ms > response.playback.generated_ms
        ):
            raise RemoteProtocolError(
                "only a completed assistant audio item can be truncated, within its audio",
                code=ErrorCode.INVALID_TRUNCATE,
                param="audio_end_ms",
                event_id=event.event_id,
            )
        item.truncate(
            audio_end_ms=event.audio_end_ms,
            transcript=played_prefix(response.text_marks, event.audio_end_ms),
        )

    # --- responses ----------------------------------------------------------------------

    def _on_response_create(self, event: ev.ResponseCreate, now_ms: int) -> None:
        if self._active is not None:
            raise RemoteProtocolError(
                f"response `{self._active.id}` is still active",
                code=ErrorCode.RESPONSE_ALREADY_ACTIVE,
                event_id=event.event_id,
            )
        modalities = None
        if event.response is not None:
            modalities = event.response.output_modalities or event.response.modalities
        if self._queue:
            self._start_response(list(self._queue), modalities)
        elif not self._buffer.capturing and self._buffer.frames:
            self._commit(client_event_id=None, wants_response=True, item_id=None)
        else:
            raise RemoteProtocolError(
                "nothing to respond to: commit input or create an item first",
                code=ErrorCode.RESPONSE_CREATE_WITHOUT_INPUT,
                event_id=event.event_id,
            )

    def _start_response(self, segments: list[Commit], modalities: list[str] | None = None) -> None:
        for commit in segments:
            if self._needs_asr(commit):
                commit.route_asr()
            else:
                commit.route_vlm()
                if commit.item.state is ItemState.IN_PROGRESS:
                    commit.item.complete()
        self._queue = [c for c in self._queue if c not in segments]
        response_id = self._out.next_id("resp")
        item_id = self._out.next_id("item")
        response = Response(
            self._out,
            response_id,
            item_id=item_id,
            segments=segments,
            playback=Playback(self._out, response_id=response_id, item_id=item_id),
            modalities=tuple(modalities or self.config.output_modalities),
        )
        self._active = response
        self._responses[response_id] = response
        self._out.emit(response.created_event())
        asr = [c for c in segments if c.state is CommitState.ROUTED_ASR]
        if not asr:
            self._submit_vlm(response)
            return
        response.transcribe()
        for commit in asr:
            request_id = response.new_request(ASR)
            response.asr_targets[request_id] = commit
            ref = ItemRef(commit.item.id, commit.item.version, commit.content_index)
            self._out.effect(SubmitAsr(request_id, response_id, self._out.epoch, ref, commit.pcm16))
            commit.pcm16 = b""
            self._release_audio(commit)

    def _release_audio(self, commit: Commit) -> None:
        frames = sum(len(f) for f in commit.frames)
        self._pending_bytes -= commit.reserved - frames
        commit.reserved = frames

    def _submit_vlm(self, response: Response) -> None:
        response.generate()
        prompt = build_prompt(
            instructions=self.config.instructions,
            items=self._items.values(),
            responses=self._responses,
            segments=response.segments,
        )
        request_id = response.new_request(VLM)
        for commit in response.segments:
            self._release(commit)
            commit.frames = []
        self._out.effect(SubmitVlm(request_id, response.id, self._out.epoch, prompt))

    def _lookup(self, request_id: str, stage: str) -> Response | None:
        """The active response that owns an open request of `stage`, else None (fenced)."""
        response = self._active
        if response is None or response.open_requests.get(request_id) != stage:
            return None
        return response

    def _on_transcript(self, result: AsrTranscript, now_ms: int) -> None:
        response = self._lookup(result.request_id, ASR)
        if response is None:
            return
        del response.open_requests[result.request_id]
        commit = response.asr_targets.pop(result.request_id)
        commit.transcribe(result.text)
        item = commit.item
        if self._items.get(item.id) is item and item.state is ItemState.IN_PROGRESS:  # I7, B5
            if result.text.strip():
                item.transcribe(transcript=result.text, content_index=commit.content_index)
            else:
                item.complete()
        if not response.asr_targets:
            self._submit_vlm(response)

    def _on_vlm_delta(self, result: VlmDelta, now_ms: int) -> None:
        response = self._lookup(result.request_id, VLM)
        if response is None:
            return
        response.saw_delta = True
        response.pending_text += result.text
        if "audio" not in response.modalities:
            return
        while (match := _SENTENCE_END.search(response.pending_text)) is not None:
            sentence = response.pending_text[: match.end()].strip()
            response.pending_text = response.pending_text[match.end() :]
            if sentence:
                self._submit_tts(response, sentence)

    def _on_vlm_decision(self, result: VlmDecisionResult, now_ms: int) -> None:
        response = self._lookup(result.request_id, VLM)
        if response is None:
            return
        del response.open_requests[result.request_id]
        response.decided = True
        rest = response.pending_text if response.saw_delta else result.text
        response.pending_text = ""
        if result.action == "listen":
            rest = ""
        if "audio" not in response.modalities:
            text = rest.strip()
            if not text:
                response.listen()
                self._after_response()
                return
            self._emit_text(response, text)
            self._maybe_complete(response)
            return
        if rest.strip():
            self._submit_tts(response, rest.strip())
        if response.tts_seq == 0:
            response.listen()
            self._after_response()
            return
        self._maybe_complete(response)

    def _emit_text(self, response: Response, text: str) -> None:
        item = self._new_item(
            response.item_id,
            "assistant",
            [ev.ContentPart(type="output_text", text="")],
            response_id=response.id,
        )
        response.speak(item, "output_text")
        item.content[0].text = text
        response.spoken = text
        self._out.emit(
            ev.ResponseOutputTextDelta(response_id=response.id, item_id=item.id, delta=text)
        )

    def _submit_tts(self, response: Response, text: str) -> None:
        response.tts_seq += 1
        request_id = response.new_request(TTS)
        response.tts_open.add(request_id)
        response.spoken = f"{response.spoken} {text}".strip()
        fmt = self.config.output_format
        self._out.effect(
            SubmitTts(
                request_id,
                response.id,
                self._out.epoch,
                response.tts_seq,
                text,
                fmt.rate_hz,
                self.config.voice,
            )
        )

    def _on_tts_audio(self, result: TtsAudio, now_ms: int) -> None:
        response = self._lookup(result.request_id, TTS)
        if response is None:
            return
        if response.state is ResponseState.GENERATING:
            created = self._new_item(
                response.item_id,
                "assistant",
                [ev.ContentPart(type="output_audio", transcript="")],
                response_id=response.id,
            )
            response.speak(created, "output_audio")
        item = response.item
        assert item is not None  # set by `speak`
        duration = len(result.pcm16) / 2 / self.config.output_format.rate_hz * 1000
        response.playback.add_audio(duration, now_ms)
        text = result.text
        so_far = item.content[0].transcript or ""
        if (  # pieces of one TTS request carry their own spacing; requests are sentences
            result.request_id != response.last_tts_request
            and text[:1].strip()
            and so_far[-1:].strip()
        ):
            text = " " + text
        response.last_tts_request = result.request_id
        response.text_marks.append((text, response.playback.generated_ms))
        item.content[0].transcript = (item.content[0].transcript or "") + text
        self._out.emit(
            ev.ResponseOutputAudioDelta(
                response_id=response.id, item_id=item.id, delta=result.pcm16
            )
        )
        self._out.emit(
            ev.ResponseOutputAudioTranscriptDelta(
                response_id=response.id, item_id=item.id, delta=text
            )
        )

    def _on_tts_done(self, result: TtsDone, now_ms: int) -> None:
        response = self._lookup(result.request_id, TTS)
        if response is None:
            return
        del response.open_requests[result.request_id]
        response.tts_open.discard(result.request_id)
        self._maybe_complete(response)

    def _maybe_complete(self, response: Response) -> None:
        if not response.decided or response.tts_open:
            return
        self._close_output(response)
        response.complete()
        self._after_response()

    def _close_output(self, response: Response) -> None:
        """The part of the done-chain that closes the assistant item (upstream order)."""
        item = response.item
        if item is None:
            return
        rid, iid = response.id, item.id
        part = item.content[0]
        if response.playback.state is PlaybackState.STREAMING:
            response.playback.finish()
        if part.type == "output_audio":
            if response.playback.state is PlaybackState.CLEARED:
                part.transcript = heard_text(response)  # B19: only what was heard
            transcript = part.transcript or ""
            self._out.emit(ev.ResponseOutputAudioDone(response_id=rid, item_id=iid))
            self._out.emit(
                ev.ResponseOutputAudioTranscriptDone(
                    response_id=rid, item_id=iid, transcript=transcript
                )
            )
            done_part = ev.ContentPart(type="output_audio", transcript=transcript)
        else:
            self._out.emit(
                ev.ResponseOutputTextDone(response_id=rid, item_id=iid, text=part.text or "")
            )
            done_part = ev.ContentPart(type="output_text", text=part.text or "")
        self._out.emit(ev.ResponseContentPartDone(response_id=rid, item_id=iid, part=done_part))
        self._out.emit(ev.ResponseOutputItemDone(response_id=rid, item=item.wire(completing=True)))
        if item.state is ItemState.IN_PROGRESS:
            item.complete()

    def _after_response(self) -> None:
        """The active response ended: deferred commits start the next one."""
        self._active = None
        if any(c.state is CommitState.DEFERRED for c in self._queue):
            self._start_response(list(self._queue))

    def _fail_waiting_segments(self, response: Response, code: ErrorCode, message: str) -> None:
        """Segments still waiting for a transcript are failed explicitly (B17)."""
        for commit in response.asr_targets.values():
            commit.fail()
            item = commit.item
            if self._items.get(item.id) is item and item.state is ItemState.IN_PROGRESS:
                item.fail_transcription(
                    content_index=commit.content_index,
                    error=ev.ErrorDetail(
                        type=ERROR_TYPE[code].value, code=code.value, message=message
                    ),
                )
        response.asr_targets.clear()
        for commit in response.segments:
            self._release(commit)
            commit.frames = []
            commit.pcm16 = b""

    def _clear_playing(self, *, force: Response | None = None, only: str | None = None) -> bool:
        """Tell the client to drop queued audio of every response that may be playing
        (or only of response `only`)."""
        cleared = False
        for response in self._responses.values():
            if only is not None and response.id != only:
                continue
            if response.playback.may_be_playing:
                response.playback.clear()
                cleared = True
            elif response is force:
                self._out.emit(ev.OutputAudioBufferCleared(response_id=response.id))
                cleared = True
        return cleared

    def _cancel(self, response: Response, reason: str, *, force_cleared: bool = False) -> None:
        self._out.epoch += 1
        for request_id, stage in response.open_requests.items():
            self._out.effect(Abort(request_id, stage, response.id))
        response.open_requests.clear()
        response.tts_open.clear()
        self._clear_playing(force=response if force_cleared else None)
        self._fail_waiting_segments(response, ErrorCode.COMMIT_ABORTED, f"response {reason}")
        self._close_output(response)
        response.cancel(reason)
        self._after_response()

    def _interrupt(self, reason: str, response_id: str | None, *, clear: bool = False) -> bool:
        """Cancel (B11): the active response, else whatever may still be playing.
        Returns False when there was nothing to interrupt."""
        active = self._active
        if active is not None and response_id in (None, active.id):
            self._cancel(active, reason, force_cleared=clear)
            return True
        playing = [r for r in self._responses.values() if r.playback.may_be_playing]
        if playing and (response_id is None or any(r.id == response_id for r in playing)):
            if active is None:  # the epoch fences requests: the active response's go on
                self._out.epoch += 1
            self._clear_playing(only=response_id)
            return True
        return False

    def _on_response_cancel(self, event: ev.ResponseCancel, now_ms: int) -> None:
        self._check_response_id(event.response_id, event.event_id)
        if not self._interrupt("client_cancelled", event.response_id) and event.response_id is None:
            raise RemoteProtocolError(
                "no response is active", code=ErrorCode.RESPONSE_NOT_ACTIVE, event_id=event.event_id
            )

    def _on_output_clear(self, event: ev.OutputAudioBufferClear, now_ms: int) -> None:
        self._check_response_id(event.response_id, event.event_id)
        interrupted = self._interrupt("output_audio_buffer_clear", event.response_id, clear=True)
        if not interrupted and event.response_id is None:
            self._out.emit(ev.OutputAudioBufferCleared())

    def _check_response_id(self, response_id: str | None, eid: str | None) -> None:
        if response_id is not None and response_id not in self._responses:
            raise RemoteProtocolError(
                f"no response `{response_id}`",
                code=ErrorCode.RESPONSE_NOT_ACTIVE,
                param="response_id",
                event_id=eid,
            )

    def _on_stage_failure(self, result: StageFailure, now_ms: int) -> None:
        response = self._active
        if response is None or result.request_id not in response.open_requests:
            return  # fenced: a late failure of a finished response
        stage = response.open_requests.pop(result.request_id)
        if result.may_have_accepted:  # B18: the engine may hold it; abort exactly once
            self._out.effect(Abort(result.request_id, stage, response.id))
        if result.engine_dead:
            self._out.effect(EvictReplica(stage))
        for request_id, other in response.open_requests.items():
            self._out.effect(Abort(request_id, other, response.id))
        response.open_requests.clear()
        response.tts_open.clear()
        error = ev.ErrorDetail(
            type=ERROR_TYPE[result.code].value, code=result.code.value, message=result.message
        )
        self._out.emit(ev.Error(error=error))
        self._fail_waiting_segments(response, result.code, result.message)
        self._close_output(response)
        response.fail(result.code.value, {"code": result.code.value, "message": result.message})
        self._after_response()

    # --- playback -----------------------------------------------------------------------

    def _on_playback_ack(self, event: ev.PlaybackAck, now_ms: int) -> None:
        eid = event.event_id
        response: Response | None = None
        if event.response_id is not None:
            response = self._responses.get(event.response_id)
        elif event.item_id is not None:
            response = next(
                (r for r in self._responses.values() if r.item_id == event.item_id), None
            )
        if response is None or response.playback.state is PlaybackState.IDLE:
            raise RemoteProtocolError(
                "no audio was sent for that response",
                code=ErrorCode.PLAYBACK_ITEM_NOT_FOUND,
                param="response_id",
                event_id=eid,
            )
        if event.item_id is not None and event.item_id != response.item_id:
            raise RemoteProtocolError(
                f"item `{event.item_id}` is not the item of response `{response.id}`",
                code=ErrorCode.PLAYBACK_ITEM_MISMATCH,
                param="item_id",
                event_id=eid,
            )
        response.playback.ack(event.played_ms)

    # --- server VAD ---------------------------------------------------------------------

    def _emit_error(self, code: ErrorCode, message: str) -> None:
        """An `error` that answers no client event (server VAD found it)."""
        detail = ev.ErrorDetail(type=ERROR_TYPE[code].value, code=code.value, message=message)
        self._out.emit(ev.Error(error=detail))

    def _on_vad_scores(self, result: VadScores, now_ms: int) -> None:
        config = self.config.turn_detection
        if config is None:
            return
        for probability in result.probabilities:
            if self._closed:
                return
            boundary = self._detector.feed(probability, config)
            if boundary == "start":
                item_id = self._out.next_id("item")
                self._detector.start(
                    item_id=item_id, audio_start_ms=self._detector.start_ms(config)
                )
                self._buffer.speech_item_id = item_id
                if not self._buffer.capturing:
                    self._buffer.start_capture()
                if config.interrupt_response:
                    self._interrupt("turn_detected", None)
            elif boundary == "stop":
                # ASR need not hear the silence that only ended the turn: keep a short tail
                detector = self._detector
                keep_until = detector.silence_start + ASR_TAIL_PAD_MS * 16  # samples
                item_id = detector.stop()
                if not self._buffer.since_commit:  # nothing arrived since the last commit
                    self._emit_error(
                        ErrorCode.INPUT_AUDIO_BUFFER_EMPTY,
                        "speech ended but no audio was appended since the last commit",
                    )
                    continue
                if self._queued_count() >= self.limits.max_pending_commits:
                    self._emit_error(
                        ErrorCode.INPUT_BACKPRESSURE,
                        "too many commits waiting; the utterance was dropped",
                    )
                    self._pending_bytes -= self._buffer.clear()
                    continue
                self._commit(
                    client_event_id=None,
                    wants_response=config.create_response,
                    item_id=self._buffer.speech_item_id or item_id,
                    keep_until_sample=keep_until,
                )
