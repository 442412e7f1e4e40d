// The websocket of a call across its resumes (B42). The first socket opens /v1/realtime
// with ?resumable=1, so the server keeps the session through a drop and names a resume
// token in session.created (docs/session-semantics.md 7.1); each `reconnect` output of
// ClientProtocol opens a new socket with ?resume=1&session_id=<id> (the id is there for a
// balancer to route by), on which the protocol sends session.resume.
//
// Only the newest socket reports: one given up on (`abandon_socket`) or replaced is closed
// and its late events are ignored, so the protocol never hears of two sockets at once.
// An abandoned socket closes with 4000, never 1000: 1000 tells the server the person said
// goodbye and ends the session, any other code (or none) leaves it waiting for a resume.

const ABANDONED = 4000;

export class WebsocketLink {
  /** `protocols`: the subprotocols to offer; `handlers`: `open()`, `text(data)` and
   * `close(event, opened)` of the current socket. */
  constructor(protocols, handlers) {
    this.protocols = protocols;
    this.handlers = handlers;
    this.socket = null;
  }

  /** The call's first socket: a new, resumable session. */
  start() {
    this.open("resumable=1");
  }

  /** A socket to resume `sessionId` on (ClientProtocol's `reconnect`). */
  resume(sessionId) {
    this.open(`resume=1&session_id=${encodeURIComponent(sessionId)}`);
  }

  open(query) {
    this.abandon();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/v1/realtime?${query}`, this.protocols);
    this.socket = socket;
    let opened = false;
    socket.onopen = () => {
      if (this.socket !== socket) return;
      opened = true;
      this.handlers.open();
    };
    socket.onmessage = (event) => {
      if (this.socket === socket) this.handlers.text(event.data);
    };
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.handlers.close(event, opened);
    };
  }

  /** Give up on the current socket without a report (an attempt that hung). */
  abandon() {
    const socket = this.socket;
    this.socket = null;
    if (socket && socket.readyState <= WebSocket.OPEN) socket.close(ABANDONED, "abandoned");
  }

  send(text) {
    if (this.socket?.readyState === WebSocket.OPEN) this.socket.send(text);
  }

  /** The person hung up: 1000 ends the session on the server. */
  close() {
    const socket = this.socket;
    this.socket = null;
    if (socket && socket.readyState <= WebSocket.OPEN) socket.close(1000, "client closed");
  }
}
