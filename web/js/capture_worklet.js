// AudioWorklet processor `joyduplex-capture`: microphone float32 at the context's rate ->
// mono pcm16 at the capture rate (16 kHz), posted in chunks of `chunkMs` as
// {pcm: ArrayBuffer (Int16), samples, rms} (the buffer is transferred).
// Message in: {type: "flush"}: post the partial chunk now, marked `flushed: true` (posted
// even when empty, as the answer): a push-to-talk release sends the hold's last few ms
// before its commit instead of dropping them or waiting for the chunk to fill.
import { Resampler, floatToInt16 } from "./resampler.js";

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate = 16000, chunkMs = 40 } = options.processorOptions ?? {};
    this.resampler = new Resampler(sampleRate, targetRate);
    this.chunkSamples = Math.round((targetRate * chunkMs) / 1000);
    this.pending = new Float32Array(this.chunkSamples);
    this.filled = 0;
    this.port.onmessage = (event) => {
      if (event.data?.type === "flush") this.post(this.filled, true);
    };
  }

  post(samples, flushed) {
    const chunk = this.pending.subarray(0, samples);
    let energy = 0;
    for (const s of chunk) energy += s * s;
    const pcm = floatToInt16(chunk);
    this.port.postMessage(
      { pcm: pcm.buffer, samples: pcm.length, rms: pcm.length ? Math.sqrt(energy / pcm.length) : 0, flushed },
      [pcm.buffer],
    );
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0]?.[0];
    if (!channel) return true;
    const resampled = this.resampler.push(channel);
    let offset = 0;
    while (offset < resampled.length) {
      const n = Math.min(this.chunkSamples - this.filled, resampled.length - offset);
      this.pending.set(resampled.subarray(offset, offset + n), this.filled);
      this.filled += n;
      offset += n;
      if (this.filled === this.chunkSamples) this.post(this.chunkSamples, false);
    }
    return true;
  }
}

registerProcessor("joyduplex-capture", CaptureProcessor);
