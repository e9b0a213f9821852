// The page of `sotto serve --web`: a session of the exchange on a WebSocket (/session, one protobuf frame of
// exchange.proto per binary message), publish and subscribe, found/lost/expired as they come, the session's
// token played through the speaker and others' heard through the microphone (the wasm modem of bindings/js,
// served under /sotto/). Everything received is shown with textContent, never as HTML.
// Test hooks in the fragment (never sent to the server): #key=...&subscribe=NS/TYPE[,NS/TYPE...]&publish=NS/TYPE/TTL/CONTENT&listen=1&render=1
// (render: the session's token rendered as it would play, in each profile the service directs, its samples on the
// console as base64 Float32).
import { play, listen, airtime } from './sotto/index.js';

// ---- protobuf (proto3) for the few messages the page uses ----
class Writer {
  constructor() { this.bytes = []; }
  varint(value) {
    let v = BigInt.asUintN(64, BigInt(value));
    while (v >= 0x80n) { this.bytes.push(Number(v & 0x7fn) | 0x80); v >>= 7n; }
    this.bytes.push(Number(v));
  }
  tag(field, wire) { this.varint((field << 3) | wire); }
  uint(field, value) { if (value) { this.tag(field, 0); this.varint(value); } }
  bool(field, value) { if (value) { this.tag(field, 0); this.varint(1); } }
  bytes_(field, bytes) { if (bytes.length) { this.tag(field, 2); this.varint(bytes.length); for (const b of bytes) this.bytes.push(b); } }
  string(field, text) { this.bytes_(field, new TextEncoder().encode(text)); }
  message(field, build) { const inner = new Writer(); build(inner); this.tag(field, 2); this.varint(inner.bytes.length); this.bytes.push(...inner.bytes); }
  double(field, value) {
    if (!value) return;
    this.tag(field, 1);
    const view = new DataView(new ArrayBuffer(8));
    view.setFloat64(0, value, true);
    for (let i = 0; i < 8; i++) this.bytes.push(view.getUint8(i));
  }
  finish() { return new Uint8Array(this.bytes); }
}

// Reads a message into {field: [values]}: varints as Numbers, length-delimited as Uint8Array, fixed64 as doubles.
function read(bytes) {
  const fields = {};
  let i = 0;
  const varint = () => {
    let result = 0n, shift = 0n;
    for (;;) {
      if (i >= bytes.length) throw new Error('truncated frame');
      const b = bytes[i++];
      result |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return result;
      shift += 7n;
      if (shift > 63n) throw new Error('bad varint');
    }
  };
  while (i < bytes.length) {
    const key = Number(varint());
    const field = key >>> 3, wire = key & 7;
    let value;
    if (wire === 0) value = Number(BigInt.asIntN(64, varint()));
    else if (wire === 2) {
      const length = Number(varint());
      if (i + length > bytes.length) throw new Error('truncated frame');
      value = bytes.subarray(i, i + length); i += length;
    } else if (wire === 1) {
      if (i + 8 > bytes.length) throw new Error('truncated frame');
      value = new DataView(bytes.buffer, bytes.byteOffset + i, 8).getFloat64(0, true); i += 8;
    } else if (wire === 5) { i += 4; continue; }
    else throw new Error(`unsupported wire type ${wire}`);
    (fields[field] ??= []).push(value);
  }
  return fields;
}
const text = (value) => (value ? new TextDecoder().decode(value) : '');
const first = (fields, n, fallback) => (fields[n] ? fields[n][fields[n].length - 1] : fallback);
const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
const message = (bytes) => { const m = read(bytes ?? new Uint8Array()); return { namespace: text(first(m, 1)), type: text(first(m, 2)), content: text(first(m, 3)) }; };

// ---- the page ----
const TOKEN_KIND = 0x10;
const $ = (id) => document.getElementById(id);
const events = $('events');
// profile: the modem profile the session's token plays in, as the service's link adaptation directs
// (BroadcastProfile: "default", or "robust" when others hear this page's frames weakly or not at all).
// rendered: the profiles the render hook has logged a rendering in.
const state = { socket: null, token: null, nextOp: 1, heartbeat: null, ops: new Map(), audio: null, profile: 'default', rendered: new Set() };
const BROADCAST_PROFILES = ['default', 'robust'];  // BroadcastProfile.Profile's values, in order
const RENDER_RATE = 48000;  // Hz, of the rendered token (the download and the render hook)

