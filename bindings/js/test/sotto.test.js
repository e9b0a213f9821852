// The JavaScript package (index.js on sotto.wasm) in Node: round trips, chunking, every error, and agreement
// with the native decoder (`sotto decode --format json`, the binary named by SOTTO_BIN, default the debug
// build) on every WAV fixture. scripts/test-js builds sotto.wasm first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as sotto from '../index.js';
import { readWav } from './wav.js';

const repository = fileURLToPath(new URL('../../../', import.meta.url));
const hex = (bytes) => Buffer.from(bytes).toString('hex');

/** A repeatable generator (xorshift32) for tokens, noise and chunk sizes. */
function random(seed) {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state / 4294967296;
  };
}

/** `frames` placed in `seconds` of white noise at `noise` RMS, each at its start time (s). */
function scene(rate, seconds, placed, noise, next) {
  const out = new Float32Array(Math.round(rate * seconds));
  for (let i = 0; i < out.length; i++) out[i] = noise * Math.sqrt(3) * (2 * next() - 1);
  for (const { samples, at } of placed) {
    const offset = Math.round(at * rate);
    for (let i = 0; i < samples.length && offset + i < out.length; i++) out[offset + i] += samples[i];
  }
  return out;
}

/** Feeds `samples` to `decoder` in chunks of random sizes (1 to `largest`), then flushes. */
function feedInChunks(decoder, samples, next, largest) {
  const frames = [];
  for (let at = 0; at < samples.length;) {
    const size = Math.min(samples.length - at, 1 + Math.floor(next() * largest));
    frames.push(...decoder.process(samples.subarray(at, at + size)));
    at += size;
  }
  frames.push(...decoder.flush());
  return frames;
}

for (const rate of [44100, 48000, 96000]) {
  test(`round trip at ${rate} Hz: every profile the rate carries, random chunks, in noise`, () => {
    const next = random(rate);
    const carried = sotto.profiles.filter((p) => rate >= p.minimumSampleRate).map((p) => p.name);
    assert.ok(carried.length >= 3, `${rate} Hz carries ${carried}`);
    let at = 0.3;
    const placed = carried.map((profile, i) => {
      const token = Uint8Array.from({ length: 1 + ((i * 5 + rate) % 16) }, () => Math.floor(next() * 256));
      const samples = sotto.encode(token, { profile, rate });
      assert.ok(Math.abs(samples.length - sotto.airtime(profile, token.length) * rate) <= 1, `${profile} length ${samples.length}`);
      const item = { profile, token, samples, at };
      at += samples.length / rate + 0.4;
      return item;
    });
    const audio = scene(rate, at + 0.5, placed, 0.003, next);
    const decoder = new sotto.Decoder(rate);
    const frames = feedInChunks(decoder, audio, next, 5000);
    assert.equal(decoder.sampleCount, audio.length);
    decoder.close();
    assert.deepEqual(frames.map((f) => [f.profile, hex(f.token)]), placed.map((p) => [p.profile, hex(p.token)]));
    frames.forEach((frame, i) => {
      assert.ok(Math.abs(frame.start_time_s - placed[i].at) < 2e-3, `${frame.profile} starts at ${frame.start_time_s}, sent at ${placed[i].at}`);
      assert.ok(frame.end_time_s > frame.start_time_s && frame.snr_db > 10 && frame.level_dbfs < -3 && frame.level_dbfs > -9, JSON.stringify(frame));
      // The 1.0 names, kept: the same values.
      assert.deepEqual([frame.start, frame.end, frame.snr, frame.level, frame.clockOffsetPPM, frame.correctedBits],
                       [frame.start_time_s, frame.end_time_s, frame.snr_db, frame.level_dbfs, frame.clock_offset_ppm, frame.corrected_bits]);
      // The estimate's resolution (native too: an audible frame at 96 kHz reads about -70 ppm).
      assert.ok(Math.abs(frame.clock_offset_ppm) < 150, `clock offset ${frame.clock_offset_ppm}`);
    });
    // The same audio in one chunk and in chunks of one block: the same frames (chunking changes nothing).
    const whole = sotto.decode(audio, rate);
    assert.deepEqual(whole, frames);
  });
}

