// The console page of `sotto serve --admin` in headless Chromium, driven over its debugging pipe (the Chrome
// DevTools Protocol, no other package): logs in, creates a project and a key whose label is markup, reads what
// the page shows, revokes the key. Prints one JSON object of what it saw (AdminBrowserTests checks it).
//   CONSOLE_SECRET=... node console-check.mjs CHROMIUM URL PROFILE-DIRECTORY
// (the operator's credential in the environment, never on a command line).
import { spawn } from "node:child_process";
const [chromium, url, profile] = process.argv.slice(2);
const secret = process.env.CONSOLE_SECRET || "";
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
const results = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function main() {
  results.step = "start";
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
  results.step = "navigate";
  await send("Page.navigate", { url }, sessionId);
  // The page's script has wired its forms (before that, a submit would be the browser's own).
  results.loginShown = await until(`document.documentElement.dataset.ready === "yes" && !document.getElementById("login-view").hidden`);
  await evaluate(`document.getElementById("secret").value = ${JSON.stringify(secret)}; document.getElementById("login").requestSubmit(); true`);
  results.loggedIn = await until(`!document.getElementById("main-view").hidden`, 20);
  results.operator = await evaluate(`document.getElementById("who").textContent`);
  await evaluate(`document.getElementById("project-name").value = "museum"; document.getElementById("new-project").requestSubmit(); true`);
  results.projectListed = await until(`document.getElementById("current-project").textContent === "museum"`);
  const label = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';
  results.label = label;
  await evaluate(`document.getElementById("key-label").value = ${JSON.stringify(label)}; document.getElementById("new-key").requestSubmit(); true`);
  results.keyShown = await until(`document.querySelectorAll("#keys tbody tr").length === 1 && !document.getElementById("new-secret-box").hidden`);
  results.secret = await evaluate(`document.getElementById("new-secret").textContent`);
  results.labelText = await evaluate(`document.querySelector("#keys tbody tr td:nth-child(2)").textContent`);
  results.markupInTable = await evaluate(`document.querySelectorAll("#keys img, #keys script").length`);
  results.pwned = await evaluate(`window.pwned || 0`);
  await evaluate(`Array.from(document.querySelectorAll("#keys button")).find(b => b.textContent === "Revoke").click(); true`);
  results.revoked = await until(`(document.querySelector("#keys tbody tr td:nth-child(5)") || {}).textContent === "revoked"`);
  console.log(JSON.stringify(results));
}
const timer = setTimeout(() => { console.log(JSON.stringify({ ...results, error: "timed out" })); browser.kill("SIGKILL"); process.exit(1); }, 40000);
main().catch((e) => console.log(JSON.stringify({ error: String(e) }))).finally(() => { clearTimeout(timer); browser.kill("SIGTERM"); });
