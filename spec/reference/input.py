"""The oracle's input audio and commits: appending, clearing and committing the input
buffer (docs/session-semantics.md sections 2.1 - 2.3).
"""

from __future__ import annotations

from spec.effects import (
    ScoreVad,
)
from spec.errors import ErrorCode
from spec.events import (
    AudioFormat,
    ContentPart,
    ConversationItemAdded,
    ConversationItemDone,
    InputAudioBufferAppend,
    InputAudioBufferCleared,
    InputAudioBufferCommit,
    InputAudioBufferCommitted,
    ResponseListen,
)
from spec.reference.media import (
    _G711,
    _SAMPLE_BYTES,
    _is_image,
    _to_pcm16_16k,
)
from spec.reference.records import (
    PREROLL_MS,
    SPEECH_PROBABILITY,
    SPEECH_RMS,
    _Buffer,
    _Item,
    _reject,
    _Segment,
)
from spec.reference.state import SessionState
from spec.session_config import (
    INPUT_FORMATS,
    MAX_RATE_HZ,
    MIN_RATE_HZ,
)

__all__ = [
    "AudioInput",
]


class AudioInput(SessionState):
    """Input audio and commits (sections 2.1 - 2.3)."""

    # --- input (section 2.1 - 2.3) -----------------------------------------------------

    def _on_append(self, event: InputAudioBufferAppend) -> None:
        eid = event.event_id
        fmt = self.config.input_format.name
        rate = self.config.input_format.rate_hz
        raw_fmt: str | AudioFormat | None = (
            event.format if event.format is not None else event.input_audio_format
        )
        fmt_rate: int | None = None
        if raw_fmt is not None:
            name = raw_fmt if isinstance(raw_fmt, str) else raw_fmt.type
            canonical = INPUT_FORMATS.get(name.strip().lower())
            if canonical is None:
                raise _reject(
                    ErrorCode.UNSUPPORTED_AUDIO_FORMAT, f"unsupported format {name}", "format", eid
                )
            if not isinstance(raw_fmt, str):
                fmt_rate = raw_fmt.rate or raw_fmt.sample_rate_hz or raw_fmt.sample_rate
            if canonical != fmt:
                # AMBIGUITY (docs/session-semantics.md, decision D2): a format named without a rate
                # uses 8 kHz for G.711, else the session's input rate (as the session validator
                # does).
                rate = 8_000 if canonical in _G711 else rate
            fmt = canonical
        given_rate = event.sample_rate_hz or event.sample_rate or fmt_rate
        if given_rate is not None:
            if not MIN_RATE_HZ <= given_rate <= MAX_RATE_HZ:
                raise _reject(
                    ErrorCode.UNSUPPORTED_AUDIO_FORMAT,
                    f"unsupported sample rate {given_rate}",
                    "sample_rate_hz",
                    eid,
                )
            rate = given_rate
        if len(event.audio) % _SAMPLE_BYTES[fmt]:
            raise _reject(
                ErrorCode.BAD_AUDIO, "audio is not a whole number of samples", "audio", eid
            )
        # section 2.1: at most max_append_audio_ms of audio once at 16 kHz
        if len(event.audio) // _SAMPLE_BYTES[fmt] * 16_000 // rate > (
            self.limits.max_append_audio_ms * 16
        ):
            raise _reject(ErrorCode.EVENT_TOO_LARGE, "too much audio", "audio", eid)
        frames = list(event.video_frames)
        if len(frames) > self.limits.max_video_frames_per_append:
            raise _reject(ErrorCode.INVALID_VIDEO_FRAMES, "too many frames", "video_frames", eid)
        for i, frame in enumerate(frames):
            if not frame or len(frame) > self.limits.max_video_frame_bytes or not _is_image(frame):
                raise _reject(
                    ErrorCode.INVALID_VIDEO_FRAMES, "bad frame", f"video_frames[{i}]", eid
                )
        if not event.audio and not frames:
            # AMBIGUITY (docs/session-semantics.md, decision D3): the param is `audio`.
            raise _reject(
                ErrorCode.INVALID_INPUT_MODALITY, "neither audio nor frames", "audio", eid
            )
        pcm, rms = _to_pcm16_16k(event.audio, fmt, rate) if event.audio else (b"", 0.0)
        speech = False
        if pcm and self.config.turn_detection is None:
            # AMBIGUITY (docs/session-semantics.md, decision D4): an append without (converted)
            # audio is never speech, even with `is_speech: true`.
            if event.is_speech is not None:
                speech = event.is_speech
            elif event.speech_probability is not None:
                speech = event.speech_probability >= SPEECH_PROBABILITY
            else:
                speech = rms >= SPEECH_RMS
        old = self.buffer
        start = self.clock_samples
        buf = _Buffer(
            state="capturing" if speech else old.state,
            audio=[*old.audio, (start, pcm)] if pcm else list(old.audio),
            frames=[*old.frames, *frames],
            appended=True,
            has_speech=old.has_speech or speech,
            speech_item_id=old.speech_item_id,
        )
        self._trim(buf)
        # AMBIGUITY (docs/session-semantics.md, decision D5): "would make pending bytes exceed" is
        # the pending total after this append, i.e. after the idle retention dropped what it drops
        # (an idle camera session never hits backpressure).
        if self.pending_bytes() - old.nbytes + buf.nbytes > self.limits.max_pending_input_bytes:
            raise _reject(ErrorCode.INPUT_BACKPRESSURE, "pending input is full", None, eid)

        # accepted
        self.clock_samples += len(pcm) // 2
        self.buffer = buf
        if self.config.turn_detection is not None and pcm:
            self._effect(ScoreVad(pcm16=pcm, start_ms=int(start / 16)))
        elif pcm:
            self._manual_live(speech)

    def _trim(self, buf: _Buffer) -> None:
        if buf.state == "idle":
            while len(buf.audio) > 1 and buf.audio_ms > PREROLL_MS:
                buf.audio.pop(0)
            del buf.frames[:-1]
        else:
            excess = len(buf.frames) - self.limits.max_context_images
            if excess > 0:
                del buf.frames[:excess]

    def _on_clear(self) -> None:
        self.buffer = _Buffer()
        self._reset_vad()
        self._emit(InputAudioBufferCleared())

    def _commit_refusal(self) -> tuple[ErrorCode, str] | None:
        """Section 2.3: why the input buffer cannot be committed now, if it cannot."""
        buf = self.buffer
        if not buf.appended and not buf.frames:
            return ErrorCode.INPUT_AUDIO_BUFFER_EMPTY, "nothing to commit"
        quiet = not buf.has_speech and not buf.frames
        # items created by the client do not count; quiet commits are never refused
        if not quiet and len(self.retained) + len(self.deferred) >= self.limits.max_pending_commits:
            return ErrorCode.INPUT_BACKPRESSURE, "too many pending commits"
        return None

    def _on_commit(self, event: InputAudioBufferCommit) -> None:
        refusal = self._commit_refusal()
        if refusal is not None:
            raise _reject(refusal[0], refusal[1], None, event.event_id)
        live = self.live
        if (
            self.config.turn_detection is None
            and live.item_id is not None
            and live.last is not None
            and live.last_pause
            and live.last_quiet
        ):
            # AMBIGUITY (docs/session-semantics.md, decision D44): a manual hold that went
            # quiet after its pause's partial takes its words: the commit's audio is that
            # partial's and appends judged quiet after it
            audio = self.buffer.pcm_until(None)
            if audio.startswith(live.last[1]) or live.last[1].startswith(audio):
                live.last_turn_audio = audio
        self.live.item_id = None
        if self.vad.state != "silence":
            # a manual commit during VAD speech (or a semantic VAD pause) commits that
            # utterance; the detector goes back to silence without an event
            self._reset_vad()
        # AMBIGUITY (docs/session-semantics.md, decision D6): the commit's own `is_speech` flag is
        # not used.
        self._commit(event.event_id, event.wants_response(self.config.auto_response))

    def _commit(
        self, client_event_id: str | None, wants_response: bool, cut_sample: int | None = None
    ) -> None:
        """Commit the input buffer (checks already passed). `cut_sample`: a VAD-ended
        utterance keeps its audio only up to there (section 5)."""
        buf = self.buffer
        self.buffer = _Buffer()
        if cut_sample is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D35): the audio after a VAD end
            # stays in the buffer as idle audio (its appends' boundaries kept), the start of
            # the next utterance; idle retention applies to it
            for start, pcm in buf.audio:
                rest = pcm[2 * max(0, cut_sample - start) :]
                if rest:
                    self.buffer.audio.append((max(start, cut_sample), rest))
                    self.buffer.appended = True
            self._trim(self.buffer)
        item_id = buf.speech_item_id or self._new_item_id()
        version = self._new_version(item_id)
        seq = self._next_seq()
        frames = list(buf.frames)
        if not buf.has_speech and not frames:
            # quiet commit (B6): its bytes are released
            item = _Item(
                item_id, version, "user", "completed", [ContentPart(type="input_audio")], seq
            )
            prev = self._add_item(item)
            self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
            self._emit(
                InputAudioBufferCommitted(
                    item_id=item_id, client_event_id=client_event_id, no_response=True
                )
            )
            self._emit(ConversationItemDone(item=self._wire_item(item), previous_item_id=prev))
            self._emit(ResponseListen(reason="silence_or_noise"))
            return
        # audio without speech is never used: released at once (not held by the commit)
        audio = buf.pcm_until(cut_sample) if buf.has_speech else b""
        speech = bool(audio)
        content: list[ContentPart] = []
        if speech:
            content.append(ContentPart(type="input_audio", transcript=None))
        content.extend(ContentPart(type="input_image") for _ in frames)
        # a commit that needs no ASR (no speech, or the camera profile) is done at once
        asr = speech and self.profile == "speech"
        item = _Item(
            item_id,
            version,
            "user",
            "in_progress" if asr else "completed",
            content,
            seq,
            awaiting_index=0 if asr else None,
        )
        prev = self._add_item(item)
        self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
        self._emit(
            InputAudioBufferCommitted(
                item_id=item_id, previous_item_id=prev, client_event_id=client_event_id
            )
        )
        if not asr:
            self._emit(ConversationItemDone(item=self._wire_item(item), previous_item_id=prev))
        self._tick(item)
        segment = _Segment(
            item_id=item_id,
            version=version,
            seq=seq,
            speech=speech,
            audio=audio,
            content_index=0,
            frames=frames,
            texts=[None] if speech else [],
            audio_held=len(audio),
            frames_held=sum(map(len, frames)),
        )
        if not wants_response:
            self.retained.append(segment)
        elif self.active is not None:
            self.deferred.append(segment)
        else:
            self._start_response([segment])
