// The joyduplex web UI: wires the DOM, the transport, the microphone and playback
// AudioWorklets and the camera to ClientProtocol. It holds no turn logic of its own: every
// decision (what to send, when to clear or drain playback, the watchdog, the camera
// cadence) is an output of ClientProtocol, which runs the spec tables (web/spec/*.json).
//
// Transports (the "Transport" selector, or `?transport=websocket`): WebRTC by default, a
// call placed with `POST /v1/realtime/calls` whose `oai-events` data channel carries the
// events (its open is the socket's open, its messages the server's text, its close the
// disconnect) and whose tracks carry the media: the microphone and the camera go out on
// the peer connection's audio and video tracks, the reply comes back on its audio track,
// played through WebAudio behind a gate that ClientProtocol's `mute_reply` / `unmute_reply`
// close and open (ClientProtocol in `media: "tracks"`: no appends, no
// camera captures, no local playback). Or the websocket (`/v1/realtime`): appends from
// the capture worklet, camera JPEGs, reply deltas into the playback worklet.
//
// window.joyduplex exposes the protocol snapshot and measurements (used by the browser
// tests): per-turn time to first audio, and per interrupt the time from the interrupt
// event to the reply's audio going silent: on the websocket the playback worklet's report
// that it dropped the response's audio; on WebRTC a level meter on the remote track
// (js/level_worklet.js) reports when the track went quiet.
//
// Transcripts: the user's line shows live text while they speak (transcription deltas),
// replaced by the final transcript. An assistant line keeps the text it streamed: when
// its playback is cut (barge-in, stop), the part that was played stays as it is and the
// rest is marked as not heard, from the played position the playback worklet reports
// and the audio length of each transcript piece; a final transcript that is shorter or
// empty (a server that only knew part of what was heard) never erases the streamed text.
//
// Resume (B42, websocket): the session is resumable (js/websocket_link.js); when the socket
// drops, the page shows "reconnecting…", ClientProtocol pauses push-to-talk, the microphone
// and the camera and asks for new sockets on a bounded backoff (this page draws the jitter),
// and the replay finishes what the drop interrupted; a lost session is a notice, and the
// next Connect starts a new one.
//
// Labels: the indicators show plain words (js/labels.js); each keeps the machine's state
// name in its `data-state`. The note on spoken languages is what `session.created` says
// the server's speech recognition knows.

import { hangUpCall, IceWatch } from "./call_link.js";
import { ClientProtocol } from "./client_protocol.js";
import {
  cameraPausedLabel,
  cameraTrackLabel,
  labelOf,
  languageNote,
  micLabel,
  replyLabel,
  stateLabels,
  transportLabel,
} from "./labels.js";
import { loadSpec } from "./spec_loader.js";
import { TurnTimeline, inboundAudioOf, jitterBetween, timelineText } from "./turn_timeline.js";
import { WebsocketLink } from "./websocket_link.js";

const $ = (id) => document.getElementById(id);
const ui = {
  transport: $("transport"),
  transportState: $("transport-state"),
  remoteAudio: $("remote-audio"),
  mode: $("mode"),
  turn: $("turn"),
  connect: $("connect"),
  mute: $("mute"),
  camera: $("camera"),
  stop: $("stop"),
  talk: $("talk"),
  connection: $("connection"),
  watchdog: $("watchdog"),
  speaking: $("speaking"),
  latency: $("latency"),
  breakdown: $("breakdown"),
  preview: $("preview"),
  frame: $("frame"),
  cameraState: $("camera-state"),
  transcript: $("transcript"),
  notices: $("notices"),
  languages: $("languages"),
};

const params = new URLSearchParams(location.search);
if (params.get("mode")) ui.mode.value = params.get("mode");
if (params.get("turn")) ui.turn.value = params.get("turn");
if (params.get("transport")) ui.transport.value = params.get("transport");

const metrics = {
  transport: null, // the transport of the latest call: "webrtc" or "websocket"
  // per turn: firstAudioMs from the turn's end to the playback worklet's start (websocket)
  // or to output_audio_buffer.started (WebRTC); on WebRTC also firstAudibleMs, to the
  // remote track's first audible quantum in the page
  latencies: [], // {responseId, firstAudioMs, firstAudibleMs?, audibleAt?}
  // per interrupt: eventAt (the interrupt event arrived), silentAt (websocket: the playback
  // worklet dropped the audio, from its render clock; WebRTC: the remote track's level went
  // under the meter's threshold and stayed there), reportedAt (its report reached this thread)
  interrupts: [], // {transport, responseId, trigger, eventAt, silentAt, silenceMs, reportMs, playedMs, droppedMs}
  // per turn, where its time went (js/turn_timeline.js): {transport, kind, marks, stats}
  turns: [],
  transcripts: [], // {role, id, text, final, at}
  heard: [], // {responseId, playedMs, heardChars, totalChars}: an assistant line marked
  notices: [], // {level, code, message}
  ice: [], // {state, at}: the WebRTC call's ICE connection states, in order
  sent: [], // {type, at}: client events, in order
  received: [], // {type, at}: server events, in order, with their arrival (performance.now)
  started: [], // response ids whose audio became audible
  // WebRTC: each reply-gate output the page carried out on its gain node, in order
  replyGate: [], // {kind: "mute_reply" | "unmute_reply", responseId, at}
  drained: [], // response ids played out
  fenced: 0,
  outputLatencyMs: null,
  // resume (B42): each `link` output {state, at, attempts, downMs?, retryInMs?}, each
  // socket opened to resume {attempt, at}, and the replayed events skipped as applied
  links: [],
  reconnects: [],
  duplicates: 0,
};

