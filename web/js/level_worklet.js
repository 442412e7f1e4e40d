// The level of the reply audio heard on a WebRTC call (the remote audio track), per render
// quantum (128 frames). It reports transitions only, in the audio thread's clock
// (`currentTime`, seconds): `audible` at the first quantum whose peak reaches the threshold
// after a reported quiet run (or at the start), and `quiet` once the peak stayed under it
// for `quietMs`, stamped with the start of that quiet run (when the track went silent). A short dip between
// words is shorter than `quietMs` and is never reported. No output: it only listens.

class LevelProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { threshold = 0.004, quietMs = 120 } = options.processorOptions ?? {};
    this.threshold = threshold;
    this.quietS = quietMs / 1000;
    this.quietSince = null; // start of the current quiet run (s), or null while audible
    this.reported = true; // the current quiet run was reported (nothing heard yet)
  }

  process(inputs) {
    const channel = inputs[0]?.[0];
    let peak = 0;
    if (channel) {
      for (let i = 0; i < channel.length; i += 1) {
        const value = Math.abs(channel[i]);
        if (value > peak) peak = value;
      }
    }
    const now = currentTime;
    if (peak >= this.threshold) {
      // after a reported quiet run only: a dip between words is no new start
      if (this.reported) this.port.postMessage({ type: "audible", at: now, peak });
      this.quietSince = null;
      this.reported = false;
    } else {
      if (this.quietSince === null) this.quietSince = now;
        if (!this.reported && now - this.quietSince >= this.quietS) {
        this.reported = true;
        this.port.postMessage({ type: "quiet", at: this.quietSince, confirmedAt: now });
      }
    }
    return true;
  }
}

registerProcessor("joyduplex-level", LevelProcessor);
