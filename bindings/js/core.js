// Sotto's modem from its WebAssembly module (sotto.wasm, compiled from the Swift sources by
// scripts/build-wasm), without I/O: usable in a page, a worker, an AudioWorklet or Node. Units: sample
// rates in Hz, times in seconds, levels in dBFS, SNR in dB, clock offsets in ppm, samples Float32 at full
// scale 1.

/** Bytes of one frame record (bindings/js/wasm/Exports.swift). */
const FRAME_BYTES = 72;
/** Shortest and longest token (bytes). */
export const TOKEN_MIN_BYTES = 1;
export const TOKEN_MAX_BYTES = 16;
/** Default output level (dBFS peak), as the native modulator's. */
export const DEFAULT_LEVEL_DBFS = -6;

// UTF-8 without TextDecoder and TextEncoder, which an AudioWorkletGlobalScope does not have.
function utf8Decode(bytes) {
  if (typeof TextDecoder !== 'undefined') return new TextDecoder().decode(bytes);
  let text = '';
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i];
    const extra = b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : 0;
    let code = extra ? b & (0x3f >> extra) : b;
    for (let k = 1; k <= extra; k++) code = (code << 6) | (bytes[i + k] & 0x3f);
    text += String.fromCodePoint(code);
    i += extra + 1;
  }
  return text;
}

function utf8Encode(text) {
  if (typeof TextEncoder !== 'undefined') return new TextEncoder().encode(text);
  const bytes = [];
  for (const character of text) {
    const code = character.codePointAt(0);
    if (code < 0x80) bytes.push(code);
    else if (code < 0x800) bytes.push(0xc0 | (code >> 6), 0x80 | (code & 63));
    else if (code < 0x10000) bytes.push(0xe0 | (code >> 12), 0x80 | ((code >> 6) & 63), 0x80 | (code & 63));
    else bytes.push(0xf0 | (code >> 18), 0x80 | ((code >> 12) & 63), 0x80 | ((code >> 6) & 63), 0x80 | (code & 63));
  }
  return Uint8Array.from(bytes);
}

/** A call into the modem failed: `message` says what was wrong and what is allowed. */
export class SottoError extends Error {
  constructor(message) {
    super(message);
    this.name = 'SottoError';
  }
}

/**
 * The modem of one WebAssembly instance.
 * @param {WebAssembly.Module} module sotto.wasm, compiled
 */
