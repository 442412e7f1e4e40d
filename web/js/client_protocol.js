// ClientProtocol: the browser port of core/client_protocol/ (protocol.py, server_events.py,
// call_state.py, holds.py and replies.py: read their docstrings for the theory of
// operation; the Python class is built in layers, this port is one class). Sans-IO: every
// input carries nowMs and returns outputs (plain JSON objects)
// that app.js executes. State changes happen only through the tables of spec/ (exported to
// web/spec/*.json) run by rulebook.js; this file holds the same couplings as the Python
// class, line by line, and tests/web/traces prove both produce identical outputs and states.
//
// Method names follow Python's (snake_case) so a trace step maps to the same call.

import { Rulebook } from "./rulebook.js";

export function base64Bytes(text) {
  if (!text) return 0;
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  return Math.floor((text.length * 3) / 4) - padding;
}

function id(value) {
  return typeof value === "string" ? value : null;
}

function object(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? value : {};
}

class ClientOutbox {
  constructor() {
    this.items = [];
    this.eventCounter = 0;
    // while a resumable session's link is down, sends wait here (B42)
    this.holding = false;
    this.held = [];
  }
  nextEventId() {
    this.eventCounter += 1;
    return `evt_${this.eventCounter}`;
  }
  send(event) {
    if (!("event_id" in event)) {
      event = { type: event.type, event_id: this.nextEventId(), ...event };
    }
    (this.holding ? this.held : this.items).push({ kind: "send", event });
  }
  send_through(event) {
    const holding = this.holding;
    this.holding = false;
    try {
      this.send(event);
    } finally {
      this.holding = holding;
    }
  }
  hold_sends() {
    this.holding = true;
  }
  release_sends() {
    this.holding = false;
    this.items.push(...this.held);
    this.held = [];
  }
  discard_held() {
    this.holding = false;
    this.held = [];
  }
  emit(output) {
    this.items.push(output);
  }
  drain() {
    const out = this.items;
    this.items = [];
    return out;
  }
}

// core/client_protocol/function_calls.py: the function calls the host runs and answers (B38, B39)
class ClientCalls {
  constructor(out) {
    this.out = out;
    this.pending = new Map(); // response id -> Set of call ids waiting for an answer
    this.responseOf = new Map(); // call id -> its response
    this.done = new Set(); // responses done whose calls still wait
  }
  server_event(event) {
    const kind = event.type;
    if (kind === "response.output_item.done") {
      const item = event.item;
      if (item !== null && typeof item === "object" && item.type === "function_call") {
        this.called(id(event.response_id), item);
      }
    } else if (kind === "conversation.item.added") {
      const item = event.item;
      if (item !== null && typeof item === "object" && item.type === "function_call_output") {
        this.out.emit({
          kind: "function_output",
          call_id: id(item.call_id) ?? "",
          output: id(item.output) ?? "",
        });
      }
    } else if (kind === "response.done") {
      const response = event.response;
      const responseId =
        response !== null && typeof response === "object" ? id(response.id) : null;
      if (responseId !== null && this.pending.has(responseId)) {
        this.done.add(responseId);
        this.followUp(responseId);
      }
    }
  }
  called(responseId, item) {
    const callId = id(item.call_id);
    if (responseId === null || callId === null) return;
    const status = item.status === "incomplete" ? "incomplete" : "completed";
    this.out.emit({
      kind: "function_call",
      response_id: responseId,
      call_id: callId,
      name: id(item.name) ?? "",
      arguments: id(item.arguments) ?? "",
      status,
    });
    if (status === "completed") {
      if (!this.pending.has(responseId)) this.pending.set(responseId, new Set());
      this.pending.get(responseId).add(callId);
      this.responseOf.set(callId, responseId);
    }
  }
  answer(callId, output) {
    const responseId = this.responseOf.get(callId);
    if (responseId === undefined) return;
    this.responseOf.delete(callId);
    this.out.send({
      type: "conversation.item.create",
      item: { type: "function_call_output", call_id: callId, output },
    });
    this.pending.get(responseId).delete(callId);
    this.followUp(responseId);
  }
  followUp(responseId) {
    const waiting = this.pending.get(responseId);
    if (this.done.has(responseId) && (waiting === undefined || waiting.size === 0)) {
      this.pending.delete(responseId);
      this.done.delete(responseId);
      this.out.send({ type: "response.create" });
    }
  }
}

