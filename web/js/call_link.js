// What a WebRTC call needs to survive a network change (B42), kept out of app.js's wiring.
//
// The server's WebRTC stack (aiortc) has no ICE restart, so a call that drops is not
// re-offered: ClientProtocol's resume link asks for a new call (`reconnect`), which the
// page places with ?resume=1 (docs/session-semantics.md 10.3). Two things decide that a
// call dropped besides its data channel closing: ICE `failed`, and ICE that stays
// `disconnected` for `graceMs` (Chrome only calls it failed after about 30 s): `IceWatch`.
// A resumable session whose data channel closes is only detached on the server, so a
// hang-up also asks the server to end the call: `hangUpCall`.

/** Calls `onStuck(pc)` once `pc`'s ICE has stayed disconnected for `graceMs`. */
export class IceWatch {
  constructor(graceMs, onStuck) {
    this.graceMs = graceMs;
    this.onStuck = onStuck;
    this.timer = null;
  }

  /** `pc`'s ICE connection state changed. */
  observe(pc) {
    this.stop();
    if (pc.iceConnectionState !== "disconnected") return;
    this.timer = setTimeout(() => {
      if (pc.iceConnectionState === "disconnected") this.onStuck(pc);
    }, this.graceMs);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
  }
}

/** `POST /v1/realtime/calls/{callId}/hangup`, fire and forget (the page may be leaving). */
export function hangUpCall(callId, key) {
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  fetch(`/v1/realtime/calls/${encodeURIComponent(callId)}/hangup`, {
    method: "POST",
    headers,
    keepalive: true,
  }).catch(() => {}); // the call may be gone already
}
