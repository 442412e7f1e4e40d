// AudioWorklet processor `joyduplex-playback`: plays reply audio (pcm16 at the context's
// rate, 24 kHz) from a PlaybackQueue. Messages in: {type: "audio", responseId, pcm
// (ArrayBuffer of Int16)}, {type: "drain", responseId}, {type: "clear", responseId|null}.
// A clear takes effect before the next render quantum (at most 128 frames later) and its
// playback-stopped report (the played cursor) is posted before the audio is dropped.
import { PlaybackQueue } from "./playback_queue.js";

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const initialBufferMs = options.processorOptions?.initialBufferMs ?? 100;
    this.queue = new PlaybackQueue(sampleRate, initialBufferMs);
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  post(messages) {
    for (const message of messages) this.port.postMessage({ ...message, at: currentTime });
  }

  onMessage(message) {
    if (message.type === "audio") {
      this.queue.push(message.responseId, new Int16Array(message.pcm));
    } else if (message.type === "drain") {
      this.post(this.queue.drain(message.responseId));
    } else if (message.type === "clear") {
      this.post(this.queue.clear(message.responseId ?? null));
    }
  }

  process(inputs, outputs) {
    const output = outputs[0];
    const first = output[0];
    this.post(this.queue.render(first));
    for (let channel = 1; channel < output.length; channel += 1) output[channel].set(first);
    return true;
  }
}

registerProcessor("joyduplex-playback", PlaybackProcessor);