export function instantiate(module) {
  let memory;
  // What the C library linked into the module imports (wasi-libc): output of a fatal error goes to the
  // console, random bytes (Swift's hash seeds, nothing secret) come from crypto where there is crypto.
  const wasi = {
    fd_write(fd, iovs, count, written) {
      const view = new DataView(memory.buffer);
      let total = 0;
      let text = '';
      for (let i = 0; i < count; i++) {
        const pointer = view.getUint32(iovs + 8 * i, true);
        const length = view.getUint32(iovs + 8 * i + 4, true);
        text += utf8Decode(new Uint8Array(memory.buffer, pointer, length));
        total += length;
      }
      if (text.trim()) console.error(`sotto.wasm: ${text.trim()}`);
      view.setUint32(written, total, true);
      return 0;
    },
    fd_close: () => 0,
    fd_seek: () => 70, // ESPIPE
    random_get(pointer, length) {
      const bytes = new Uint8Array(memory.buffer, pointer, length);
      if (globalThis.crypto?.getRandomValues) {
        for (let i = 0; i < length; i += 65536) globalThis.crypto.getRandomValues(bytes.subarray(i, Math.min(length, i + 65536)));
      } else {
        for (let i = 0; i < length; i++) bytes[i] = (i * 131 + 17) & 255;
      }
      return 0;
    },
  };
  const instance = new WebAssembly.Instance(module, { wasi_snapshot_preview1: wasi });
  const c = instance.exports;
  memory = c.memory;
  const text = (pointer, length) => utf8Decode(new Uint8Array(memory.buffer, pointer, length));
  const lastError = () => text(c.sotto_error(), c.sotto_error_length());

  const profiles = [];
  for (let i = 0; i < c.sotto_profile_count(); i++) {
    const length = c.sotto_profile_name(i);
    profiles.push(Object.freeze({ name: text(c.sotto_error(), length), index: i, minimumSampleRate: c.sotto_profile_minimum_rate(i) }));
  }
  const names = profiles.map((p) => p.name);
  const profileIndex = (name) => {
    const index = names.indexOf(name);
    if (index < 0) throw new SottoError(`unknown profile '${name}': expected one of ${names.join(', ')}`);
    return index;
  };
  const checkRate = (rate) => {
    if (typeof rate !== 'number' || !Number.isFinite(rate)) throw new SottoError(`invalid sample rate ${rate}: expected a positive number of Hz`);
  };
  const tokenBytes = (bytes) => {
    if (typeof bytes === 'string') return utf8Encode(bytes);
    if (bytes instanceof Uint8Array) return bytes;
    if (bytes instanceof ArrayBuffer) return new Uint8Array(bytes);
    if (Array.isArray(bytes) && bytes.every((b) => Number.isInteger(b) && b >= 0 && b <= 255)) return Uint8Array.from(bytes);
    throw new SottoError('a token is a Uint8Array, an ArrayBuffer, an array of bytes (0-255) or a string');
  };

  /**
   * One frame: the token's samples at `rate`.
   * @param {Uint8Array|ArrayBuffer|number[]|string} bytes 1-16 bytes (a string: its UTF-8)
   * @param {{profile?: string, rate?: number, level?: number}} [options] profile (default "default"), sample
   *   rate (Hz, default 48000), peak level (dBFS, -120...0, default -6)
   * @returns {Float32Array}
   */
  function encode(bytes, { profile = 'default', rate = 48000, level = DEFAULT_LEVEL_DBFS } = {}) {
    const token = tokenBytes(bytes);
    const index = profileIndex(profile);
    checkRate(rate);
    if (typeof level !== 'number' || Number.isNaN(level)) throw new SottoError(`invalid level ${level} dBFS: expected a value from -120 to 0`);
    if (token.length > 4096) throw new SottoError(`a token must be ${TOKEN_MIN_BYTES} to ${TOKEN_MAX_BYTES} bytes, got ${token.length}`);
    const pointer = token.length ? c.sotto_alloc(token.length) : 0;
    if (token.length && !pointer) throw new SottoError('out of memory');
    try {
      if (token.length) new Uint8Array(memory.buffer, pointer, token.length).set(token);
      const count = c.sotto_encode(index, rate, level, pointer, token.length);
      if (count < 0) throw new SottoError(lastError());
      return new Float32Array(memory.buffer, c.sotto_encoded(), count).slice();
    } finally {
      c.sotto_free(pointer);
    }
  }

  function readFrames(count) {
    if (count < 0) throw new SottoError(lastError());
    const frames = [];
    if (count === 0) return frames;
    const base = c.sotto_frames();
    const view = new DataView(memory.buffer, base, count * FRAME_BYTES);
    for (let i = 0; i < count; i++) {
      const o = i * FRAME_BYTES;
      const length = view.getInt32(o + 48, true);
      const frame = {
        token: new Uint8Array(memory.buffer, base + o + 52, length).slice(),
        profile: names[view.getInt32(o + 44, true)],
        // The names of the CLI's JSON (schema 2), the C struct and the Python package.
        start_time_s: view.getFloat64(o, true),
        end_time_s: view.getFloat64(o + 8, true),
        snr_db: view.getFloat64(o + 16, true),
        level_dbfs: view.getFloat64(o + 24, true),
        clock_offset_ppm: view.getFloat64(o + 32, true),
        corrected_bits: view.getInt32(o + 40, true),
      };
      // The 1.0 names, kept for the 1.x releases as the CLI's JSON keeps them (plain properties: a frame posted from
      // the AudioWorklet is copied with them).
      Object.assign(frame, { start: frame.start_time_s, end: frame.end_time_s, snr: frame.snr_db, level: frame.level_dbfs,
                             clockOffsetPPM: frame.clock_offset_ppm, correctedBits: frame.corrected_bits });
      frames.push(frame);
    }
    return frames;
  }

  /** A streaming decoder: feed it chunks of any length, it returns the frames they completed. */
  class Decoder {
    #handle = 0;
    #buffer = 0;
    #capacity = 0;

    /**
     * @param {number} rate sample rate of the input (Hz)
     * @param {{profiles?: string[]|string}} [options] profiles to search ("all", one name or a list;
     *   default: every profile the rate carries)
     */
    constructor(rate, { profiles: wanted = 'all' } = {}) {
      checkRate(rate);
      let mask = 0;
      if (wanted === 'all') {
        profiles.forEach((p) => { if (rate >= p.minimumSampleRate) mask |= 1 << p.index; });
        if (mask === 0) mask = (1 << profiles.length) - 1; // the modem's error names the problem
      } else {
        const list = typeof wanted === 'string' ? [wanted] : wanted;
        if (!Array.isArray(list) || list.length === 0) throw new SottoError('no profile to search: give "all", a name or a list of names');
        for (const name of list) mask |= 1 << profileIndex(name);
      }
      const handle = c.sotto_decoder_create(rate, mask);
      if (handle < 0) throw new SottoError(lastError());
      this.#handle = handle;
      this.sampleRate = rate;
    }

    #check() {
      if (!this.#handle) throw new SottoError('the decoder is closed');
    }

    /**
     * Feeds samples (full scale 1); returns the frames they completed.
     * @param {Float32Array} samples
     */
    process(samples) {
      this.#check();
      if (!(samples instanceof Float32Array)) throw new SottoError('samples are a Float32Array');
      if (samples.length === 0) return [];
      if (samples.length > this.#capacity) {
        c.sotto_free(this.#buffer);
        this.#capacity = Math.max(samples.length, 4096);
        this.#buffer = c.sotto_alloc(this.#capacity * 4);
        if (!this.#buffer) { this.#capacity = 0; throw new SottoError('out of memory'); }
      }
      new Float32Array(memory.buffer, this.#buffer, samples.length).set(samples);
      return readFrames(c.sotto_decoder_process(this.#handle, this.#buffer, samples.length));
    }

    /** Ends the stream (as at the end of a recording): the frames still under way. */
    flush() {
      this.#check();
      return readFrames(c.sotto_decoder_finish(this.#handle));
    }

    /** Samples fed so far. */
    get sampleCount() {
      this.#check();
      return c.sotto_decoder_sample_count(this.#handle);
    }

    /** Frees the decoder's memory; any later call is an error. */
    close() {
      if (!this.#handle) return;
      c.sotto_decoder_destroy(this.#handle);
      c.sotto_free(this.#buffer);
      this.#handle = 0;
      this.#buffer = 0;
      this.#capacity = 0;
    }
  }

  /**
   * Every frame in a whole recording: `process` then `flush`.
   * @param {Float32Array} samples
   * @param {number} rate
   * @param {{profiles?: string[]|string}} [options]
   */
  function decode(samples, rate, options) {
    const decoder = new Decoder(rate, options);
    try {
      return [...decoder.process(samples), ...decoder.flush()];
    } finally {
      decoder.close();
    }
  }

  /**
   * Airtime (s) of one frame of `length` bytes.
   * @param {string} profile
   * @param {number} length
   */
  function airtime(profile, length) {
    const seconds = c.sotto_profile_airtime(profileIndex(profile), length);
    if (seconds < 0) throw new SottoError(`a token must be ${TOKEN_MIN_BYTES} to ${TOKEN_MAX_BYTES} bytes, got ${length}`);
    return seconds;
  }

  return Object.freeze({ encode, decode, Decoder, airtime, profiles: Object.freeze(profiles), memory });
}