class Hold {
  constructor(rules, outbox, holdId) {
    this.rules = rules;
    this.outbox = outbox;
    this.hold_id = holdId;
    this.state = rules.table.initial;
    this.commit_event_id = null;
    this.item_id = null;
    this.response_id = null;
    this.ended_ms = null;
    this.uploaded_samples = 0;
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  snapshot() {
    return {
      hold_id: this.hold_id,
      state: this.state,
      commit_event_id: this.commit_event_id,
      item_id: this.item_id,
      response_id: this.response_id,
      uploaded_samples: this.uploaded_samples,
    };
  }
  mic_muted(kwargs) {
    return Boolean(kwargs.muted);
  }
  send_commit() {
    this.commit_event_id = this.outbox.nextEventId();
    this.outbox.send({
      type: "input_audio_buffer.commit",
      event_id: this.commit_event_id,
      create_response: true,
    });
  }
  report_rejection(kwargs) {
    this.outbox.emit({
      kind: "notice",
      level: "warning",
      code: kwargs.code,
      message: kwargs.message,
      hold_id: this.hold_id,
    });
  }
}

class ClientPlayback {
  constructor(rules, outbox, responseId, itemId, onTrack = false) {
    this.rules = rules;
    this.outbox = outbox;
    this.on_track = onTrack; // the server plays it onto a WebRTC audio track
    this.response_id = responseId;
    this.item_id = itemId;
    this.state = rules.table.initial;
    this.queued_ms = 0;
    this.played_ms = 0;
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  accepts(trigger) {
    return this.rules.allowed(this.state, trigger);
  }
  snapshot() {
    return {
      response_id: this.response_id,
      state: this.state,
      queued_ms: this.queued_ms,
      played_ms: this.played_ms,
    };
  }
  enqueue_audio(kwargs) {
    this.queued_ms += kwargs.audio_ms;
    this.outbox.emit({ kind: "play", response_id: this.response_id, audio: kwargs.audio });
  }
  drop_late_audio(kwargs) {
    this.outbox.emit({ kind: "fenced", response_id: this.response_id, audio_ms: kwargs.audio_ms });
  }
  request_drain() {
    if (this.on_track) return; // the server plays it out and says output_audio_buffer.stopped
    this.outbox.emit({ kind: "drain", response_id: this.response_id });
  }
  clear_local_audio() {
    this.outbox.emit({ kind: "clear", response_id: this.response_id });
  }
  acknowledge_played(kwargs) {
    this.played_ms = Math.max(this.played_ms, kwargs.played_ms);
    if (this.on_track) return; // the server reports what it sent itself
    const ack = { type: "playback.ack", response_id: this.response_id, played_ms: this.played_ms };
    if (this.item_id !== null) ack.item_id = this.item_id;
    this.outbox.send(ack);
  }
}

// core/statemachines/client_reply_gate.py: on a call, whether the reply track is heard
class ReplyGate {
  constructor(rules, outbox) {
    this.rules = rules;
    this.outbox = outbox;
    this.state = rules.table.initial;
    this.cut_replies = []; // the replies cut since the gate last muted
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  snapshot() {
    return { state: this.state, cut_replies: [...this.cut_replies] };
  }
  starts_another_reply(kwargs) {
    return !this.cut_replies.includes(kwargs.response_id);
  }
  mute_reply(kwargs) {
    this.cut_replies = [String(kwargs.response_id)];
    this.outbox.emit({ kind: "mute_reply", response_id: kwargs.response_id });
  }
  remember_cut(kwargs) {
    const responseId = String(kwargs.response_id);
    if (!this.cut_replies.includes(responseId)) this.cut_replies.push(responseId);
  }
  unmute_reply(kwargs) {
    this.cut_replies = [];
    this.outbox.emit({ kind: "unmute_reply", response_id: kwargs.response_id });
  }
}

// The backoff before the attempt after `attempts` earlier ones (core/statemachines/client_resume.py)
export function backoffMs(constants, attempts, jitter) {
  const base = Math.min(constants.resume_backoff_max_ms, constants.resume_backoff_first_ms * 2 ** attempts);
  return base * (0.5 + jitter / 2);
}

// The resume link (B42): the session id, resume token and event cursor live here only
// (in memory: a reload starts a new session); see core/statemachines/client_resume.py.
class ResumeLink {
  constructor(rules, outbox, constants) {
    this.rules = rules;
    this.outbox = outbox;
    this.constants = constants;
    this.state = rules.table.initial;
    this.session_id = null;
    this.resume_token = null;
    this.last_server_event_seq = 0;
    this.attempts = 0;
    this.dropped_at_ms = null;
    this.next_attempt_ms = null;
    this.attempt_deadline_ms = null;
    this.jitter = 0.5;
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  resumable() {
    return this.session_id !== null && this.resume_token !== null;
  }
  take(event) {
    const kind = event.type;
    if (kind === "session.created") {
      const sessionId = id(object(event.session).id);
      const token = id(event.resume_token);
      if (sessionId !== null && token !== null) {
        this.session_id = sessionId;
        this.resume_token = token;
      }
    } else if (kind === "session.resumed" && id(event.resume_token) !== null) {
      this.resume_token = event.resume_token;
    }
    const seq = event.server_event_seq;
    if (Number.isInteger(seq)) {
      if (seq <= this.last_server_event_seq) return false;
      this.last_server_event_seq = seq;
    }
    return true;
  }
  snapshot() {
    return {
      state: this.state,
      session_id: this.session_id,
      resumable: this.resumable(),
      last_server_event_seq: this.last_server_event_seq,
      attempts: this.attempts,
      next_attempt_ms: this.next_attempt_ms,
      attempt_deadline_ms: this.attempt_deadline_ms,
    };
  }
  within_limits(kwargs) {
    const elapsed = kwargs.now_ms - this.dropped_at_ms;
    return this.attempts < this.constants.resume_max_attempts && elapsed < this.constants.resume_give_up_ms;
  }
  start_backoff(kwargs) {
    this.attempts = 0;
    this.dropped_at_ms = kwargs.now_ms;
    this.schedule_attempt(kwargs);
  }
  schedule_attempt(kwargs) {
    this.jitter = kwargs.jitter ?? this.jitter;
    const wait = backoffMs(this.constants, this.attempts, this.jitter);
    this.next_attempt_ms = kwargs.now_ms + wait;
    this.attempt_deadline_ms = null;
    this.outbox.emit({ kind: "link", state: "dropped", attempts: this.attempts, retry_in_ms: wait });
  }
  open_socket(kwargs) {
    this.attempts += 1;
    this.next_attempt_ms = null;
    this.attempt_deadline_ms = kwargs.now_ms + this.constants.resume_attempt_timeout_ms;
    this.outbox.emit({ kind: "reconnect", session_id: this.session_id, attempt: this.attempts });
  }
  send_resume() {
    this.outbox.send_through({
      type: "session.resume",
      session_id: this.session_id,
      resume_token: this.resume_token,
      last_received_server_event_seq: this.last_server_event_seq,
    });
  }
  give_up(kwargs) {
    this.next_attempt_ms = null;
    this.attempt_deadline_ms = null;
    const message =
      kwargs.why === "out_of_time"
        ? `the connection did not come back (${this.attempts} attempts in ` +
          `${Math.floor(this.constants.resume_give_up_ms / 1000)} s); the conversation is over: ` +
          "Connect starts a new session"
        : `the server no longer holds this session (${kwargs.why}): the connection was down ` +
          "longer than it waits; Connect starts a new session";
    this.outbox.emit({ kind: "notice", level: "error", code: "session_lost", message });
  }
  report_resumed(kwargs) {
    this.attempt_deadline_ms = null;
    this.outbox.emit({
      kind: "link",
      state: "resumed",
      attempts: this.attempts,
      down_ms: kwargs.now_ms - this.dropped_at_ms,
    });
  }
}

class Watchdog {
  constructor(rules, outbox, timeoutMs) {
    this.rules = rules;
    this.outbox = outbox;
    this.timeout_ms = timeoutMs;
    this.state = rules.table.initial;
    this.deadline_ms = null;
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  start_timer(kwargs) {
    this.deadline_ms = kwargs.now_ms + this.timeout_ms;
    this.outbox.emit({ kind: "watchdog", armed: true, deadline_ms: this.deadline_ms });
  }
  stop_timer() {
    this.deadline_ms = null;
    this.outbox.emit({ kind: "watchdog", armed: false, deadline_ms: null });
  }
  report_expiry() {
    this.deadline_ms = null;
    this.outbox.emit({
      kind: "notice",
      level: "error",
      code: "turn_watchdog",
      message: `no reply within ${Math.floor(this.timeout_ms / 1000)} s; the call was ended`,
    });
  }
}

class Camera {
  constructor(rules, outbox, captures = true) {
    this.rules = rules;
    this.outbox = outbox;
    this.captures = captures; // false: a video track carries the camera
    this.state = rules.table.initial;
    this.stashed = null;
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  take_stashed() {
    const frame = this.stashed;
    this.stashed = null;
    return frame !== null ? [frame] : [];
  }
  audio_flowing(kwargs) {
    return Boolean(kwargs.audio_flowing);
  }
  capture_now() {
    if (this.captures) this.outbox.emit({ kind: "capture_frame" });
  }
  send_frame(kwargs) {
    this.outbox.send({ type: "input_audio_buffer.append", video_frames: [kwargs.jpeg] });
  }
  stash_frame(kwargs) {
    this.stashed = String(kwargs.jpeg);
  }
  send_stashed_frame() {
    const frames = this.take_stashed();
    if (frames.length) this.outbox.send({ type: "input_audio_buffer.append", video_frames: frames });
  }
  drop_stashed_frame() {
    this.stashed = null;
  }
}

class Connection {
  constructor(rules, outbox, sessionPayload) {
    this.rules = rules;
    this.outbox = outbox;
    this.session_payload = sessionPayload;
    this.state = rules.table.initial;
    this.update_event_id = null;
  }
  fire(trigger, kwargs = {}) {
    this.rules.fire(this, trigger, kwargs);
  }
  send_session_update() {
    this.update_event_id = this.outbox.nextEventId();
    this.outbox.send({
      type: "session.update",
      event_id: this.update_event_id,
      session: this.session_payload,
    });
  }
  tear_down(kwargs) {
    this.outbox.emit({ kind: "close", reason: kwargs.reason });
  }
}

export class ClientProtocol {
  constructor(spec, mode = "vad", options = {}) {
    const { constants, tables } = spec;
    if (!constants.modes.includes(mode)) {
      throw new Error(`unknown client mode \`${mode}\`; expected one of ${constants.modes}`);
    }
    const media = options.media ?? "events";
    if (!constants.media.includes(media)) {
      throw new Error(`unknown media \`${media}\`; expected one of ${constants.media}`);
    }
    this.constants = constants;
    this.mode = mode;
    // "tracks": a WebRTC call's tracks carry microphone, camera and reply audio
    this.on_tracks = media === "tracks";
    this.muted = options.muted ?? false;
    this.camera_wanted = options.camera ?? false;
    this.camera_interval_ms = options.camera_interval_ms ?? constants.camera_interval_ms;
    const payload = structuredClone(constants.session_payloads[mode]);
    // hands-free only: server VAD (the default) or semantic VAD at an eagerness (B32)
    const turnDetection = options.turn_detection ?? "server_vad";
    if (!(turnDetection in constants.turn_detections)) {
      throw new Error(`unknown turn detection \`${turnDetection}\``);
    }
    if (payload.audio.input.turn_detection) {
      payload.audio.input.turn_detection = structuredClone(
        constants.turn_detections[turnDetection],
      );
    }
    const detection = payload.audio.input.turn_detection;
    this.interrupt_on_speech = Boolean(detection && detection.interrupt_response);
    this.rules = {};
    for (const [name, table] of Object.entries(tables)) this.rules[name] = new Rulebook(table);
    // state groups exported with the tables (spec/tables/client_*.py `groups`, `terminal`)
    this.states = {
      awaitingReply: new Set(tables.client_hold.groups.awaiting_reply),
      liveHold: new Set(tables.client_hold.groups.live),
      uploadingHold: new Set(tables.client_hold.groups.uploading),
      finishedHold: new Set(tables.client_hold.terminal),
      livePlayback: new Set(tables.client_playback.groups.live),
    };
    this.out = new ClientOutbox();
    this.connection = new Connection(this.rules.client_connection, this.out, payload);
    this.calls = new ClientCalls(this.out); // function calls to run and answer (B38, B39)
    this.watchdog = new Watchdog(
      this.rules.client_watchdog,
      this.out,
      options.watchdog_ms ?? constants.turn_watchdog_ms,
    );
    this.camera = new Camera(this.rules.client_camera, this.out, !this.on_tracks);
    this.link = new ResumeLink(this.rules.client_resume, this.out, constants);
    this.resumeRefusals = new Set(constants.resume_refusals);
    // a push-to-talk hold cut by the drop after it uploaded audio: cleared on resume
    this.clearOnResume = false;
    // the link's liveness (B42): last server event, last send, the probe's heartbeat
    this.heardMs = null;
    this.sentMs = null;
    this.probeMs = null;
    this.holds = [];
    this.playbacks = new Map();
    this.gate = new ReplyGate(this.rules.client_reply_gate, this.out); // on a call: the reply track
    this.pending_commits = new Map();
    this.user_speaking = false;
    this.holdCounter = 0;
    this.restartWatchdog = false;
    this.microphone_sending = false; // on tracks: the last `microphone` output
    this.handshakeDeadline = null;
    this.nextCapture = null;
    this.speechStoppedAt = new Map();
    this.turnEnd = new Map();
    this.latencyReported = new Set();
  }