const spec = await loadSpec();
const labels = stateLabels(spec.constants);
let call = null; // the active call, or null
let muted = false;
let cameraOn = false;

/** How long the remote track must stay under the level meter's threshold to count as
 * silent (a dip between words is shorter), and that threshold (peak, full scale 1). */
const QUIET_MS = 120;
const QUIET_PEAK = 0.004;
/** WebRTC: how long ICE may stay disconnected before the call counts as dropped (B42). */
const ICE_GRACE_MS = 3000;
/** The longest a push-to-talk release waits for the capture worklet's partial chunk (it
 * answers at its next render quantum, a few ms; a suspended context never does). */
const FLUSH_WAIT_MS = 50;

window.joyduplex = {
  metrics,
  snapshot: () => (call ? call.protocol.snapshot() : null),
  constants: spec.constants,
  transport: () => call?.transport ?? null,
  // an embedder that has functions answers the model's calls here (B39): the output goes
  // back and, once the call's response is done and all its calls answered, the follow-up
  answerCall: (callId, output) => {
    if (call) call.run(call.protocol.function_output(callId, String(output), now()));
  },
  quietMs: QUIET_MS,
  quietPeak: QUIET_PEAK,
  // when the microphone's level meter last heard a voiced chunk (tools/browser_latency.py
  // releases push-to-talk just after a sentence ends)
  lastVoicedAt: () => call?.timeline.lastVoicedEnd ?? null,
};

function now() {
  return performance.now();
}

/** A time of `context`'s audio clock (seconds) as performance.now() (ms), never after
 * `fallback` (when it became known here; also the answer without a timestamp). */
function contextTimeAt(context, contextTime, fallback) {
  const stamp = context.getOutputTimestamp();
  if (stamp.performanceTime === undefined || stamp.contextTime === undefined) return fallback;
  return Math.min(fallback, stamp.performanceTime + (contextTime - stamp.contextTime) * 1000);
}

function base64FromBytes(bytes) {
  let binary = "";
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(binary);
}

function bytesFromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const REFUSED_MESSAGE =
  "the server refused the connection: it needs an API key (open this page as /#key=<key>) " +
  "or does not allow this page's origin (allowed_origins), or it is not reachable";

/** The websocket subprotocols to offer: `realtime`, and the API key from the page's
 * fragment (`#key=...`: never sent to a server in a URL, so never in a log). */
function offeredProtocols() {
  const key = fragmentKey();
  return key ? ["realtime", `openai-insecure-api-key.${key}`] : ["realtime"];
}

/** The API key from the page's fragment (`#key=...`), or null. */
function fragmentKey() {
  return new URLSearchParams(location.hash.slice(1)).get("key");
}

/** Say which languages the server's speech recognition knows (`session.created`). */
function showLanguages(capabilities) {
  const note = languageNote(capabilities);
  ui.languages.dataset.languages = note.languages;
  ui.languages.textContent = note.text;
}

function notice(level, code, message) {
  metrics.notices.push({ level, code, message });
  const element = document.createElement("div");
  element.className = `notice ${level}`;
  element.textContent = `${code}: ${message}`;
  ui.notices.prepend(element);
  while (ui.notices.childElementCount > 6) ui.notices.lastElementChild.remove();
}

// per assistant reply: its text so far, each piece's audio end (ms), and how much of the
// text was heard once its playback was cut (null: not cut)
const replies = new Map(); // responseId -> {text, audioMs, marks: [[text, endMs]], heard}

function replyOf(responseId) {
  let reply = replies.get(responseId);
  if (!reply) {
    reply = { text: "", audioMs: 0, marks: [], heard: null };
    replies.set(responseId, reply);
    while (replies.size > 64) replies.delete(replies.keys().next().value);
  }
  return reply;
}

/** The characters spoken by the first `playedMs` of a reply's audio: whole pieces, and of
 * a partly played piece its proportional share (as the server's played prefix). */
function heardChars(marks, playedMs) {
  let chars = 0;
  let start = 0;
  for (const [text, end] of marks) {
    if (playedMs >= end) {
      chars += text.length;
    } else {
      if (playedMs > start && end > start) {
        chars += Math.floor((text.length * (playedMs - start)) / (end - start));
      }
      break;
    }
    start = end;
  }
  return chars;
}

function lineOf(role, id) {
  const key = `${role}:${id}`;
  let line = ui.transcript.querySelector(`li[data-key="${CSS.escape(key)}"]`);
  if (!line) {
    line = document.createElement("li");
    line.className = role;
    line.dataset.key = key;
    line.dataset.role = role;
    line.innerHTML = `<span class="who"></span><span class="text"></span>`;
    line.querySelector(".who").textContent = role === "user" ? "You" : "Assistant";
    ui.transcript.append(line);
  }
  return line;
}

function renderReply(responseId) {
  const reply = replyOf(responseId);
  const line = lineOf("assistant", responseId);
  const span = line.querySelector(".text");
  if (reply.heard === null || reply.heard >= reply.text.length) {
    span.textContent = reply.text;
    return line;
  }
  const rest = document.createElement("span");
  rest.className = "unheard";
  rest.title = "not played: cut off";
  rest.textContent = reply.text.slice(reply.heard);
  span.replaceChildren(document.createTextNode(reply.text.slice(0, reply.heard)), rest);
  line.dataset.heard = String(reply.heard);
  return line;
}

