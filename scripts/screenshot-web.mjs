// The shot itself, for scripts/screenshot-web: opens URL in a headless Chromium driven over the DevTools
// protocol (--remote-debugging-pipe: NUL-terminated JSON on descriptors 3 and 4), its microphone playing WAV,
// waits (real time, at most 30 s) until the page shows an element matching SELECTOR, then writes a PNG of
// the window (900 x 1000 CSS pixels).
// Usage: node scripts/screenshot-web.mjs CHROMIUM URL WAV OUT.png SELECTOR
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const [chromium, url, wav, out, selector] = process.argv.slice(2);
const profile = mkdtempSync(path.join(tmpdir(), 'sotto-shot-'));
const browser = spawn(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--hide-scrollbars',
  '--remote-debugging-pipe', '--autoplay-policy=no-user-gesture-required', '--use-fake-ui-for-media-stream',
  '--use-fake-device-for-media-stream', `--use-file-for-fake-audio-capture=${wav}`, `--user-data-dir=${profile}`,
  '--window-size=900,1000'], { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] });
const [toBrowser, fromBrowser] = [browser.stdio[3], browser.stdio[4]];
let nextId = 1, buffered = '';
const waiting = new Map();
fromBrowser.on('data', (chunk) => {
  buffered += chunk;
  let end;
  while ((end = buffered.indexOf('\0')) >= 0) {
    const message = JSON.parse(buffered.slice(0, end));
    buffered = buffered.slice(end + 1);
    const pending = waiting.get(message.id);
    if (!pending) continue;
    waiting.delete(message.id);
    if (message.error) pending.reject(new Error(`${pending.method}: ${message.error.message}`)); else pending.resolve(message.result);
  }
});
function send(method, params = {}, sessionId) {
  const id = nextId++;
  toBrowser.write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + '\0');
  return new Promise((resolve, reject) => waiting.set(id, { resolve, reject, method }));
}

let status = 0;
const timer = setTimeout(() => { console.error('error: no screenshot within 60 s'); browser.kill('SIGKILL'); process.exit(2); }, 60_000);
try {
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  await send('Emulation.setDeviceMetricsOverride', { width: 900, height: 1000, deviceScaleFactor: 1, mobile: false }, sessionId);
  await send('Page.enable', {}, sessionId);
  await send('Page.navigate', { url }, sessionId);
  const deadline = Date.now() + 30_000;
  let shown = false;
  while (!shown && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    const { result } = await send('Runtime.evaluate', { expression: `document.querySelector(${JSON.stringify(selector)}) !== null` }, sessionId);
    shown = result.value === true;
  }
  if (!shown) { console.error(`warning: nothing matched ${selector} within 30 s; the shot shows the page as it is`); status = 1; }
  await new Promise((resolve) => setTimeout(resolve, 300));  // the last events drawn
  const { data } = await send('Page.captureScreenshot', { format: 'png' }, sessionId);
  writeFileSync(out, Buffer.from(data, 'base64'));
} catch (error) {
  console.error(`error: ${error.message}`);
  status = 2;
} finally {
  clearTimeout(timer);
  browser.kill('SIGTERM');
  await new Promise((resolve) => browser.on('exit', resolve));
  rmSync(profile, { recursive: true, force: true });
}
process.exit(status);