  // --- host inputs --------------------------------------------------------------------

  connected(now) {
    if (this.connection.state === "connecting") {
      this.connection.fire("open");
      this.handshakeDeadline = now + this.constants.handshake_timeout_ms;
    } else if (this.linkIs("reconnecting")) {
      this.link.fire("opened");
    }
    return this.finish(now);
  }

  // jitter in [0, 1), drawn by the host (Math.random()), scales the resume's backoff
  disconnected(now, reason = "socket_closed", jitter = 0.5) {
    const state = this.connection.state;
    if (state === "ready" && this.link.resumable()) {
      this.drop(now, jitter);
    } else if (state === "resuming") {
      if (this.link.state === "reconnecting") {
        this.link.fire("fail", { now_ms: now, jitter, why: "out_of_time" });
        this.loseIfLost();
      }
    } else if (state !== "closed") {
      this.tearDown("lost", reason);
    }
    return this.finish(now);
  }

  // a resumable session is closed first: a call's data channel that closes only detaches it
  hang_up(now) {
    if (this.ready() && this.link.resumable()) this.out.send({ type: "session.close" });
    if (this.connection.state !== "closed") this.tearDown("lost", "client_hangup");
    return this.finish(now);
  }

  server_text(text, now) {
    if (this.connection.state === "closed") return [];
    let event = null;
    try {
      event = JSON.parse(text);
    } catch {
      event = null;
    }
    if (
      event === null ||
      typeof event !== "object" ||
      Array.isArray(event) ||
      typeof event.type !== "string"
    ) {
      this.out.emit({
        kind: "notice",
        level: "warning",
        code: "malformed_event",
        message: "the server sent a frame that is not a JSON event; skipped",
      });
      return this.finish(now);
    }
    return this.server_event(event, now);
  }

