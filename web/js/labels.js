// What the page says about the call, in words a person reads. The machines' state names
// (web/spec/*.json) stay in `data-state` attributes, where the tests and the CSS read
// them; the visible text comes from here. A module of its own (no DOM), so that Node can
// check that every state the page shows has a label (tests/web/labels.test.mjs).

/** The visible label of each state the page shows, by client table. */
export function stateLabels(constants) {
  const seconds = constants.camera_interval_ms / 1000;
  const every = seconds === 1 ? "every second" : `every ${seconds} s`;
  return {
    client_connection: {
      connecting: "connecting…",
      handshaking: "setting up the session…",
      ready: "connected",
      resuming: "reconnecting…", // the link dropped; the session waits on the server (B42)
      closed: "disconnected",
    },
    client_watchdog: {
      disarmed: "idle",
      armed: "waiting for the reply",
      expired: "no reply came",
    },
    // a reply being heard; a queued one is not audible yet and a drained or cleared one
    // is over: those leave the watchdog's label
    client_playback: {
      playing: "assistant speaking",
      draining: "assistant speaking",
    },
    client_camera: {
      off: "camera off",
      standalone: `camera on — sending a frame ${every}`,
      riding: "camera on — sending frames with your speech",
    },
    // the talk button while a push-to-talk hold is live (the table's group `live`)
    client_hold: {
      pressed: "Recording… release to send",
      recording: "Recording… release to send",
      muted: "Muted: unmute to be heard",
    },
  };
}

/** The label of `state` in `table`; an unlabelled state shows its own name. */
export function labelOf(labels, table, state) {
  return labels[table]?.[state] ?? state;
}

/** The reply indicator: a reply being heard, else the turn watchdog's state. */
export function replyLabel(labels, snapshot) {
  const heard = snapshot?.playbacks?.find((playback) => labels.client_playback[playback.state]);
  if (heard) return labels.client_playback[heard.state];
  return labelOf(labels, "client_watchdog", snapshot?.watchdog ?? "disarmed");
}

const TRANSPORT_NAMES = { webrtc: "WebRTC", websocket: "websocket" };

/** The transport indicator: the chosen transport before a call (`connection` null), then
 * the call's, with its connection state. */
export function transportLabel(transport, connection) {
  const name = TRANSPORT_NAMES[transport] ?? transport;
  if (connection === null) return `will connect over ${name}`;
  if (connection === "ready") return `connected over ${name}`;
  if (connection === "closed") return `disconnected (${name})`;
  if (connection === "resuming") return `reconnecting over ${name}…`;
  return `connecting over ${name}…`;
}

/** The camera caption while the link is down (B42): no frame goes out until the resume. */
export const cameraPausedLabel = "camera paused — reconnecting";

/** The camera caption on a WebRTC call: the video track carries the camera. */
export const cameraTrackLabel = "camera on — streaming on the call's video track";

/** The microphone indicator: who is heard, or why nobody is. */
export function micLabel({ connected, muted, speaking, handsFree }) {
  if (muted) return "mic muted";
  if (!connected) return "mic off";
  if (speaking) return "hearing you";
  return handsFree ? "listening" : "hold to talk";
}

function languageName(code) {
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(code) ?? code;
  } catch {
    return code; // not a language code Intl knows: show it as the server spelled it
  }
}

/** The note on spoken languages, from the `capabilities` of `session.created`:
 * `{languages, text}`, where `languages` is the codes ("en", "en de"), "any" for an ASR
 * that detects the language, or "unknown" for a server that does not say. */
export function languageNote(capabilities) {
  if (!capabilities || typeof capabilities !== "object" || !("input_languages" in capabilities)) {
    return {
      languages: "unknown",
      text: "Speech recognition: this server does not say which languages it knows.",
    };
  }
  const codes = Array.isArray(capabilities.input_languages)
    ? capabilities.input_languages.filter((code) => typeof code === "string" && code)
    : [];
  if (codes.length === 0) {
    return {
      languages: "any",
      text:
        "Speech recognition: any language, detected in each utterance (a session pins one " +
        'with audio.input.transcription.language, e.g. "de").',
    };
  }
  const names = codes.map(languageName);
  const only = codes.length === 1 ? `speak ${names[0]}` : "speak one of these";
  return {
    languages: codes.join(" "),
    text: `Speech recognition: ${names.join(", ")} only (${only}; other languages are not understood).`,
  };
}
