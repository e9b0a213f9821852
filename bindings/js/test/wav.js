// A WAV reader for the tests: PCM 16/24/32-bit and 32/64-bit float, channels mixed to their mean, samples
// normalised as libsndfile does for the native decoder (integers over 2^(bits-1)).
import { readFileSync } from 'node:fs';

export function readWav(path) {
  const data = readFileSync(path);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const tag = (offset) => data.toString('latin1', offset, offset + 4);
  if (tag(0) !== 'RIFF' || tag(8) !== 'WAVE') throw new Error(`${path}: not a RIFF WAVE file`);
  let format, channels, rate, bits, samples;
  for (let offset = 12; offset + 8 <= data.length;) {
    const id = tag(offset), size = view.getUint32(offset + 4, true), body = offset + 8;
    if (id === 'fmt ') {
      format = view.getUint16(body, true);
      channels = view.getUint16(body + 2, true);
      rate = view.getUint32(body + 4, true);
      bits = view.getUint16(body + 14, true);
      if (format === 0xfffe) format = view.getUint16(body + 24, true); // WAVE_FORMAT_EXTENSIBLE: the sub-format
    } else if (id === 'data') {
      const width = bits / 8, frames = Math.floor(Math.min(size, data.length - body) / (width * channels));
      samples = new Float32Array(frames);
      for (let i = 0; i < frames; i++) {
        let sum = 0;
        for (let c = 0; c < channels; c++) {
          const at = body + (i * channels + c) * width;
          let value;
          if (format === 3) value = bits === 32 ? view.getFloat32(at, true) : view.getFloat64(at, true);
          else if (bits === 16) value = view.getInt16(at, true) / 32768;
          else if (bits === 24) value = ((view.getUint8(at + 2) << 24) | (view.getUint8(at + 1) << 16) | (view.getUint8(at) << 8)) / 2147483648;
          else if (bits === 32) value = view.getInt32(at, true) / 2147483648;
          else throw new Error(`${path}: ${bits}-bit samples`);
          sum += value;
        }
        samples[i] = channels === 1 ? sum : sum / channels;
      }
    }
    offset = body + size + (size & 1);
  }
  if (!samples || !rate) throw new Error(`${path}: no fmt or data chunk`);
  return { samples, rate, channels };
}