function transcriptLine(role, id, text, final) {
  metrics.transcripts.push({ role, id, text, final, at: now() });
  let line;
  if (role === "user") {
    line = lineOf(role, id);
    const span = line.querySelector(".text");
    // live deltas grow the line; the final transcript is the item's text
    span.textContent = final ? text : span.textContent + text;
  } else {
    const reply = replyOf(id);
    if (!final) {
      reply.text += text;
      reply.marks.push([text, reply.audioMs]);
    } else if (text.length >= reply.text.length) {
      reply.text = text;
    } else if (reply.heard === null && text && reply.text.startsWith(text)) {
      reply.heard = text.length; // the server cut it to what was played
    }
    line = renderReply(id);
  }
  if (final) line.dataset.final = "true";
  line.scrollIntoView({ block: "nearest" });
}

/**
 * A function call the model made (B38) and, once the conversation takes it, its output
 * (B39): one transcript line per call, keyed by its call id. This page answers no calls
 * (it has no functions); a client that does (the Python `DuplexClient`, a sideband)
 * makes the output appear here.
 */
function callLine(callId, name, args, status) {
  const line = lineOf("function", callId);
  line.querySelector(".who").textContent = "Function";
  const span = line.querySelector(".text");
  span.textContent = `${name}(${args})${status === "incomplete" ? " (cut off)" : ""}`;
  line.dataset.status = status;
  line.scrollIntoView({ block: "nearest" });
}

function callOutputLine(callId, output) {
  const line = lineOf("function", callId);
  let result = line.querySelector(".output");
  if (!result) {
    result = document.createElement("span");
    result.className = "output";
    line.append(result);
  }
  result.textContent = ` -> ${output}`;
  line.dataset.answered = "true";
}

/** A reply's playback was cut after `playedMs`: mark the text that was not heard. */
function markHeard(responseId, playedMs) {
  const reply = replies.get(responseId);
  if (!reply || reply.marks.length === 0) return;
  const heard = Math.min(heardChars(reply.marks, playedMs), reply.text.length);
  reply.heard = reply.heard === null ? heard : Math.min(reply.heard, heard);
  metrics.heard.push({ responseId, playedMs, heardChars: reply.heard, totalChars: reply.text.length });
  renderReply(responseId);
}

// --- the call -------------------------------------------------------------------------

class Call {
  constructor(mode, turnDetection, transport) {
    this.mode = mode;
    this.transport = transport === "websocket" ? "websocket" : "webrtc";
    this.onTracks = this.transport === "webrtc";
    this.protocol = new ClientProtocol(spec, mode, {
      muted,
      camera: cameraOn,
      turn_detection: turnDetection,
      media: this.onTracks ? "tracks" : "events",
    });
    this.opened = false;
    this.meterQuiet = true; // WebRTC: the remote track is silent now (per the level meter)
    this.trackStarted = null; // WebRTC: {responseId, at} of the last output_audio_buffer.started
    this.timer = null;
    this.closed = false;
    this.pendingInterrupts = new Map(); // responseId -> metric entry
    this.lastServerType = null;
    // WebRTC (B42): ICE stuck in `disconnected` is a dropped call, resumed with a new one
    this.iceWatch = new IceWatch(ICE_GRACE_MS, (pc) => {
      if (this.pc === pc && !this.closed) this.callDropped(pc, "ice_disconnected");
    });
    this.timeline = new TurnTimeline(this.transport, metrics.turns);
    this.flushing = null; // a release waiting for the capture worklet's partial chunk
  }