function show(kind, line) {
  const item = document.createElement('li');
  item.className = kind;
  item.dataset.kind = kind;
  item.textContent = `${new Date().toLocaleTimeString()} ${kind}: ${line}`;
  events.prepend(item);
  while (events.childElementCount > 200) events.lastElementChild.remove();
  console.log(`sotto-event ${kind} ${line}`);  // the same line for the browser's console (and tests' logs)
}
function status(line) { $('status').textContent = line; }

function send(build) {
  if (state.socket?.readyState !== WebSocket.OPEN) { show('error', 'not connected'); return; }
  const writer = new Writer();
  build(writer);
  state.socket.send(writer.finish());
}

function connect(key) {
  state.socket?.close();
  const socket = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/session`);
  socket.binaryType = 'arraybuffer';
  state.socket = socket;
  state.profile = 'default';  // a new session starts in the default profile
  $('profile').textContent = state.profile;
  status('connecting');
  socket.onopen = () => {
    send((w) => w.message(1, (h) => { h.string(1, key); h.string(2, 'sotto-web/1'); h.bool(3, true); }));
  };
  socket.onmessage = ({ data }) => {
    if (!(data instanceof ArrayBuffer)) { show('error', 'the service sent a text message'); return; }
    try { receive(read(new Uint8Array(data))); } catch (error) { show('error', `a frame the page cannot read: ${error.message}`); }
  };
  socket.onclose = ({ code, reason }) => {
    clearInterval(state.heartbeat);
    for (const id of ['publish', 'subscribe', 'play', 'save']) $(id).disabled = true;
    status(`disconnected (${code}${reason ? `: ${reason}` : ''})`);
  };
  socket.onerror = () => status('the connection failed');
}

function receive(frame) {
  if (frame[1]) {
    const welcome = read(first(frame, 1));
    status(`connected, project ${text(first(welcome, 4))}`);
    const interval = first(welcome, 6, 5000);
    clearInterval(state.heartbeat);
    state.heartbeat = setInterval(() => send((w) => w.message(7, () => {})), Math.max(500, interval));
    for (const id of ['publish', 'subscribe']) $(id).disabled = false;
    document.body.dataset.session = 'open';
    autoStart();
  } else if (frame[2]) {
    state.token = first(read(first(frame, 2)), 1, new Uint8Array());
    $('token').textContent = state.token.length ? hex(state.token) : 'none';
    $('play').disabled = $('save').disabled = !state.token.length;
    console.log(`sotto-event token ${hex(state.token)}`);
    renderHook();
  } else if (frame[3]) {
    const op = read(first(frame, 3));
    const id = first(op, 1, 0), what = state.ops.get(id) ?? `operation ${id}`;
    const st = first(op, 2, 0);
    if (st === 1) show('error', `${what} refused: ${text(first(op, 4))}`);
    else if (st === 2) show('ended', `${what} ended`);
    else show('active', `${what} active`);
  } else if (frame[4] || frame[5]) {
    const kind = frame[4] ? 'found' : 'lost';
    const body = read(first(frame, frame[4] ? 4 : 5));
    const m = message(first(body, 2));
    const id = first(body, 1, 0);
    show(kind, `${m.namespace}/${m.type}: ${m.content} [${state.ops.get(id) ?? `operation ${id}`}]`);
  } else if (frame[11]) {
    // Link adaptation: the service moves this session's token to another profile (listeners decode every profile).
    const value = first(read(first(frame, 11)), 1, 0);
    const profile = BROADCAST_PROFILES[value];
    if (!profile) { show('error', `the service asked for an unknown profile (${value}); the token stays in ${state.profile}`); return; }
    if (profile !== state.profile) {
      state.profile = profile;
      $('profile').textContent = profile;
      show('profile', profile === 'robust'
        ? 'robust: others hear this page weakly or not at all, so its token now plays in the robust profile (twice as long)'
        : 'default: others hear this page well again');
      renderHook();
    }
  } else if (frame[7]) {
    const id = first(read(first(frame, 7)), 1, 0);
    show('expired', state.ops.get(id) ?? `operation ${id}`);
  } else if (frame[9]) {
    const error = read(first(frame, 9));
    show('error', text(first(error, 2)) || 'an error');
  }
}

// ttl: seconds (1 to 86 400), or undefined for the service's default (300 s).
function publish(namespace, type, content, ttl) {
  if (ttl !== undefined && !(Number.isInteger(ttl) && ttl >= 1 && ttl <= 86400)) {
    show('error', 'a TTL is a whole number of seconds from 1 to 86400');
    return;
  }
  const op = state.nextOp++;
  state.ops.set(op, `publication ${namespace ? namespace + '/' : ''}${type}`);
  send((w) => w.message(2, (p) => {
    p.uint(1, op);
    p.message(2, (m) => { m.string(1, namespace); m.string(2, type); m.string(3, content); });
    if (ttl !== undefined) p.message(3, (strategy) => strategy.uint(2, ttl));
  }));
}

function subscribe(namespace, type) {
  const op = state.nextOp++;
  state.ops.set(op, `subscription ${namespace ? namespace + '/' : ''}${type}`);
  send((w) => w.message(4, (s) => {
    s.uint(1, op);
    s.message(2, (f) => { f.uint(1, 1); f.string(2, namespace); f.string(3, type); });
  }));
}

async function hear() {
  const line = $('microphone');
  if (!navigator.mediaDevices?.getUserMedia) {
    line.textContent = 'This browser gives the page no microphone (a page needs https, or localhost).';
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
  } catch (error) {
    line.textContent = error?.name === 'NotAllowedError'
      ? 'The microphone was refused: allow it for this site in the browser to hear others. Publishing and subscribing still work.'
      : `No microphone: ${error?.message ?? error}`;
    document.body.dataset.microphone = 'refused';
    show('error', line.textContent);
    return;
  }
  state.audio ??= new AudioContext();
  await state.audio.resume();
  watchLevel(state.audio, stream, line);
  await listen(state.audio, stream, {
    onFrame: (frame) => {
      show('heard', `token ${hex(frame.token)} (SNR ${frame.snr_db.toFixed(1)} dB)`);
      if (state.socket?.readyState !== WebSocket.OPEN) return;  // heard before (or after) the session: not reported
      send((w) => w.message(6, (o) => o.message(1, (s) => { s.bytes_(1, frame.token); s.double(2, frame.snr_db); s.double(3, frame.level_dbfs); })));
    },
    onError: (message) => { line.textContent = `The decoder stopped: ${message}`; },
  });
  line.textContent = `listening at ${state.audio.sampleRate} Hz`;
  document.body.dataset.microphone = 'on';
}

// A microphone that delivers silence (muted, a dead input) or clips (too loud, too near the speaker) hears no
// token: the page says so. Every 250 ms it looks at the last 2048 samples: silent below -80 dBFS for a second
// on end; clipping when 1 % of them are at full scale (0.99 and above).
function watchLevel(context, stream, line) {
  const analyser = context.createAnalyser();
  analyser.fftSize = 2048;
  context.createMediaStreamSource(stream).connect(analyser);
  const samples = new Float32Array(analyser.fftSize);
  let quiet = 0, shown = 'ok';
  const say = (kind, text) => {
    if (kind === shown) return;
    shown = kind;
    document.body.dataset.level = kind;
    if (kind === 'ok') { show('microphone', 'the level is good again'); return; }
    line.textContent = text;
    show('warning', text);
  };
  setInterval(() => {
    analyser.getFloatTimeDomainData(samples);
    let peak = 0, clipped = 0;
    for (const x of samples) { const a = Math.abs(x); if (a > peak) peak = a; if (a >= 0.99) clipped++; }
    quiet = peak < 1e-4 ? quiet + 1 : 0;
    if (quiet >= 4) say('silent', 'The microphone delivers silence: check that it is not muted and that the right input is chosen.');
    else if (clipped >= samples.length / 100) say('clipping', 'The microphone is clipping (too loud): turn its input level down or move it away from the speaker.');
    else if (quiet === 0) say('ok');
  }, 250);
}

// The modem token of a session's token: the kind byte (Payload.tokenKind), then the token.
const modemToken = () => [TOKEN_KIND, ...state.token];

async function playToken() {
  if (!state.token?.length) return;
  state.audio ??= new AudioContext();
  await state.audio.resume();
  play(state.audio, modemToken(), { profile: state.profile });
}

// The session's token as it plays (in the profile the service directs), rendered offline (the same `play` into an
// OfflineAudioContext): mono Float32 at RENDER_RATE, a quarter second of silence before and after.
async function renderToken(profile = state.profile) {
  const seconds = airtime(profile, modemToken().length) + 0.5;
  const context = new OfflineAudioContext(1, Math.ceil(seconds * RENDER_RATE), RENDER_RATE);
  play(context, modemToken(), { profile, when: 0.25 });
  return (await context.startRendering()).getChannelData(0);
}

// The rendered token as a 16-bit WAV file the browser downloads (to play it from another device).
async function saveToken() {
  if (!state.token?.length) return;
  const samples = await renderToken();
  const wav = new DataView(new ArrayBuffer(44 + 2 * samples.length));
  const ascii = (at, text) => { for (let i = 0; i < text.length; i++) wav.setUint8(at + i, text.charCodeAt(i)); };
  ascii(0, 'RIFF'); wav.setUint32(4, 36 + 2 * samples.length, true); ascii(8, 'WAVEfmt ');
  wav.setUint32(16, 16, true); wav.setUint16(20, 1, true); wav.setUint16(22, 1, true);
  wav.setUint32(24, RENDER_RATE, true); wav.setUint32(28, 2 * RENDER_RATE, true); wav.setUint16(32, 2, true); wav.setUint16(34, 16, true);
  ascii(36, 'data'); wav.setUint32(40, 2 * samples.length, true);
  samples.forEach((x, i) => wav.setInt16(44 + 2 * i, Math.round(Math.max(-1, Math.min(1, x)) * 32767), true));
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([wav], { type: 'audio/wav' }));
  link.download = `sotto-token-${hex(state.token)}-${state.profile}.wav`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// The render hook (#render=1): once the session has a token, and again in each profile the service moves it to,
// the rendered samples on the console: `rendered TOKEN RATE PROFILE I/N BASE64`, base64 of little-endian Float32
// in lines of 16 KiB.
function renderHook() {
  if (hooks.get('render') !== '1' || !state.token?.length || state.rendered.has(state.profile)) return;
  state.rendered.add(state.profile);
  logRendering(state.profile);
}
async function logRendering(profile) {
  try {
    const samples = await renderToken(profile);
    const bytes = new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength);
    let binary = '';
    for (let i = 0; i < bytes.length; i += 8192) binary += String.fromCharCode(...bytes.subarray(i, i + 8192));
    const base64 = btoa(binary), size = 16384, parts = Math.ceil(base64.length / size);
    for (let i = 0; i < parts; i++) console.log(`sotto-event rendered ${hex(modemToken())} ${RENDER_RATE} ${profile} ${i + 1}/${parts} ${base64.slice(i * size, (i + 1) * size)}`);
  } catch (error) {
    show('error', `rendering the token failed: ${error.message}`);
  }
}

const hooks = new URLSearchParams(location.hash.slice(1));
function autoStart() {
  for (const wanted of (hooks.get('subscribe') ?? '').split(',').filter(Boolean)) {
    const [namespace, type] = wanted.includes('/') ? wanted.split('/', 2) : ['', wanted];
    [$('sub-ns').value, $('sub-type').value] = [namespace, type];
    subscribe(namespace, type);
  }
  // #publish=NS/TYPE/TTL/CONTENT (the content may hold '/'), through the form as a user would fill it.
  const wanted = hooks.get('publish');
  if (wanted) {
    const [namespace, type, ttl, ...content] = wanted.split('/');
    [$('pub-ns').value, $('pub-type').value, $('pub-ttl').value, $('pub-content').value] = [namespace, type, ttl, content.join('/')];
    $('publish').click();
  }
}

$('connect').onclick = () => connect($('key').value.trim());
$('publish').onclick = () => {
  const ttl = $('pub-ttl').value.trim();
  publish($('pub-ns').value.trim(), $('pub-type').value.trim(), $('pub-content').value, ttl === '' ? undefined : Number(ttl));
};
$('subscribe').onclick = () => subscribe($('sub-ns').value.trim(), $('sub-type').value.trim());
$('listen').onclick = () => hear();
$('play').onclick = () => playToken();
$('save').onclick = () => saveToken();
if (hooks.get('key')) { $('key').value = hooks.get('key'); connect(hooks.get('key')); }
if (hooks.get('listen') === '1') hear();  // at once, session or not (as the button)
