// Decode speed in Node on the audio of the native benchmark "Decoder, every 48 kHz fixture, all profiles"
// (Benchmarks/ModemBenchmarks): every 48 kHz WAV fixture, all four profiles, 4096-sample chunks, a new decoder
// per fixture. Prints the median wall time of `runs` passes and the real-time factor, and the median CPU time
// of a pass (user + system: on a loaded machine the wall time also counts the waits for a core).
// Usage: node bench.mjs [runs]   (after scripts/build-wasm)
//        node bench.mjs --dump PREFIX   writes the same audio as PREFIX.f32 (Float32) and PREFIX.json (lengths), for
//        bench-ggwave.py, and exits
import { readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Decoder } from './index.js';
import { readWav } from './test/wav.js';

const runs = Number(process.argv[2] === '--dump' ? 0 : process.argv[2] ?? 5);
const directory = fileURLToPath(new URL('../../Fixtures/', import.meta.url));
const fixtures = readdirSync(directory, { recursive: true }).filter((f) => f.endsWith('.wav')).sort()
  .map((f) => readWav(path.join(directory, f))).filter((f) => f.rate === 48000);
const seconds = fixtures.reduce((sum, f) => sum + f.samples.length / 48000, 0);
if (process.argv[2] === '--dump') {
  const prefix = process.argv[3];
  writeFileSync(`${prefix}.f32`, Buffer.concat(fixtures.map((f) => Buffer.from(f.samples.buffer, f.samples.byteOffset, f.samples.byteLength))));
  writeFileSync(`${prefix}.json`, JSON.stringify(fixtures.map((f) => f.samples.length)));
  process.exit(0);
}
const times = [], cpu = [];
let frames = 0;
for (let run = 0; run < runs; run++) {
  const start = process.hrtime.bigint(), startCPU = process.cpuUsage();
  frames = 0;
  for (const { samples } of fixtures) {
    const decoder = new Decoder(48000, { profiles: ['default', 'fast', 'robust', 'audible'] });
    for (let at = 0; at < samples.length; at += 4096) frames += decoder.process(samples.subarray(at, at + 4096)).length;
    decoder.close();
  }
  times.push(Number(process.hrtime.bigint() - start) / 1e6);
  const used = process.cpuUsage(startCPU);
  cpu.push((used.user + used.system) / 1e3);
}
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
const medianCPU = [...cpu].sort((a, b) => a - b)[Math.floor(cpu.length / 2)];
console.log(JSON.stringify({ fixtures: fixtures.length, audioSeconds: +seconds.toFixed(3), frames, runs,
  medianMs: +median.toFixed(1), allMs: times.map((t) => +t.toFixed(1)), realTimeFactor: +(seconds * 1000 / median).toFixed(1),
  medianCPUms: +medianCPU.toFixed(1), realTimeFactorCPU: +(seconds * 1000 / medianCPU).toFixed(1) }));