  async start() {
    const constants = spec.constants;
    metrics.transport = this.transport;
    this.captureContext = new AudioContext();
    const modules = [
      this.captureContext.audioWorklet.addModule(new URL("./capture_worklet.js", import.meta.url)),
    ];
    if (this.onTracks) {
      // the level meter of the remote track lives in the capture context (48 kHz)
      modules.push(
        this.captureContext.audioWorklet.addModule(new URL("./level_worklet.js", import.meta.url)),
      );
    } else {
      this.playbackContext = new AudioContext({ sampleRate: constants.playback_rate_hz });
      modules.push(
        this.playbackContext.audioWorklet.addModule(new URL("./playback_worklet.js", import.meta.url)),
        // the output level meter: what the playback worklet renders, as on a call's track
        this.playbackContext.audioWorklet.addModule(new URL("./level_worklet.js", import.meta.url)),
      );
    }
    await Promise.all(modules);
    await Promise.all([this.captureContext.resume(), this.playbackContext?.resume()]);
    const output = this.playbackContext ?? this.captureContext;
    metrics.outputLatencyMs = ((output.baseLatency || 0) + (output.outputLatency || 0)) * 1000;

    if (!this.onTracks) {
      this.playback = new AudioWorkletNode(this.playbackContext, "joyduplex-playback", {
        numberOfInputs: 0,
        outputChannelCount: [1],
        processorOptions: { initialBufferMs: constants.initial_playback_buffer_ms },
      });
      this.playback.connect(this.playbackContext.destination);
      this.playback.port.onmessage = (event) => this.onPlayback(event.data);
      this.playbackMeter = this.levelMeter(this.playbackContext, this.playback, (message) =>
        this.onPlaybackLevel(message),
      );
    }

    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: {
        channelCount: 1,
        echoCancellation: true,
        noiseSuppression: true,
        autoGainControl: true,
      },
    });
    const source = this.captureContext.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(this.captureContext, "joyduplex-capture", {
      numberOfOutputs: 0,
      processorOptions: { targetRate: constants.capture_rate_hz, chunkMs: constants.mic_chunk_ms },
    });
    source.connect(this.capture);
    this.capture.port.onmessage = (event) => this.onMicChunk(event.data);
    this.micTrack = this.stream.getAudioTracks()[0];

    if (this.onTracks) await this.placeCall("resumable=1");
    else this.openSocket();
    this.render();
  }

  openSocket() {
    this.socket = new WebsocketLink(offeredProtocols(), {
      open: () => this.run(this.protocol.connected(now())),
      text: (data) => this.onServerText(data),
      close: (event, opened) => {
        // a resume attempt that fails is the protocol's to retry (the network is down)
        const resuming = this.protocol.snapshot().connection === "resuming";
        // The server checks the key and the page's origin before the upgrade and answers a
        // refusal with HTTP 401 / 403, which a browser only reports as a close before open.
        if (!opened && !resuming) notice("error", "connection_refused", REFUSED_MESSAGE);
        const reason = opened ? `socket_closed:${event.code}` : "connection_refused";
        this.run(this.protocol.disconnected(now(), reason, Math.random()));
      },
    });
    this.socket.start();
  }

  /** WebRTC: the microphone on an audio track (sendrecv: the reply comes back on it), a
   * video transceiver the camera's track is put on and taken off (replaceTrack, no new
   * offer), the `oai-events` data channel; the offer goes to POST /v1/realtime/calls once
   * ICE gathering completed (the server takes no trickled candidates). */
  async placeCall(query) {
    const pc = new RTCPeerConnection();
    this.pc = pc;
    const current = () => this.pc === pc; // a call replaced by a resume reports nothing
    // the track goes on only when the protocol says audio flows (its `microphone` output)
    const audio = pc.addTransceiver("audio", { direction: "sendrecv", streams: [this.stream] });
    this.micSender = audio.sender;
    // the reply's jitter buffer: no added target (0: as low as the browser's own adaptation
    // goes; Chromium's NetEq keeps 40 ms and up, sized from the packets' arrival jitter)
    if ("jitterBufferTarget" in audio.receiver) audio.receiver.jitterBufferTarget = 0;
    else if ("playoutDelayHint" in audio.receiver) audio.receiver.playoutDelayHint = 0;
    this.videoSender = pc.addTransceiver("video", { direction: "sendonly" }).sender;
    pc.ontrack = (event) => {
      if (event.track.kind === "audio") this.listen(event.streams[0] ?? new MediaStream([event.track]));
    };
    pc.oniceconnectionstatechange = () => {
      if (!current()) return;
      metrics.ice.push({ state: pc.iceConnectionState, at: now() });
      this.iceWatch.observe(pc);
      this.render();
    };
    pc.onconnectionstatechange = () => {
      if (current() && pc.connectionState === "failed" && !this.closed) this.callDropped(pc, "ice_failed");
    };
    const channel = pc.createDataChannel("oai-events");
    this.channel = channel;
    channel.onopen = () => {
      if (!current()) return;
      this.opened = true;
      this.run(this.protocol.connected(now()));
    };
    channel.onmessage = (event) => {
      if (current()) this.onServerText(event.data);
    };
    channel.onclose = () => {
      if (current() && !this.closed) this.callDropped(pc, "channel_closed");
    };

    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((resolve) => {
      if (pc.iceGatheringState === "complete") return resolve();
      const timer = setTimeout(resolve, 5000); // send what was gathered so far
      pc.addEventListener("icegatheringstatechange", () => {
        if (pc.iceGatheringState === "complete") {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    if (this.closed) return;
    const headers = { "Content-Type": "application/sdp" };
    const key = fragmentKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    let response;
    try {
      response = await fetch(`/v1/realtime/calls?${query}`, {
        method: "POST",
        headers,
        body: pc.localDescription.sdp,
      });
    } catch (error) {
      if (!current()) return;
      // a resume attempt that cannot reach the server is the protocol's to retry
      if (!this.resuming()) notice("error", "call_unreachable", `cannot place the call: ${error}`);
      this.callDropped(pc, "connection_refused");
      return;
    }
    const body = await response.text();
    if (!current()) return;
    if (response.status !== 201 && this.resuming()) {
      this.callDropped(pc, `call_refused:${response.status}`);
      return;
    }
    if (response.status !== 201) {
      // the body is the wire's `error` object (an `error` event or the object itself)
      let error = {};
      try {
        const parsed = JSON.parse(body);
        error = parsed?.error ?? parsed ?? {};
      } catch {
        error = {};
      }
      notice(
        "error",
        typeof error.code === "string" ? error.code : `http_${response.status}`,
        typeof error.message === "string" ? error.message : `the server answered ${response.status}`,
      );
      this.run(this.protocol.disconnected(now(), `call_refused:${response.status}`));
      return;
    }
    this.callId = (response.headers.get("Location") ?? "").split("/").pop() || null;
    if (this.closed) return;
    await pc.setRemoteDescription({ type: "answer", sdp: body });
  }

  /** WebRTC (B42): the link's state says whether a failure is a drop to resume. */
  resuming() {
    return this.protocol.snapshot().connection === "resuming";
  }

  /** WebRTC: the call `pc` failed (its data channel closed, ICE failed, or no answer):
   * close it, and let the protocol resume the session with a new call, or end it. */
  callDropped(pc, reason) {
    this.iceWatch.stop();
    if (!this.resuming() && !this.protocol.snapshot().link.resumable && reason === "ice_failed") {
      notice("error", "ice_failed", "the call's connection failed (ICE)");
    }
    if (this.pc === pc) this.pc = null;
    pc.close();
    this.run(this.protocol.disconnected(now(), reason, Math.random()));
  }

  /** WebRTC (B42): a new call that resumes `sessionId` (ClientProtocol's `reconnect`); its
   * data channel's open sends session.resume, the camera's track goes on its video
   * transceiver, the microphone's when the protocol says audio flows again. */
  async resumeCall(sessionId) {
    if (this.pc) {
      const old = this.pc;
      this.pc = null;
      old.close();
    }
    try {
      await this.placeCall(`resume=1&session_id=${encodeURIComponent(sessionId)}`);
      if (this.videoSender && this.video) await this.videoSender.replaceTrack(this.video.getVideoTracks()[0]);
    } catch (error) {
      notice("warning", "resume_call", String(error));
    }
  }

  /** WebRTC: play the remote audio track through a GainNode, the reply gate that
   * ClientProtocol's `mute_reply` / `unmute_reply` close and open (a barge-in silences
   * the track here at once), and measure its level after the gate, where the person
   * hears it. The muted <audio> element only keeps Chromium feeding the remote
   * track to WebAudio (it renders nothing there without a media element). */
  listen(remote) {
    if (this.remote === remote) return;
    this.remote = remote;
    ui.remoteAudio.srcObject = remote;
    ui.remoteAudio.muted = true;
    ui.remoteAudio.play().catch(() => {});
    const source = this.captureContext.createMediaStreamSource(remote);
    const gain = new GainNode(this.captureContext);
    source.connect(gain);
    gain.connect(this.captureContext.destination);
    this.replyGain = gain.gain;
    this.meter = this.levelMeter(this.captureContext, gain, (message) => this.onLevel(message));
  }

  /** A level meter (js/level_worklet.js) on `source` in `context`. */
  levelMeter(context, source, onMessage) {
    const meter = new AudioWorkletNode(context, "joyduplex-level", {
      numberOfOutputs: 0,
      processorOptions: { threshold: QUIET_PEAK, quietMs: QUIET_MS },
    });
    source.connect(meter);
    meter.port.onmessage = (event) => onMessage(event.data);
    return meter;
  }

  /** Websocket: the playback worklet's output became audible or quiet (the breakdown's
   * "audible"; interrupts are timed by the worklet's own drop, as before). */
  onPlaybackLevel(message) {
    this.meterQuiet = message.type === "quiet";
    if (message.type === "audible") {
      this.heard(contextTimeAt(this.playbackContext, message.at, now()));
    }
  }

  /** The output level meter heard sound at `at`: the latest turn's reply is audible. */
  heard(at) {
    const turn = this.timeline.heard(at);
    if (!turn) return;
    this.showBreakdown(turn);
    if (this.onTracks) this.turnStats(turn, "after");
  }

  showBreakdown(turn) {
    ui.breakdown.textContent = timelineText(turn);
    // the badge: the release (or speech_stopped, as before) to audible, on the line's marks
    const start = turn.marks.release ?? turn.marks.speechStopped;
    if (turn.marks.audible !== undefined && start !== undefined) {
      ui.latency.textContent = `first audio: ${Math.round(turn.marks.audible - start)} ms`;
    }
    ui.breakdown.dataset.kind = turn.kind;
    ui.breakdown.dataset.transport = turn.transport;
  }

  /** WebRTC: what getStats() says of the reply's inbound audio, at a turn's start
   * (`before`) and once it is audible (`after`: the jitter buffer between the two). */
  turnStats(turn, when) {
    this.pc
      ?.getStats()
      .then((report) => {
        const snapshot = inboundAudioOf(report);
        if (when === "before") {
          turn.statsBefore = snapshot;
        } else {
          turn.stats = jitterBetween(turn.statsBefore, snapshot);
          this.showBreakdown(turn);
        }
      })
      .catch(() => {});
  }

  onLevel(message) {
    const at = now();
    if (message.type === "audible") {
      this.meterQuiet = false;
      this.heard(contextTimeAt(this.captureContext, message.at, at));
      const started = this.trackStarted;
      if (started && !started.audibleAt) {
        // the first audible sound after the server said it started the reply
        started.audibleAt = Math.max(started.at, contextTimeAt(this.captureContext, message.at, at));
        this.reportAudible(started);
      }
    } else if (message.type === "quiet") {
      this.meterQuiet = true;
      const silentAt = contextTimeAt(this.captureContext, message.at, at);
      for (const entry of this.pendingInterrupts.values()) {
        this.silenced(entry, Math.max(entry.eventAt, silentAt), at);
      }
    }
  }

  reportAudible(started) {
    metrics.started.push(started.responseId);
    const latency = metrics.latencies.find((l) => l.responseId === started.responseId);
    if (latency && latency.turnEndAt !== undefined) {
      latency.audibleAt = started.audibleAt;
      latency.firstAudibleMs = started.audibleAt - latency.turnEndAt;
      ui.latency.textContent = `first audio: ${Math.round(latency.firstAudibleMs)} ms`;
    }
  }

  /** An interrupt's reply audio went silent at `silentAt` (known at `reportedAt`). */
  silenced(entry, silentAt, reportedAt) {
    this.pendingInterrupts.delete(entry.responseId);
    entry.silentAt = silentAt;
    entry.silenceMs = silentAt - entry.eventAt;
    entry.reportedAt = reportedAt;
    entry.reportMs = reportedAt - entry.eventAt;
    metrics.interrupts.push(entry);
  }

  onServerText(text) {
    const at = now();
    let event = null;
    try {
      event = JSON.parse(text);
    } catch {
      event = null;
    }
    const type = event?.type ?? null;
    metrics.received.push({ type, at });
    if (event) this.timelineReceived(event, at);
    if (type === "session.created") showLanguages(event.capabilities);
    if (this.onTracks && type === "output_audio_buffer.started") {
      this.trackStarted = { responseId: event.response_id, at };
      // already audible (its first packets beat the event): audible from the event on
      if (!this.meterQuiet) {
        this.trackStarted.audibleAt = at;
        queueMicrotask(() => this.reportAudible(this.trackStarted));
      }
    } else if (this.onTracks && type === "output_audio_buffer.stopped") {
      metrics.drained.push(event.response_id);
    }
    this.lastServerType = type;
    this.run(this.protocol.server_text(text, at), at);
    this.lastServerType = null;
  }

  /** The breakdown's view of a server event; a turn that starts here gets its stats. */
  timelineReceived(event, at) {
    const before = this.timeline.turns.at(-1);
    this.timeline.received(event, at);
    const turn = this.timeline.turns.at(-1);
    if (turn !== before && this.onTracks) this.turnStats(turn, "before");
    const type = event.type;
    if (this.onTracks && type === "output_audio_buffer.started" && !this.meterQuiet) {
      // the meter hears sound already (a packet beat the event): audible from the event on
      this.heard(at);
    }
  }

  onMicChunk(data) {
    const at = now();
    const level = Math.min(1, data.rms * 8);
    ui.speaking.style.setProperty("--level", level.toFixed(2));
    this.timeline.micLevel(data.rms, at);
    // on WebRTC the track carries the audio: the protocol only counts the samples
    if (data.samples > 0) {
      const audio = this.onTracks ? "" : base64FromBytes(new Uint8Array(data.pcm));
      this.run(this.protocol.mic_chunk(audio, data.samples, at));
    }
    if (data.flushed && this.flushing) {
      // the release's partial chunk went out (or there was none): now the commit
      this.timeline.lastAudioSent(now());
      this.finishRelease();
    }
  }

  /** Push-to-talk release: the capture worklet first posts the partial chunk it holds (at
   * most one chunk, sent at once instead of dropped), then the protocol commits. A
   * worklet that does not answer (a suspended context) delays the commit by at most
   * `FLUSH_WAIT_MS`. A release without a live hold commits nothing and flushes nothing. */
  release() {
    if (this.flushing) return;
    const liveHold = spec.tables.client_hold.groups.live;
    if (!this.protocol.snapshot().holds.some((h) => liveHold.includes(h.state))) {
      this.run(this.protocol.release(now()));
      return;
    }
    this.timeline.release(now());
    if (this.onTracks) this.turnStats(this.timeline.turns.at(-1), "before");
    this.flushing = setTimeout(() => this.finishRelease(), FLUSH_WAIT_MS);
    this.capture.port.postMessage({ type: "flush" });
  }

  finishRelease() {
    if (!this.flushing) return;
    clearTimeout(this.flushing);
    this.flushing = null;
    this.run(this.protocol.release(now()));
  }

  onPlayback(message) {
    const at = now();
    if (message.type === "playback-started") {
      metrics.started.push(message.responseId);
      this.run(this.protocol.playback_started(message.responseId, at));
    } else if (message.type === "playback-stopped") {
      const entry = this.pendingInterrupts.get(message.responseId);
      if (entry) {
        entry.playedMs = message.playedMs;
        entry.droppedMs = message.droppedMs;
        // when the audio thread dropped the audio: its next render quantum is silent
        this.silenced(entry, contextTimeAt(this.playbackContext, message.at, at), at);
      }
      markHeard(message.responseId, message.playedMs);
      this.run(this.protocol.playback_stopped(message.responseId, message.playedMs, at));
    } else if (message.type === "playback-drained") {
      metrics.drained.push(message.responseId);
      this.run(this.protocol.playback_drained(message.responseId, message.playedMs, at));
    }
  }

  async captureFrame() {
    const video = ui.preview;
    if (!this.video || video.readyState < 2 || !video.videoWidth) return;
    const side = spec.constants.camera_max_side_px;
    const scale = Math.min(1, side / Math.max(video.videoWidth, video.videoHeight));
    const canvas = ui.frame;
    canvas.width = Math.round(video.videoWidth * scale);
    canvas.height = Math.round(video.videoHeight * scale);
    canvas.getContext("2d").drawImage(video, 0, 0, canvas.width, canvas.height);
    const blob = await new Promise((resolve) =>
      canvas.toBlob(resolve, "image/jpeg", spec.constants.jpeg_quality),
    );
    if (!blob || this.closed) return;
    const jpeg = base64FromBytes(new Uint8Array(await blob.arrayBuffer()));
    this.run(this.protocol.camera_frame(jpeg, now()));
  }

  async setCamera(on) {
    if (on && !this.video) {
      try {
        this.video = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 } });
        ui.preview.srcObject = this.video;
        await ui.preview.play().catch(() => {});
      } catch (error) {
        notice("warning", "camera_unavailable", String(error));
        return;
      }
    } else if (!on && this.video) {
      for (const track of this.video.getTracks()) track.stop();
      this.video = null;
      ui.preview.srcObject = null;
    }
    // WebRTC: the camera's track on the call's video transceiver (null: camera off)
    if (this.videoSender) await this.videoSender.replaceTrack(this.video?.getVideoTracks()[0] ?? null);
    this.run(this.protocol.set_camera(on, now()));
  }

  /** Execute the protocol's outputs, in order. */
  run(outputs, eventAt = now()) {
    for (const output of outputs) {
      switch (output.kind) {
        case "send":
          metrics.sent.push({ type: output.event.type, at: eventAt });
          this.timeline.sent(output.event, eventAt);
          if (this.channel) {
            if (this.channel.readyState === "open") this.channel.send(JSON.stringify(output.event));
          } else {
            this.socket.send(JSON.stringify(output.event));
          }
          break;
        case "play": {
          const pcm = bytesFromBase64(output.audio).buffer;
          replyOf(output.response_id).audioMs += pcm.byteLength / 2 / (spec.constants.playback_rate_hz / 1000);
          this.playback.port.postMessage({ type: "audio", responseId: output.response_id, pcm }, [pcm]);
          break;
        }
        case "drain":
          this.playback.port.postMessage({ type: "drain", responseId: output.response_id });
          break;
        case "clear": {
          // WebRTC: the server clears its output buffer (barge-in, output_audio_buffer.clear)
          // and `mute_reply` silences the track; the level meter says when it went silent
          this.playback?.port.postMessage({ type: "clear", responseId: output.response_id });
          const entry = {
            transport: this.transport,
            responseId: output.response_id,
            trigger: this.lastServerType ?? "local",
            eventAt,
          };
          this.pendingInterrupts.set(output.response_id, entry);
          if (this.onTracks) {
            entry.playedMs = null; // the server knows what it sent
            entry.droppedMs = null;
            if (this.meterQuiet) this.silenced(entry, eventAt, eventAt); // already silent
          }
          break;
        }
        // WebRTC: ClientProtocol's reply gate (client_reply_gate): what the server sent of a
        // cut reply is still in flight and in the jitter buffer, so the track is silenced
        // here at once, as the websocket's worklet drops what it holds; the start of a
        // reply that was not cut opens it again
        case "mute_reply":
        case "unmute_reply":
          if (this.replyGain) this.replyGain.value = output.kind === "mute_reply" ? 0 : 1;
          metrics.replyGate.push({ kind: output.kind, responseId: output.response_id, at: eventAt });
          break;
        case "capture_frame":
          this.captureFrame().catch((error) => notice("warning", "camera_frame", String(error)));
          break;
        case "transcript":
          transcriptLine(
            output.role,
            output.role === "user" ? output.item_id : output.response_id,
            output.text,
            output.final,
          );
          break;
        case "function_call":
          callLine(output.call_id, output.name, output.arguments, output.status);
          break;
        case "function_output":
          callOutputLine(output.call_id, output.output);
          break;
        case "latency":
          metrics.latencies.push({
            responseId: output.response_id,
            firstAudioMs: output.first_audio_ms,
            turnEndAt: eventAt - output.first_audio_ms,
          });
          ui.latency.textContent = `first audio: ${Math.round(output.first_audio_ms)} ms`;
          break;
        case "notice":
          notice(output.level, output.code, output.message);
          break;
        case "microphone":
          // WebRTC: the microphone track is sent only while audio flows (no renegotiation)
          if (!this.pc) break; // dropped: the resumed call's sender gets the track
          this.micSender?.replaceTrack(output.sending ? this.micTrack : null).catch((error) =>
            notice("warning", "microphone_track", String(error)),
          );
          break;
        case "fenced":
          metrics.fenced += 1;
          break;
        case "close":
          this.shutdown(output.reason);
          break;
        case "reconnect":
          metrics.reconnects.push({ attempt: output.attempt, at: eventAt });
          if (this.onTracks) this.resumeCall(output.session_id);
          else this.socket?.resume(output.session_id);
          break;
        case "abandon_socket":
          if (this.onTracks && this.pc) {
            const pc = this.pc;
            this.pc = null; // closed without a report: the protocol already failed it
            pc.close();
          } else {
            this.socket?.abandon();
          }
          break;
        case "link":
          metrics.links.push({
            state: output.state,
            at: eventAt,
            attempts: output.attempts,
            downMs: output.down_ms,
            retryInMs: output.retry_in_ms,
          });
          if (output.state === "resumed") {
            notice("info", "reconnected", `the connection is back after ${Math.round(output.down_ms)} ms`);
          }
          break;
        case "duplicate":
          metrics.duplicates += 1;
          break;
        default:
          break; // "watchdog": shown from the snapshot
      }
    }
    this.schedule();
    this.render();
  }

  schedule() {
    clearTimeout(this.timer);
    if (this.closed) return;
    const deadline = this.protocol.next_deadline();
    if (deadline === null) return;
    this.timer = setTimeout(() => this.run(this.protocol.handle_timeout(now())), Math.max(0, deadline - now()));
  }

  shutdown(reason) {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    this.iceWatch.stop();
    // a resumable session whose data channel closes is only detached (js/call_link.js)
    if (this.onTracks && this.callId && reason === "client_hangup") hangUpCall(this.callId, fragmentKey());
    this.socket?.close();
    if (this.channel && this.channel.readyState !== "closed") this.channel.close();
    this.pc?.close();
    ui.remoteAudio.srcObject = null;
    for (const stream of [this.stream, this.video]) {
      for (const track of stream?.getTracks() ?? []) track.stop();
    }
    ui.preview.srcObject = null;
    setTimeout(() => {
      this.captureContext?.close();
      this.playbackContext?.close();
    }, 200);
    if (!reason.startsWith("client")) notice("warning", "call_ended", reason);
    call = null;
    render(null);
  }

  render() {
    render(this.protocol.snapshot(), this);
  }
}

const TALK_LABEL = ui.talk.textContent;

function render(snapshot, active = null) {
  const state = snapshot ? snapshot.connection : "closed";
  const transport = active ? active.transport : ui.transport.value;
  ui.transportState.dataset.transport = active ? transport : "";
  ui.transportState.dataset.ice = active?.pc?.iceConnectionState ?? "";
  ui.transportState.textContent = transportLabel(transport, active ? state : null);
  ui.transport.disabled = Boolean(snapshot);
  ui.connection.dataset.state = state;
  ui.connection.textContent = labelOf(labels, "client_connection", state);
  ui.connect.textContent = snapshot && state !== "closed" ? "Disconnect" : "Connect";
  ui.mode.disabled = Boolean(snapshot);
  ui.turn.disabled = Boolean(snapshot) || ui.mode.value !== "vad";
  const ready = state === "ready";
  ui.talk.disabled = !(ready && snapshot.mode === "ptt");
  ui.stop.disabled = !ready;
  const liveHold = spec.tables.client_hold.groups.live;
  const live = snapshot?.holds.find((h) => liveHold.includes(h.state));
  ui.talk.classList.toggle("held", Boolean(live));
  ui.talk.dataset.hold = live ? live.state : "";
  ui.talk.textContent = live ? labelOf(labels, "client_hold", live.state) : TALK_LABEL;
  const watchdog = snapshot?.watchdog ?? "disarmed";
  ui.watchdog.dataset.state = watchdog;
  ui.watchdog.textContent = replyLabel(labels, snapshot);
  const speaking = Boolean(snapshot?.user_speaking || live?.state === "recording");
  ui.speaking.dataset.state = speaking ? "on" : "off";
  ui.speaking.textContent = micLabel({
    connected: ready,
    muted,
    speaking,
    handsFree: snapshot?.mode === "vad",
  });
  ui.mute.setAttribute("aria-pressed", String(muted));
  ui.camera.setAttribute("aria-pressed", String(cameraOn));
  ui.camera.textContent = cameraOn ? "Camera off" : "Camera on";
  // before a call the camera machine does not exist yet: say what the button chose
  const camera = snapshot?.camera;
  ui.cameraState.dataset.state = camera ?? "off";
  ui.cameraState.textContent = camera
    ? active?.onTracks && camera !== "off"
      ? cameraTrackLabel
      : labelOf(labels, "client_camera", camera)
    : cameraOn
      ? "camera on once you connect"
      : labelOf(labels, "client_camera", "off");
  document.body.dataset.connection = state;
  document.body.dataset.link = snapshot?.link.state ?? "";
  if (state === "resuming" && cameraOn) ui.cameraState.textContent = cameraPausedLabel;
}

// --- controls -------------------------------------------------------------------------

ui.connect.addEventListener("click", async () => {
  if (call) {
    const active = call;
    active.run(active.protocol.hang_up(now()));
    return;
  }
  call = new Call(ui.mode.value, ui.turn.value, ui.transport.value);
  try {
    await call.start();
    if (cameraOn) await call.setCamera(true);
  } catch (error) {
    notice("error", "start_failed", String(error));
    call?.shutdown("client_start_failed");
  }
});

// the turn detection applies to the hands-free mode only
ui.transport.addEventListener("change", () => render(null));

ui.mode.addEventListener("change", () => {
  ui.turn.disabled = ui.mode.value !== "vad";
});
ui.turn.disabled = ui.mode.value !== "vad";

ui.mute.addEventListener("click", () => {
  muted = !muted;
  if (call) call.run(call.protocol.set_muted(muted, now()));
  else render(null);
});

ui.camera.addEventListener("click", async () => {
  cameraOn = !cameraOn;
  if (call) await call.setCamera(cameraOn);
  else render(null);
});

ui.stop.addEventListener("click", () => call?.run(call.protocol.stop_reply(now())));

function press() {
  if (call) call.run(call.protocol.press(now()));
}

function release() {
  call?.release();
}

ui.talk.addEventListener("pointerdown", (event) => {
  ui.talk.setPointerCapture?.(event.pointerId);
  press();
});
ui.talk.addEventListener("pointerup", release);
ui.talk.addEventListener("pointercancel", release);
ui.talk.addEventListener("lostpointercapture", release);

function typing(target) {
  return target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement;
}

window.addEventListener("keydown", (event) => {
  if (event.code !== "Space" || event.repeat || typing(event.target)) return;
  event.preventDefault();
  press();
});
window.addEventListener("keyup", (event) => {
  if (event.code !== "Space" || typing(event.target)) return;
  event.preventDefault();
  release();
});
window.addEventListener("blur", release);
// leaving the page ends its session: a resumable one would otherwise wait on the server
// for a resume that never comes (B42)
window.addEventListener("pagehide", () => call?.run(call.protocol.hang_up(now())));

render(null);
document.body.dataset.loaded = "true";
