// Sotto in JavaScript: short tokens (1-16 bytes) as near-ultrasonic sound, with the native library's modem
// compiled to WebAssembly (sotto.wasm). An ES module for browsers and Node 20: it loads the module once (top-level
// await) and exports the modem's functions; `listen` and `play` use the Web Audio API.
import { instantiate, SottoError, TOKEN_MIN_BYTES, TOKEN_MAX_BYTES, DEFAULT_LEVEL_DBFS } from './core.js';

const wasmURL = new URL('./sotto.wasm', import.meta.url);

async function wasmBytes() {
  if (wasmURL.protocol === 'file:') {
    const { readFile } = await import('node:fs/promises');
    return readFile(wasmURL);
  }
  const response = await fetch(wasmURL);
  if (!response.ok) throw new SottoError(`cannot load ${wasmURL}: HTTP ${response.status}`);
  return response.arrayBuffer();
}

/** sotto.wasm, compiled: give it to `instantiate` (core.js) for another instance, e.g. in a worker. */
export const module = await WebAssembly.compile(await wasmBytes());
const sotto = instantiate(module);

export const { encode, decode, Decoder, airtime, profiles, memory } = sotto;
export { instantiate, SottoError, TOKEN_MIN_BYTES, TOKEN_MAX_BYTES, DEFAULT_LEVEL_DBFS };

/**
 * Hears frames from a microphone off the main thread: an AudioWorklet (worklet.js) feeds a decoder of its own
 * with the stream's first channel and posts each frame; `onFrame` is called with it on the main thread.
 * @param {BaseAudioContext} context
 * @param {MediaStream} stream e.g. from getUserMedia({audio: {echoCancellation: false, noiseSuppression: false, autoGainControl: false}})
 * @param {{profiles?: string[]|string, onFrame: (frame: object) => void, onError?: (message: string) => void}} options
 * @returns {Promise<{node: AudioWorkletNode, stop: () => void}>}
 */
export async function listen(context, stream, { profiles: wanted = 'all', onFrame, onError } = {}) {
  if (typeof onFrame !== 'function') throw new SottoError('listen needs an onFrame function');
  await context.audioWorklet.addModule(new URL('./worklet.js', import.meta.url));
  const node = new AudioWorkletNode(context, 'sotto-decoder', {
    numberOfInputs: 1,
    numberOfOutputs: 0,
    processorOptions: { module, profiles: wanted },
  });
  node.port.onmessage = ({ data }) => {
    if (data.frame) onFrame(data.frame);
    else if (data.error) (onError ?? console.error)(data.error);
  };
  const source = context.createMediaStreamSource(stream);
  source.connect(node);
  return {
    node,
    stop() {
      source.disconnect();
      node.port.postMessage({ stop: true });
      node.port.close();
    },
  };
}

/**
 * Plays one frame through `context` (any AudioContext, or an OfflineAudioContext to render it).
 * @param {BaseAudioContext} context
 * @param {Uint8Array|ArrayBuffer|number[]|string} bytes the token
 * @param {{profile?: string, level?: number, when?: number}} [options] `when`: context time to start (s)
 * @returns {AudioBufferSourceNode}
 */
export function play(context, bytes, { profile = 'default', level = DEFAULT_LEVEL_DBFS, when = 0 } = {}) {
  const samples = encode(bytes, { profile, rate: context.sampleRate, level });
  const buffer = context.createBuffer(1, samples.length, context.sampleRate);
  buffer.copyToChannel(samples, 0);
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  source.start(when);
  return source;
}
