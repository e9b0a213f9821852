// Types of the `sotto` ES module (index.js; core.js for `instantiate`). Units: sample rates in Hz, times in
// seconds, levels in dBFS, SNR in dB, clock offsets in ppm, samples Float32 at full scale 1.

/** "default", "fast", "robust" or "audible". */
export type ProfileName = 'default' | 'fast' | 'robust' | 'audible';
export type Token = Uint8Array | ArrayBuffer | number[] | string;

export interface Profile {
  readonly name: ProfileName;
  /** Index in `profiles` (the frame header's identifier order). */
  readonly index: number;
  /** Lowest sample rate that carries the profile (Hz). */
  readonly minimumSampleRate: number;
}

/** One frame found in a stream. */
export interface Frame {
  /** 1-16 bytes. */
  token: Uint8Array;
  profile: ProfileName;
  /** First sample of the preamble, s from the start of the stream. */
  start_time_s: number;
  /** End of the frame (s). */
  end_time_s: number;
  /** In-band signal-to-noise ratio (dB). */
  snr_db: number;
  /** Received peak level (dBFS). */
  level_dbfs: number;
  /** Time-scale offset of the received frame (ppm). */
  clock_offset_ppm: number;
  /** Coded bits the error-correcting code corrected. */
  corrected_bits: number;
  /** @deprecated 1.0's name of `start_time_s` (kept for the 1.x releases, as in the CLI's JSON). */
  start: number;
  /** @deprecated 1.0's name of `end_time_s`. */
  end: number;
  /** @deprecated 1.0's name of `snr_db`. */
  snr: number;
  /** @deprecated 1.0's name of `level_dbfs`. */
  level: number;
  /** @deprecated 1.0's name of `clock_offset_ppm`. */
  clockOffsetPPM: number;
  /** @deprecated 1.0's name of `corrected_bits`. */
  correctedBits: number;
}

export interface EncodeOptions {
  /** Default "default". */
  profile?: ProfileName;
  /** Hz, default 48000. */
  rate?: number;
  /** Peak dBFS, -120...0, default -6. */
  level?: number;
}

export interface DecoderOptions {
  /** "all" (default: every profile the rate carries), one name or a list. */
  profiles?: 'all' | ProfileName | ProfileName[];
}

/** A call into the modem failed; `message` says what was wrong and what is allowed. */
export class SottoError extends Error {}

/** A streaming decoder: feed it chunks of any length, it returns the frames they completed. */
export class Decoder {
  constructor(rate: number, options?: DecoderOptions);
  readonly sampleRate: number;
  /** Samples fed so far. */
  readonly sampleCount: number;
  process(samples: Float32Array): Frame[];
  /** Ends the stream: the frames still under way. */
  flush(): Frame[];
  /** Frees the decoder's memory; any later call throws. */
  close(): void;
}

export interface Sotto {
  encode(bytes: Token, options?: EncodeOptions): Float32Array;
  decode(samples: Float32Array, rate: number, options?: DecoderOptions): Frame[];
  Decoder: typeof Decoder;
  airtime(profile: ProfileName, length: number): number;
  readonly profiles: readonly Profile[];
  readonly memory: WebAssembly.Memory;
}

export const TOKEN_MIN_BYTES: 1;
export const TOKEN_MAX_BYTES: 16;
export const DEFAULT_LEVEL_DBFS: number;
/** sotto.wasm, compiled. */
export const module: WebAssembly.Module;
/** Another instance of the modem (e.g. in a worker), from `module`. */
export function instantiate(module: WebAssembly.Module): Sotto;
/** One frame: the token's samples. */
export function encode(bytes: Token, options?: EncodeOptions): Float32Array;
/** Every frame in a whole recording. */
export function decode(samples: Float32Array, rate: number, options?: DecoderOptions): Frame[];
/** Airtime (s) of one frame of `length` bytes. */
export function airtime(profile: ProfileName, length: number): number;
export const profiles: readonly Profile[];

export interface ListenOptions extends DecoderOptions {
  onFrame: (frame: Frame) => void;
  onError?: (message: string) => void;
}
/** Hears frames from a stream (a microphone) in an AudioWorklet. */
export function listen(context: BaseAudioContext, stream: MediaStream, options: ListenOptions): Promise<{ node: AudioWorkletNode; stop(): void }>;
/** Plays one frame through `context` at its sample rate. */
export function play(context: BaseAudioContext, bytes: Token, options?: { profile?: ProfileName; level?: number; when?: number }): AudioBufferSourceNode;
