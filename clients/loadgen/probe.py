"""`ProbeSpeaker`: what a probe session speaks and when, and the two latencies measured
on each of its utterances.

Probe sessions (`--probes K`, default 1 when `--speech` is given) speak the speech clip
instead of noise, once, then again 2 s after the reply's `response.done` (or 20 s after
the clip ended without one). Two latencies are measured per utterance:

- `speech_started` delay: the arrival of `input_audio_buffer.speech_started` minus the send
  time of the append that carried the audio at the VAD's decision point. The server
  reports `audio_start_ms` = the start of the first voiced audio minus the prefix padding;
  it can only decide after `min_speech_duration_ms` of voiced audio, so the decision point
  is `audio_start_ms + prefix_padding_ms + min_speech_duration_ms` of the turn detection
  this tool sent (joyduplex's detector works in whole 32 ms frames, so the true point can
  be up to one frame later). Milliseconds count from the session's first append; append k
  carries `[k * append_ms, (k + 1) * append_ms)`.
- end of speech to first reply audio: the arrival of the first
  `response.output_audio.delta` (beta `response.audio.delta`) minus the send time of the
  append carrying the utterance's last voiced sample. That sample is found in the clip
  itself (10 ms frames within 35 dB of the loudest, and above -50 dBFS); a clip with no
  voiced frame falls back to the server's `speech_stopped.audio_end_ms` minus
  `silence_duration_ms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clients.loadgen.options import TURN_DETECTION
from clients.loadgen.schedule import now

if TYPE_CHECKING:
    from clients.loadgen.payloads import Speech
    from clients.loadgen.run_state import BenchRun

__all__ = ["PROBE_GAP_S", "REPLY_TIMEOUT_S", "ProbeSpeaker", "Utterance"]

PROBE_GAP_S = 2.0  # after a reply's response.done
REPLY_TIMEOUT_S = 20.0  # after the clip ended, with no response.done


@dataclass(slots=True)
class Utterance:
    """One time the clip is spoken, and what the server did about it."""

    first: int  # append index of the clip's first chunk
    chunks: int
    voiced_first: int | None
    voiced_last: int | None
    ended_at: float | None = None  # loop time the last chunk left
    eos_sent_at: float | None = None
    speech_started: bool = False
    first_audio: bool = False
    answered: bool = False  # response.done (or response.listen) arrived


class ProbeSpeaker:
    """The speaking side of one probe session: it picks each append's payload and
    measures the latencies into `bench`."""

    def __init__(self, bench: BenchRun, speech: Speech) -> None:
        self.bench = bench
        self.speech = speech
        self.send_times: list[float] = []  # append k left at send_times[k]
        self.utterance: Utterance | None = None
        self.next_utterance_at = math.inf  # the runner sets the first once the window opens

    # --- sending -----------------------------------------------------------------------

    def payload(
        self, index: int, noise: list[bytes], at: float, speech_chunks: list[bytes] | None = None
    ) -> bytes:
        """The append `index`, leaving at `at`: noise, or the next chunk of an utterance
        (`speech_chunks`: the clip as the transport sends it; default its append events)."""
        speech = self.speech
        chunks = speech.chunks if speech_chunks is None else speech_chunks
        u = self.utterance
        if u is not None and u.ended_at is None:
            offset = index - u.first
            if offset == u.voiced_last:
                u.eos_sent_at = at
            if offset == u.chunks - 1:
                u.ended_at = at
            return chunks[offset]
        if u is not None and not u.answered and at - (u.ended_at or at) > REPLY_TIMEOUT_S:
            u.answered = True
            self.next_utterance_at = at
        if at >= self.next_utterance_at:
            self.count_utterance(final=False)
            self.utterance = Utterance(
                index, len(speech.chunks), speech.voiced_first, speech.voiced_last
            )
            self.next_utterance_at = math.inf
            self.bench.probe.utterances += 1
            return self.payload(index, noise, at, speech_chunks)
        return noise[index % len(noise)]

    def sent(self, at: float) -> None:
        """The next append left at `at`."""
        self.send_times.append(at)

    def count_utterance(self, *, final: bool) -> None:
        """Count how the current utterance went into the probe report; `final`: the
        window ended, so an utterance cut short before its reply could come is
        `unfinished` instead of missed."""
        u = self.utterance
        if u is None:
            return
        probe = self.bench.probe
        cut_short = u.ended_at is None or (not u.answered and now() - u.ended_at < REPLY_TIMEOUT_S)
        if final and cut_short and not (u.speech_started and u.first_audio):
            probe.unfinished += 1
            return
        if not u.speech_started:
            probe.missed_speech_started += 1
        if not u.first_audio:
            probe.no_reply += 1

    # --- what the server said ----------------------------------------------------------

    def speech_started(self, audio_start_ms: float, at: float) -> bool:
        """`speech_started` arrived at `at`; False when it is not about an utterance of
        this probe (noise woke the VAD). See the module docstring for the decision point."""
        u = self.utterance
        append_ms = self.bench.options.append_ms
        slack = math.ceil(1000 / append_ms)
        td = TURN_DETECTION
        decision_ms = audio_start_ms + td["prefix_padding_ms"] + td["min_speech_duration_ms"]
        index = max(0, math.ceil(decision_ms / append_ms) - 1)
        if u is None or not u.first <= index <= u.first + u.chunks + slack:
            return False
        if u.speech_started or not self.send_times:
            return True  # a pause in the clip the VAD heard as two turns: the first one counts
        u.speech_started = True
        sent = self.send_times[min(index, len(self.send_times) - 1)]
        self.bench.speech_started_delay.append((at - sent) * 1000)
        return True

    def speech_stopped(self, audio_end_ms: float) -> None:
        """Without a voiced sample in the clip, the server's end of speech stands in."""
        u = self.utterance
        if u is None or u.voiced_last is not None or u.eos_sent_at is not None:
            return
        end_ms = audio_end_ms - TURN_DETECTION["silence_duration_ms"]
        index = max(0, math.ceil(end_ms / self.bench.options.append_ms) - 1)
        if index < len(self.send_times):
            u.eos_sent_at = self.send_times[index]

    def reply_audio(self, at: float) -> None:
        """Reply audio arrived at `at`: the first after the end of speech is timed."""
        u = self.utterance
        if u is not None and not u.first_audio and u.eos_sent_at is not None:
            u.first_audio = True
            self.bench.reply_latency.append((at - u.eos_sent_at) * 1000)

    def answered(self, at: float) -> None:
        """`response.done` (or `response.listen`) arrived at `at`: speak again after a gap."""
        u = self.utterance
        if u is not None and u.ended_at is not None and not u.answered:
            u.answered = True
            self.next_utterance_at = at + PROBE_GAP_S