  server_event(event, now) {
    if (this.connection.state === "closed") return [];
    this.heardMs = now;
    this.probeMs = null;
    if (this.link.take(event)) this.onServerEvent(event, now);
    else this.out.emit({ kind: "duplicate", server_event_seq: event.server_event_seq });
    return this.finish(now);
  }

  press(now) {
    if (this.mode === "ptt" && this.ready() && this.liveHold() === null) {
      // the track streamed since the last commit: the hold's audio starts now
      if (this.on_tracks) this.out.send({ type: "input_audio_buffer.clear" });
      this.holdCounter += 1;
      const hold = new Hold(this.rules.client_hold, this.out, `hold_${this.holdCounter}`);
      this.holds.push(hold);
      hold.fire("press", { muted: this.muted });
    }
    return this.finish(now);
  }

  release(now) {
    const hold = this.liveHold();
    if (hold !== null) {
      hold.ended_ms = now;
      hold.fire("release");
      if (hold.state === "submitted" && hold.commit_event_id !== null) {
        this.pending_commits.set(hold.commit_event_id, hold);
        this.restartWatchdog = true;
      }
    }
    return this.finish(now);
  }

  set_muted(muted, now) {
    if (muted !== this.muted) {
      this.muted = muted;
      const hold = this.liveHold();
      if (hold !== null) hold.fire(muted ? "mute" : "unmute");
    }
    return this.finish(now);
  }

