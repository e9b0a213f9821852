// The AudioWorklet processor 'sotto-decoder' (index.js `listen`): a decoder of its own, fed on the audio
// thread with the first input channel, posting {frame} (or {error}) to the main thread. Its options:
// processorOptions {module: sotto.wasm compiled (WebAssembly.Module), profiles: "all", a name or a list}.
import { instantiate } from './core.js';

class SottoDecoderProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.running = true;
    try {
      const { module, profiles = 'all' } = options.processorOptions;
      this.decoder = new (instantiate(module).Decoder)(sampleRate, { profiles });
    } catch (error) {
      this.running = false;
      this.port.postMessage({ error: String(error.message ?? error) });
    }
    this.port.onmessage = ({ data }) => {
      if (data?.stop) {
        this.running = false;
        this.decoder?.close();
      }
    };
  }

  process(inputs) {
    if (!this.running) return false;
    const channel = inputs[0]?.[0];
    if (channel && channel.length) {
      try {
        for (const frame of this.decoder.process(channel)) this.port.postMessage({ frame });
      } catch (error) {
        this.running = false;
        this.port.postMessage({ error: String(error.message ?? error) });
        return false;
      }
    }
    return true;
  }
}

registerProcessor('sotto-decoder', SottoDecoderProcessor);