test('encode: a string is its UTF-8, a level scales the peak, the default is -6 dBFS', () => {
  const text = sotto.encode('hé', { rate: 48000 });
  const bytes = sotto.encode(new TextEncoder().encode('hé'), { rate: 48000 });
  assert.deepEqual(text, bytes);
  const peak = (s) => s.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
  assert.ok(Math.abs(20 * Math.log10(peak(bytes)) - sotto.DEFAULT_LEVEL_DBFS) < 0.2);
  const quiet = sotto.encode([1, 2, 3], { level: -30 });
  assert.ok(Math.abs(20 * Math.log10(peak(quiet)) + 30) < 0.2);
  assert.deepEqual(sotto.profiles.map((p) => p.name), ['default', 'fast', 'robust', 'audible']);
});

test('every error is a SottoError that says what is wrong, and the module keeps working after it', () => {
  const cases = [
    [() => sotto.encode(new Uint8Array(0)), /1 to 16 bytes, got 0/],
    [() => sotto.encode(new Uint8Array(17)), /1 to 16 bytes, got 17/],
    [() => sotto.encode(new Uint8Array(5000)), /1 to 16 bytes, got 5000/],
    [() => sotto.encode({}), /a token is a Uint8Array/],
    [() => sotto.encode([1, 300]), /a token is a Uint8Array/],
    [() => sotto.encode([1], { profile: 'loud' }), /unknown profile 'loud'/],
    [() => sotto.encode([1], { rate: 8000 }), /too low for profile 'default'/],
    [() => sotto.encode([1], { rate: -1 }), /invalid sample rate/],
    [() => sotto.encode([1], { rate: NaN }), /invalid sample rate/],
    [() => sotto.encode([1], { rate: 1e9 }), /invalid sample rate/],
    [() => sotto.encode([1], { level: 3 }), /invalid level/],
    [() => sotto.encode([1], { level: -200 }), /invalid level/],
    [() => sotto.encode([1], { level: NaN }), /invalid level/],
    [() => new sotto.Decoder(0), /invalid sample rate/],
    [() => new sotto.Decoder('48000'), /invalid sample rate/],
    [() => new sotto.Decoder(16000, { profiles: ['default'] }), /too low for profile 'default'/],
    [() => new sotto.Decoder(4000), /sample rate 4.0 kHz is too low for profile 'default'/],
    [() => new sotto.Decoder(48000, { profiles: [] }), /no profile to search/],
    [() => new sotto.Decoder(48000, { profiles: ['x'] }), /unknown profile 'x'/],
    [() => new sotto.Decoder(48000).process([0, 1]), /Float32Array/],
    [() => sotto.airtime('default', 0), /1 to 16 bytes/],
    [() => sotto.airtime('nope', 4), /unknown profile/],
  ];
  for (const [call, message] of cases) {
    assert.throws(call, (error) => error instanceof sotto.SottoError && message.test(error.message), String(message));
  }
  const decoder = new sotto.Decoder(48000, { profiles: 'fast' });
  decoder.close();
  decoder.close(); // twice is allowed
  assert.throws(() => decoder.process(new Float32Array(10)), /closed/);
  assert.throws(() => decoder.flush(), /closed/);
  assert.equal(sotto.decode(sotto.encode([7], { profile: 'fast' }), 48000)[0].token[0], 7);
});

test('garbage input: NaN, infinities, clipping and silence decode to nothing, without a crash', () => {
  const decoder = new sotto.Decoder(48000);
  const next = random(5);
  const chunk = new Float32Array(48000);
  for (let round = 0; round < 4; round++) {
    for (let i = 0; i < chunk.length; i++) {
      chunk[i] = [NaN, Infinity, -Infinity, 1e30, next() > 0.5 ? 1 : -1, 0][(i + round) % 6];
    }
    assert.deepEqual(decoder.process(chunk), []);
  }
  assert.deepEqual(decoder.process(new Float32Array(96000)), []);
  decoder.flush();
  // And it still decodes afterwards.
  const frames = feedInChunks(decoder, scene(48000, 1.5, [{ samples: sotto.encode([9, 9]), at: 0.2 }], 0.001, next), next, 3000);
  assert.deepEqual(frames.map((f) => hex(f.token)), ['0909']);
  decoder.close();
});

