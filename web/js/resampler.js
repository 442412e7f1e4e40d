// Streaming resampler for microphone audio (float32 mono): box-filtered decimation when
// downsampling (each output sample averages the input over its own interval, a cheap
// anti-alias filter), linear interpolation when upsampling. Unit-tested in Node.

export class Resampler {
  constructor(fromRate, toRate) {
    this.fromRate = fromRate;
    this.toRate = toRate;
    this.step = fromRate / toRate; // input samples per output sample
    this.carry = new Float32Array(0);
    this.position = 0; // fractional read position into carry
  }

  push(input) {
    const buffer = new Float32Array(this.carry.length + input.length);
    buffer.set(this.carry, 0);
    buffer.set(input, this.carry.length);
    const out = [];
    let p = this.position;
    if (this.step >= 1) {
      while (p + this.step <= buffer.length) {
        const start = Math.floor(p);
        const end = Math.max(start + 1, Math.floor(p + this.step));
        let sum = 0;
        for (let i = start; i < end; i += 1) sum += buffer[i];
        out.push(sum / (end - start));
        p += this.step;
      }
    } else {
      while (p + 1 < buffer.length) {
        const i = Math.floor(p);
        const frac = p - i;
        out.push(buffer[i] * (1 - frac) + buffer[i + 1] * frac);
        p += this.step;
      }
    }
    const consumed = Math.floor(p);
    this.carry = buffer.slice(consumed);
    this.position = p - consumed;
    return Float32Array.from(out);
  }
}

export function floatToInt16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i += 1) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    out[i] = s < 0 ? Math.round(s * 32768) : Math.round(s * 32767);
  }
  return out;
}
