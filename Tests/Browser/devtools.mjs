// Headless Chromium driven over its debugging pipe (the Chrome DevTools Protocol, no other package): what the
// console's browser checks (console-check.mjs, live-check.mjs) share.
import { spawn } from "node:child_process";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts Chromium with its profile in the directory `profile`; returns its process and `send(method, params,
// sessionId)`, which resolves with the protocol's answer.
export function launch(chromium, profile) {
  const browser = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
    `--user-data-dir=${profile}`, "about:blank"], { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
  const out = browser.stdio[3], input = browser.stdio[4];
  let id = 0, buffer = "";
  const waiting = new Map();
  input.on("data", (chunk) => {
    buffer += chunk.toString();
    let end;
    while ((end = buffer.indexOf("\0")) >= 0) {
      const message = JSON.parse(buffer.slice(0, end));
      buffer = buffer.slice(end + 1);
      if (message.id && waiting.has(message.id)) { waiting.get(message.id)(message); waiting.delete(message.id); }
    }
  });
  function send(method, params = {}, sessionId) {
    const message = { id: ++id, method, params };
    if (sessionId) message.sessionId = sessionId;
    out.write(JSON.stringify(message) + "\0");
    return new Promise((resolve) => waiting.set(message.id, resolve));
  }
  return { browser, send };
}

// Opens a blank page; returns its session, `evaluate(expression)` (the expression's value) and
// `until(expression, seconds)` (polls it every 100 ms; true once it holds, false after `seconds`).
export async function openPage(send) {
  const { result: { targetId } } = await send("Target.createTarget", { url: "about:blank" });
  const { result: { sessionId } } = await send("Target.attachToTarget", { targetId, flatten: true });
  const evaluate = async (expression) => {
    const answer = await send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, sessionId);
    return answer.result?.result?.value;
  };
  const until = async (expression, seconds = 10) => {
    for (let i = 0; i < seconds * 10; i++) { if (await evaluate(expression)) return true; await sleep(100); }
    return false;
  };
  return { sessionId, evaluate, until };
}
