// The package in a real browser (headless Chromium, started here, pages served from a loopback HTTP server of
// this test): `play` renders a frame in an OfflineAudioContext and the AudioWorklet processor (worklet.js)
// decodes the rendering in another, at 44.1 and 48 kHz. Skipped when there is no Chromium (Debian: chromium).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = fileURLToPath(new URL('../', import.meta.url));
const chromium = process.env.CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };

/** A loopback server of `root`; `results` gets each body POSTed to /result. */
function serve(results) {
  const server = createServer((request, response) => {
    if (request.method === 'POST' && request.url === '/result') {
      let body = '';
      request.on('data', (chunk) => { body += chunk; });
      request.on('end', () => { response.writeHead(204).end(); results(body); });
      return;
    }
    const file = path.normalize(path.join(root, decodeURIComponent(new URL(request.url, 'http://x').pathname)));
    if (!file.startsWith(root) || !existsSync(file)) { response.writeHead(404).end(); return; }
    response.writeHead(200, { 'content-type': types[path.extname(file)] ?? 'application/octet-stream' });
    response.end(readFileSync(file));
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** Opens `url` in a headless Chromium of its own and returns what the page reports, within 60 s. */
async function pageResult(url, waitForResult) {
  const profile = mkdtempSync(path.join(tmpdir(), 'sotto-chromium-'));
  const browser = spawn(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--autoplay-policy=no-user-gesture-required', `--user-data-dir=${profile}`, url],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise((resolve) => browser.on('exit', resolve));
  let timer;
  let stderr = '';
  browser.stderr.on('data', (chunk) => { stderr += chunk; });
  try {
    return await Promise.race([
      waitForResult(),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no result from the page within 60 s\n${stderr.slice(-2000)}`)), 60_000); }),
      exited.then((code) => { throw new Error(`chromium exited (${code})\n${stderr.slice(-2000)}`); }),
    ]);
  } finally {
    clearTimeout(timer);
    browser.kill('SIGTERM');
    await exited;
    // Chromium's helper processes may still be writing into the profile for a moment after the browser exits:
    // retry, and never fail the test on a temporary directory left behind.
    try { rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 }); } catch {}
  }
}

test('in Chromium: play renders a frame, the AudioWorklet decodes it', { skip: !chromium && 'no Chromium', timeout: 200_000 }, async () => {
  let deliver = () => {};
  const server = await serve((body) => deliver(body));
  try {
    for (const rate of [44100, 48000]) {
      const url = `http://127.0.0.1:${server.address().port}/test/browser/page.html?rate=${rate}`;
      const text = await pageResult(url, () => new Promise((resolve) => { deliver = resolve; }));
      const result = JSON.parse(text);
      assert.equal(result.error, undefined, result.error);
      assert.deepEqual(result.errors, []);
      assert.deepEqual(result.frames.map((f) => [f.profile, Buffer.from(f.token).toString()]), [['default', 'Sotto']], text);
      assert.ok(Math.abs(result.frames[0].start_time_s - 0.5) < 0.002, `start ${result.frames[0].start_time_s}`);
    }
  } finally {
    server.close();
  }
});