  set_camera(on, now) {
    this.camera_wanted = on;
    return this.finish(now);
  }

  function_output(callId, output, now) {
    if (this.ready()) this.calls.answer(callId, output);
    return this.finish(now);
  }

  stop_reply(now) {
    if (this.ready()) {
      this.interrupt(null);
      this.out.send({ type: "output_audio_buffer.clear" });
    }
    return this.finish(now);
  }

  mic_chunk(audioB64, samples, now) {
    if (this.audioFlowing() && samples > 0) {
      if (this.mode === "ptt") {
        const hold = this.liveHold();
        if (hold.state === "pressed") hold.fire("upload");
        hold.uploaded_samples += samples;
      }
      if (this.on_tracks) return this.finish(now); // the track carries the audio
      const event = { type: "input_audio_buffer.append", audio: audioB64 };
      const frames = this.camera.take_stashed();
      if (frames.length) event.video_frames = frames;
      this.out.send(event);
    }
    return this.finish(now);
  }

  camera_frame(jpegB64, now) {
    if (this.connection.state !== "closed") this.camera.fire("frame", { jpeg: jpegB64 });
    return this.finish(now);
  }

  playback_started(responseId, now) {
    if (this.connection.state !== "closed") this.playback_started_at(responseId, now);
    return this.finish(now);
  }

  playback_started_at(responseId, now) {
    const playback = this.playbacks.get(responseId);
    if (playback === undefined) return;
    playback.fire("started");
    const end = this.turnEnd.get(responseId);
    if (end !== undefined && !this.latencyReported.has(responseId)) {
      this.latencyReported.add(responseId);
      this.out.emit({ kind: "latency", response_id: responseId, first_audio_ms: now - end });
    }
  }

  playback_stopped(responseId, playedMs, now) {
    return this.report(responseId, "stopped", playedMs, now);
  }

  playback_drained(responseId, playedMs, now) {
    return this.report(responseId, "drained", playedMs, now);
  }

  handle_timeout(now) {
    const state = this.connection.state;
    if (state === "handshaking" && this.due(this.handshakeDeadline, now)) {
      this.out.emit({
        kind: "notice",
        level: "error",
        code: "handshake_timeout",
        message: "the server did not answer session.update in time",
      });
      this.tearDown("lost", "handshake_timeout");
    } else if (state === "resuming") {
      const link = this.link;
      if (link.state === "dropped" && this.due(link.next_attempt_ms, now)) {
        link.fire("attempt", { now_ms: now, why: "out_of_time" });
        this.loseIfLost();
      } else if (link.state === "reconnecting" && this.due(link.attempt_deadline_ms, now)) {
        this.out.emit({ kind: "abandon_socket" });
        link.fire("fail", { now_ms: now, why: "out_of_time" });
        this.loseIfLost();
      }
    } else if (state === "ready" && this.due(this.linkDeadline(), now)) {
      if (this.probeMs === null) {
        this.out.send({ type: "session.heartbeat" });
        this.probeMs = now;
      } else {
        // no answer: the link died without a close reaching us
        this.out.emit({ kind: "abandon_socket" });
        this.drop(now, this.link.jitter);
      }
    } else if (state === "ready") {
      if (this.watchdog.state === "armed" && this.due(this.watchdog.deadline_ms, now)) {
        this.watchdog.fire("expire");
        this.tearDown("lost", "turn_watchdog");
      } else if (this.due(this.nextCapture, now)) {
        this.out.emit({ kind: "capture_frame" });
        this.nextCapture = now + this.camera_interval_ms;
      }
    }
    return this.finish(now);
  }

  next_deadline() {
    const candidates = [this.nextCapture];
    if (this.connection.state === "handshaking") candidates.push(this.handshakeDeadline);
    if (this.watchdog.state === "armed") candidates.push(this.watchdog.deadline_ms);
    if (this.connection.state === "resuming") {
      candidates.push(this.link.next_attempt_ms, this.link.attempt_deadline_ms);
    }
    candidates.push(this.linkDeadline());
    const present = candidates.filter((c) => c !== null);
    return present.length ? Math.min(...present) : null;
  }

