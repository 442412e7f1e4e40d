// WebRTC: the page's own gate on the reply track, so a barge-in is silent at once, as on
// the websocket (where the playback worklet drops the audio it holds). On a call the
// server clears its output buffer at a barge-in, but what it already sent is in flight
// and in the browser's jitter buffer (40 ms and up; well over 100 ms on a loaded machine)
// and would still play. The remote track is played through a GainNode: ClientProtocol's
// `clear` output closes it (the next render quantum is silent), and the server's
// `output_audio_buffer.started` of a reply other than the cleared one opens it again: the
// server starts a reply's audio only after it cleared the cut one, and a new reply's first
// packets come after the cut one's last.

export class ReplyGate {
  /** `gain`: the AudioParam of the GainNode the remote track plays through. */
  constructor(gain) {
    this.gain = gain;
    this.closedFor = undefined; // the cleared response id (null: every reply) while closed
  }

  get closed() {
    return this.closedFor !== undefined;
  }

  /** ClientProtocol cleared `responseId`'s playback (null: every reply's). */
  close(responseId) {
    this.closedFor = responseId ?? null;
    this.gain.value = 0;
  }

  /** The server started playing `responseId` on the track. */
  started(responseId) {
    if (!this.closed || (this.closedFor !== null && responseId === this.closedFor)) return;
    this.closedFor = undefined;
    this.gain.value = 1;
  }
}