test('memory stays bounded: decoders made and closed, minutes of audio fed', () => {
  const before = sotto.memory.buffer.byteLength;
  for (let i = 0; i < 20; i++) new sotto.Decoder(96000).close();
  const decoder = new sotto.Decoder(48000, { profiles: 'default' });
  const chunk = new Float32Array(48000);
  const next = random(9);
  for (let second = 0; second < 120; second++) {
    for (let i = 0; i < chunk.length; i++) chunk[i] = 0.01 * (2 * next() - 1);
    decoder.process(chunk);
  }
  decoder.close();
  for (let i = 0; i < 20; i++) new sotto.Decoder(96000).close();
  const grown = sotto.memory.buffer.byteLength - before;
  assert.ok(grown <= 16 * 1024 * 1024, `memory grew by ${grown} bytes`);
});

// Agreement with the native decoder on every WAV fixture (the AIFF and FLAC ones need libsndfile).
const native = process.env.SOTTO_BIN ?? path.join(repository, '.build/debug/sotto');
const fixtures = readdirSync(path.join(repository, 'Fixtures'), { recursive: true })
  .filter((f) => f.endsWith('.wav')).sort().map((f) => path.join('Fixtures', f));

const skipNative = process.env.SOTTO_JS_SKIP_NATIVE === '1';
test('the same frames as the native decoder on every WAV fixture', { timeout: 600_000, skip: skipNative }, () => {
  assert.ok(existsSync(native), `the native sotto (${native}; set SOTTO_BIN) is needed to compare with`);
  assert.ok(fixtures.length >= 20, `${fixtures.length} fixtures`);
  const lines = execFileSync(native, ['decode', '--format', 'json', '--quiet', ...fixtures], { cwd: repository, maxBuffer: 64 << 20 })
    .toString().trim().split('\n').filter(Boolean).map((line) => JSON.parse(line)).filter((r) => r.record === 'frame');
  let compared = 0, worst = { start_time_s: 0, end_time_s: 0, snr_db: 0, level_dbfs: 0, clock_offset_ppm: 0 };
  for (const file of fixtures) {
    const { samples, rate } = readWav(path.join(repository, file));
    const expected = lines.filter((r) => r.file === file);
    const decoder = new sotto.Decoder(rate);
    const got = feedInChunks(decoder, samples, random(fixtures.indexOf(file) + 1), 8192);
    decoder.close();
    assert.deepEqual(got.map((f) => [f.profile, hex(f.token)]), expected.map((r) => [r.profile, r.token]), file);
    got.forEach((frame, i) => {
      // The same field names as the CLI's JSON.
      for (const key of Object.keys(worst)) {
        assert.ok(key in expected[i], `the CLI's JSON has ${key}`);
        const difference = Math.abs(frame[key] - expected[i][key]);
        worst[key] = Math.max(worst[key], difference);
      }
      // Times printed to 6 decimals; SNR and level are rounded to 0.1 dB, the clock offset to 1 ppm by the
      // modem, so a float round-off difference can move them by one step.
      const e = expected[i];
      assert.ok(Math.abs(frame.start_time_s - e.start_time_s) <= 2e-6, `${file} start ${frame.start_time_s} vs ${e.start_time_s}`);
      assert.ok(Math.abs(frame.end_time_s - e.end_time_s) <= 2e-6, `${file} end ${frame.end_time_s} vs ${e.end_time_s}`);
      assert.ok(Math.abs(frame.snr_db - e.snr_db) <= 0.1 + 1e-9, `${file} snr ${frame.snr_db} vs ${e.snr_db}`);
      assert.ok(Math.abs(frame.level_dbfs - e.level_dbfs) <= 0.1 + 1e-9, `${file} level ${frame.level_dbfs} vs ${e.level_dbfs}`);
      assert.ok(Math.abs(frame.clock_offset_ppm - e.clock_offset_ppm) <= 1 + 1e-9, `${file} clock ${frame.clock_offset_ppm} vs ${e.clock_offset_ppm}`);
      assert.equal(frame.corrected_bits, e.corrected_bits, `${file} corrected bits`);
      compared++;
    });
  }
  assert.ok(compared >= 40, `${compared} frames compared`);
  console.log(`# ${compared} frames on ${fixtures.length} fixtures; largest differences from native: ${JSON.stringify(worst)}`);
});