  step(entry) {
    const now = entry.now_ms;
    switch (entry.kind) {
      case "connected":
        return this.connected(now);
      case "disconnected":
        return this.disconnected(now, entry.reason ?? "socket_closed", entry.jitter ?? 0.5);
      case "hang_up":
        return this.hang_up(now);
      case "server":
        return this.server_event(entry.event, now);
      case "server_text":
        return this.server_text(entry.text, now);
      case "press":
        return this.press(now);
      case "release":
        return this.release(now);
      case "mute":
        return this.set_muted(Boolean(entry.muted), now);
      case "camera":
        return this.set_camera(Boolean(entry.on), now);
      case "stop_reply":
        return this.stop_reply(now);
      case "mic":
        return this.mic_chunk(entry.audio, Math.trunc(entry.samples), now);
      case "frame":
        return this.camera_frame(entry.jpeg, now);
      case "playback_started":
        return this.playback_started(entry.response_id, now);
      case "playback_stopped":
        return this.playback_stopped(entry.response_id, entry.played_ms, now);
      case "playback_drained":
        return this.playback_drained(entry.response_id, entry.played_ms, now);
      case "timeout":
        return this.handle_timeout(now);
      case "function_output":
        return this.function_output(entry.call_id, entry.output, now);
      default:
        throw new Error(`unknown input kind \`${entry.kind}\``);
    }
  }

  snapshot() {
    return {
      mode: this.mode,
      muted: this.muted,
      camera_wanted: this.camera_wanted,
      connection: this.connection.state,
      camera: this.camera.state,
      frame_waiting: this.camera.stashed !== null,
      next_capture_ms: this.nextCapture,
      watchdog: this.watchdog.state,
      watchdog_deadline_ms: this.watchdog.deadline_ms,
      user_speaking: this.user_speaking,
      pending_commits: [...this.pending_commits.keys()],
      holds: this.holds.map((hold) => hold.snapshot()),
      playbacks: [...this.playbacks.values()].map((playback) => playback.snapshot()),
      reply_gate: this.gate.snapshot(),
      link: this.link.snapshot(),
      held_sends: this.out.held.length,
    };
  }

  // --- server events ------------------------------------------------------------------

  onServerEvent(event, now) {
    this.calls.server_event(event);
    const kind = event.type;
    if (kind === "session.updated") {
      this.connection.fire("ready");
      this.handshakeDeadline = null;
    } else if (kind === "session.resumed") {
      this.onResumed(now);
    } else if (kind === "session.resync_required") {
      // the events of the drop are gone: what was in flight is cut, not continued
      this.out.emit({
        kind: "notice",
        level: "warning",
        code: "resync_required",
        message:
          "some events of the drop could not be replayed " +
          `(${id(event.reason) || "unknown"}); replies in flight were cut`,
      });
      this.interrupt(null);
    } else if (kind === "session.replaced") {
      // another connection resumed this session: it is that one's now
      this.out.emit({
        kind: "notice",
        level: "warning",
        code: "session_replaced",
        message: "the session continues elsewhere",
      });
      this.tearDown("lost", "session_replaced");
    } else if (kind === "session.closed") {
      this.tearDown("lost", `session_closed:${id(event.reason) || "unknown"}`);
    } else if (kind === "error") {
      this.onError(object(event.error));
    } else if (kind === "input_audio_buffer.speech_started") {
      this.user_speaking = true;
      if (this.interrupt_on_speech) this.interrupt(null);
    } else if (kind === "input_audio_buffer.speech_stopped") {
      this.user_speaking = false;
      const itemId = id(event.item_id);
      if (itemId !== null) {
        this.speechStoppedAt.set(itemId, now);
        this.trim(this.speechStoppedAt);
      }
    } else if (kind === "input_audio_buffer.committed") {
      this.onCommitted(event, now);
    } else if (kind === "conversation.item.input_audio_transcription.completed") {
      this.out.emit({
        kind: "transcript",
        role: "user",
        item_id: id(event.item_id),
        text: id(event.transcript) || "",
        final: true,
      });
    } else if (kind === "conversation.item.input_audio_transcription.delta") {
      // live text while the person still speaks (B33); the completed event replaces it
      this.out.emit({
        kind: "transcript",
        role: "user",
        item_id: id(event.item_id),
        text: id(event.delta) || "",
        final: false,
      });
    } else if (kind === "conversation.item.input_audio_transcription.failed") {
      this.out.emit({
        kind: "notice",
        level: "warning",
        code: "transcription_failed",
        message: `no transcript for ${id(event.item_id) ?? "None"}`,
      });
    } else if (kind === "response.created") {
      const responseId = id(object(event.response).id);
      if (responseId !== null) this.onResponseCreated(responseId);
    } else if (kind === "response.output_audio.delta") {
      this.onAudioDelta(event);
    } else if (kind === "response.output_audio.done") {
      const playback = this.playbackOf(event.response_id);
      if (playback !== null) playback.fire("finish");
    } else if (
      kind === "response.output_audio_transcript.delta" ||
      kind === "response.output_text.delta"
    ) {
      this.assistantText(event, id(event.delta) || "", false);
    } else if (kind === "response.output_audio_transcript.done") {
      this.assistantText(event, id(event.transcript) || "", true);
    } else if (kind === "response.output_text.done") {
      this.assistantText(event, id(event.text) || "", true);
    } else if (kind === "response.done") {
      this.onResponseDone(object(event.response));
    } else if (kind === "output_audio_buffer.cleared") {
      this.interrupt(id(event.response_id));
    } else if (kind === "output_audio_buffer.started" && this.on_tracks) {
      const responseId = id(event.response_id);
      if (responseId !== null) this.onTrackStarted(responseId, id(event.item_id), now);
    } else if (kind === "output_audio_buffer.stopped" && this.on_tracks) {
      const responseId = id(event.response_id);
      if (responseId !== null) this.onTrackStopped(responseId);
    }
  }

