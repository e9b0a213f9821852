// Decode speed in headless Chromium, the browser twin of bench.mjs: the same 48 kHz WAV fixtures, read here and
// served from a loopback HTTP server as Float32 samples, decoded by test/browser/bench.html with the same loop
// (all four profiles, 4096-sample chunks, a new decoder per fixture) on the page's main thread. Prints the
// median wall time of `runs` passes and the real-time factor, as bench.mjs does.
// Usage: node bench-browser.mjs [runs]   (after scripts/build-wasm; CHROMIUM=path, default /usr/bin/chromium)
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readWav } from './test/wav.js';

const runs = Number(process.argv[2] ?? 5);
const root = fileURLToPath(new URL('./', import.meta.url));
const chromium = process.env.CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
if (!chromium) { console.error('error: no Chromium (Debian: chromium; or CHROMIUM=path)'); process.exit(2); }
const directory = fileURLToPath(new URL('../../Fixtures/', import.meta.url));
const fixtures = readdirSync(directory, { recursive: true }).filter((f) => f.endsWith('.wav')).sort()
  .map((f) => readWav(path.join(directory, f))).filter((f) => f.rate === 48000);
const seconds = fixtures.reduce((sum, f) => sum + f.samples.length / 48000, 0);
const audio = Buffer.concat(fixtures.map((f) => Buffer.from(f.samples.buffer, f.samples.byteOffset, f.samples.byteLength)));
const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };

let deliver;
const result = new Promise((resolve) => { deliver = resolve; });
const server = createServer((request, response) => {
  const url = new URL(request.url, 'http://x').pathname;
  if (request.method === 'POST' && url === '/result') {
    let body = '';
    request.on('data', (chunk) => { body += chunk; });
    request.on('end', () => { response.writeHead(204).end(); deliver(JSON.parse(body)); });
    return;
  }
  if (url === '/bench-audio.json') { response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(fixtures.map((f) => f.samples.length))); return; }
  if (url === '/bench-audio') { response.writeHead(200, { 'content-type': 'application/octet-stream' }).end(audio); return; }
  const file = path.normalize(path.join(root, decodeURIComponent(url)));
  if (!file.startsWith(root) || !existsSync(file)) { response.writeHead(404).end(); return; }
  response.writeHead(200, { 'content-type': types[path.extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const profile = mkdtempSync(path.join(tmpdir(), 'sotto-bench-chromium-'));
const browser = spawn(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', `--user-data-dir=${profile}`,
  `http://127.0.0.1:${server.address().port}/test/browser/bench.html?runs=${runs}`], { stdio: 'ignore' });
const timer = setTimeout(() => deliver({ error: 'no result within 300 s' }), 300_000);
const outcome = await result;
clearTimeout(timer);
browser.kill('SIGTERM');
server.close();
setTimeout(() => rmSync(profile, { recursive: true, force: true }), 500);
if (outcome.error) { console.error(`error: ${outcome.error}`); process.exitCode = 2; } else {
  const times = [...outcome.allMs].sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  console.log(JSON.stringify({ fixtures: fixtures.length, audioSeconds: +seconds.toFixed(3), frames: outcome.frames, runs, medianMs: median,
    allMs: outcome.allMs, realTimeFactor: +(seconds * 1000 / median).toFixed(1), browser: outcome.userAgent }));
}