  onError(error) {
    const eventId = id(error.event_id);
    const code = id(error.code) || "error";
    const message = id(error.message) || "";
    if (this.linkIs("reconnecting") && this.resumeRefusals.has(code)) {
      this.link.fire("refused", { why: code });
      this.loseIfLost();
      return;
    }
    if (
      this.connection.state === "handshaking" &&
      (eventId === null || eventId === this.connection.update_event_id)
    ) {
      this.out.emit({ kind: "notice", level: "error", code, message });
      this.tearDown("refused", `handshake_refused:${code}`);
      return;
    }
    const hold = eventId !== null ? this.pending_commits.get(eventId) : undefined;
    if (hold !== undefined) {
      this.pending_commits.delete(eventId);
      hold.fire("rejected", { code, message });
      return;
    }
    this.out.emit({ kind: "notice", level: "error", code, message });
  }

  onCommitted(event, now) {
    const clientEventId = id(event.client_event_id);
    const noResponse = event.no_response === true;
    const itemId = id(event.item_id);
    if (clientEventId !== null) {
      const hold = this.pending_commits.get(clientEventId);
      if (hold !== undefined) {
        this.pending_commits.delete(clientEventId);
        hold.item_id = itemId;
        hold.fire(noResponse ? "committed_no_response" : "committed");
      }
    } else if (!noResponse) {
      this.holdCounter += 1;
      const hold = new Hold(this.rules.client_hold, this.out, `hold_${this.holdCounter}`);
      hold.item_id = itemId;
      if (itemId !== null && this.speechStoppedAt.has(itemId)) {
        hold.ended_ms = this.speechStoppedAt.get(itemId);
        this.speechStoppedAt.delete(itemId);
      } else {
        hold.ended_ms = now;
      }
      this.holds.push(hold);
      hold.fire("server_commit");
      this.restartWatchdog = true;
    }
  }

  onResponseCreated(responseId) {
    const ends = [];
    for (const hold of this.holds) {
      if (hold.state === "acknowledged") {
        hold.response_id = responseId;
        hold.fire("answer");
        if (hold.ended_ms !== null) ends.push(hold.ended_ms);
      }
    }
    if (ends.length) {
      this.turnEnd.set(responseId, Math.min(...ends));
      this.trim(this.turnEnd);
    }
  }

  onAudioDelta(event) {
    const responseId = id(event.response_id);
    const audio = id(event.delta) || "";
    if (responseId === null) return;
    const audioMs = Math.floor(base64Bytes(audio) / 2) / (this.constants.playback_rate_hz / 1000);
    let playback = this.playbacks.get(responseId);
    if (playback === undefined) playback = this.openPlayback(responseId, id(event.item_id));
    playback.fire("audio", { audio, audio_ms: audioMs });
  }

  openPlayback(responseId, itemId) {
    const playback = new ClientPlayback(
      this.rules.client_playback,
      this.out,
      responseId,
      itemId,
      this.on_tracks,
    );
    this.playbacks.set(responseId, playback);
    return playback;
  }

  // output_audio_buffer.started on a call: the server began playing the reply
  onTrackStarted(responseId, itemId, now) {
    if (!this.playbacks.has(responseId)) this.openPlayback(responseId, itemId);
    this.gate.fire("started", { response_id: responseId });
    this.playback_started_at(responseId, now);
  }

  // output_audio_buffer.stopped on a call: the reply's last sample went out
  onTrackStopped(responseId) {
    const playback = this.playbacks.get(responseId);
    if (playback === undefined) return;
    if (playback.accepts("finish")) playback.fire("finish");
    if (playback.accepts("drained")) playback.fire("drained", { played_ms: 0 });
  }

  onResponseDone(response) {
    const responseId = id(response.id);
    const status = response.status;
    if (responseId === null) return;
    const playback = this.playbacks.get(responseId);
    if (playback !== undefined) {
      if (status === "cancelled") this.clearPlayback(playback);
      else playback.fire("finish");
    }
    for (const hold of this.holds) {
      if (hold.state === "answering" && hold.response_id === responseId) hold.fire("settle");
    }
    if (status === "failed") {
      const reason = id(object(response.status_details).reason);
      this.out.emit({
        kind: "notice",
        level: "error",
        code: "response_failed",
        message: `the reply failed (${reason || "no reason given"})`,
      });
    }
  }

  assistantText(event, text, final) {
    this.out.emit({
      kind: "transcript",
      role: "assistant",
      response_id: id(event.response_id),
      text,
      final,
    });
  }

  // --- helpers ------------------------------------------------------------------------

  interrupt(responseId) {
    for (const playback of this.playbacks.values()) {
      if (
        (responseId === null || responseId === playback.response_id) &&
        this.states.livePlayback.has(playback.state)
      ) {
        this.clearPlayback(playback);
      }
    }
    for (const hold of this.holds) {
      if (hold.state === "answering" && (responseId === null || responseId === hold.response_id)) {
        hold.fire("interrupt");
      }
    }
  }

  // clear `playback`; on a call a live reply is cut at the gate too
  clearPlayback(playback) {
    const live = this.states.livePlayback.has(playback.state);
    playback.fire("clear");
    if (this.on_tracks && live) this.gate.fire("cut", { response_id: playback.response_id });
  }

  report(responseId, trigger, playedMs, now) {
    const playback = this.playbacks.get(responseId);
    if (playback !== undefined && this.connection.state !== "closed" && playback.accepts(trigger)) {
      playback.fire(trigger, { played_ms: playedMs });
    }
    return this.finish(now);
  }

  tearDown(trigger, reason) {
    this.connection.fire(trigger, { reason });
    for (const playback of this.playbacks.values()) {
      if (this.states.livePlayback.has(playback.state)) this.clearPlayback(playback);
    }
    this.handshakeDeadline = null;
    this.out.discard_held();
  }

  // --- resume (B42) -------------------------------------------------------------------

  linkIs(state) {
    return this.connection.state === "resuming" && this.link.state === state;
  }

  drop(now, jitter) {
    this.connection.fire("drop");
    this.link.fire("drop", { now_ms: now, jitter });
    this.out.hold_sends();
    this.probeMs = null;
    const hold = this.liveHold();
    if (hold !== null) {
      if (hold.state === "recording") this.clearOnResume = true;
      hold.fire("cut");
    }
    this.user_speaking = false; // the server's VAD verdicts of the drop come in the replay
  }

  onResumed(now) {
    if (!this.linkIs("reconnecting")) return;
    this.link.fire("resumed", { now_ms: now });
    this.connection.fire("resumed");
    this.out.release_sends();
    if (this.clearOnResume) {
      this.clearOnResume = false;
      this.out.send({ type: "input_audio_buffer.clear" });
    }
  }

  // when a quiet, ready, resumable link is probed, or once probed without an answer dropped
  linkDeadline() {
    if (!(this.ready() && this.link.resumable()) || this.heardMs === null) return null;
    if (this.probeMs !== null) return this.probeMs + this.constants.link_probe_timeout_ms;
    if (this.sentMs === null || this.sentMs < this.heardMs) return null;
    return this.heardMs + this.constants.link_quiet_ms;
  }

  loseIfLost() {
    if (this.link.state === "lost") this.tearDown("lost", "resume_lost");
  }

  playbackOf(responseId) {
    const key = id(responseId);
    return key !== null ? (this.playbacks.get(key) ?? null) : null;
  }

  ready() {
    return this.connection.state === "ready";
  }

  liveHold() {
    for (const hold of this.holds) if (this.states.liveHold.has(hold.state)) return hold;
    return null;
  }

  audioFlowing() {
    if (!this.ready() || this.muted) return false;
    if (this.mode === "vad") return true;
    const hold = this.liveHold();
    return hold !== null && this.states.uploadingHold.has(hold.state);
  }

  due(deadline, now) {
    return deadline !== null && now >= deadline;
  }

  trim(table) {
    while (table.size > this.constants.fence_memory) table.delete(table.keys().next().value);
  }

  couple(now) {
    const camera = this.camera;
    const wantCamera = this.camera_wanted && this.ready();
    const flowing = this.audioFlowing();
    if (wantCamera && camera.state === "off") {
      camera.fire("enable", { audio_flowing: flowing });
      if (!this.on_tracks) this.nextCapture = now + this.camera_interval_ms; // else a video track
    } else if (!wantCamera && camera.state !== "off") {
      camera.fire("disable");
      this.nextCapture = null;
    } else if (flowing && camera.state === "standalone") {
      camera.fire("audio_starts");
    } else if (!flowing && camera.state === "riding") {
      camera.fire("audio_stops");
    }

    const awaiting =
      this.connection.state !== "closed" &&
      this.holds.some((hold) => this.states.awaitingReply.has(hold.state));
    const watchdog = this.watchdog;
    if (watchdog.state !== "expired") {
      if (awaiting && (watchdog.state === "disarmed" || this.restartWatchdog)) {
        watchdog.fire("arm", { now_ms: now });
      } else if (!awaiting && watchdog.state === "armed") {
        watchdog.fire("disarm");
      }
    }
    this.restartWatchdog = false;
    if (this.on_tracks && flowing !== this.microphone_sending) {
      // the track is sent only while audio flows (see core/client_protocol/protocol.py)
      this.microphone_sending = flowing;
      this.out.emit({ kind: "microphone", sending: flowing });
    }
  }

  prune() {
    const finished = this.holds.filter((hold) => this.states.finishedHold.has(hold.state));
    const dropHolds = finished.slice(0, Math.max(0, finished.length - this.constants.finished_hold_memory));
    this.holds = this.holds.filter((hold) => !dropHolds.includes(hold));
    const done = [...this.playbacks.values()].filter((p) => !this.states.livePlayback.has(p.state));
    for (const playback of done.slice(0, Math.max(0, done.length - this.constants.fence_memory))) {
      this.playbacks.delete(playback.response_id);
    }
  }

  finish(now) {
    this.couple(now);
    this.prune();
    const outputs = this.out.drain();
    if (outputs.some((output) => output.kind === "send")) this.sentMs = now;
    return outputs;
  }
}
