// The console's beacons and live view in headless Chromium, driven over its debugging pipe (the Chrome DevTools
// Protocol, no other package): logs in, opens the project PROJECT, registers a beacon and attaches markup to it
// (shown as text), then waits for the live numbers to change (the test opens sessions meanwhile). Prints one
// JSON object of what it saw (AdminLiveBrowserTests checks it).
//   CONSOLE_SECRET=... node live-check.mjs CHROMIUM URL PROFILE-DIRECTORY PROJECT
import { spawn } from "node:child_process";
const [chromium, url, profile, projectName] = process.argv.slice(2);
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
  const $ = (id) => `document.getElementById(${JSON.stringify(id)})`;
  results.step = "login";
  await send("Page.navigate", { url }, sessionId);
  results.loginShown = await until(`document.documentElement.dataset.ready === "yes" && !${$("login-view")}.hidden`);
  await evaluate(`${$("secret")}.value = ${JSON.stringify(secret)}; ${$("login")}.requestSubmit(); true`);
  results.loggedIn = await until(`!${$("main-view")}.hidden && document.querySelectorAll("#projects tbody button").length > 0`, 20);
  results.step = "project";
  await evaluate(`Array.from(document.querySelectorAll("#projects tbody button")).find(b => b.textContent === ${JSON.stringify(projectName)}).click(); true`);
  results.liveShown = await until(`!${$("project-view")}.hidden && document.documentElement.dataset.project && ${$("live-sessions")}.textContent === "0"`, 20);
  results.sessionsBefore = await evaluate(`${$("live-sessions")}.textContent`);
  results.step = "beacon";
  await evaluate(`${$("beacon-id")}.value = "beac01"; ${$("new-beacon")}.requestSubmit(); true`);
  results.beaconListed = await until(`document.querySelectorAll("#beacons tbody tr").length === 1`, 20);
  const markup = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';
  results.markup = markup;
  await evaluate(`${$("attach-namespace")}.value = "museum"; ${$("attach-type")}.value = "exhibit"; ${$("attach-text")}.value = ${JSON.stringify(markup)};
                  ${$("new-attachment")}.requestSubmit(); true`);
  results.attachmentShown = await until(`document.querySelectorAll("#beacons .attachment").length === 1`, 20);
  results.attachmentText = await evaluate(`document.querySelector("#beacons .attachment").textContent`);
  results.markupInTable = await evaluate(`document.querySelectorAll("#beacons img, #beacons script").length`);
  results.pwned = await evaluate(`window.pwned || 0`);
  // Ready for the test's sessions: it watches the feed's watchers, then opens them.
  results.step = "live";
  results.sessionsChanged = await until(`${$("live-sessions")}.textContent === "2"`, 20);
  results.sightingsSeen = await until(`Number(${$("live-sightingsPerSecond")}.textContent) > 0`, 10);
  const sparkPoints = `(document.querySelector("#spark-sessions polyline")?.getAttribute("points") || "").split(" ").filter(Boolean).length`;
  await until(`${sparkPoints} >= 3`, 10);
  results.sparkPoints = await evaluate(`(document.querySelector("#spark-sessions polyline")?.getAttribute("points") || "").split(" ").filter(Boolean).length`);
  results.publicationsByType = await evaluate(`${$("live-publications-by-type")}.textContent`);
  console.log(JSON.stringify(results));
}
const timer = setTimeout(() => { console.log(JSON.stringify({ ...results, error: "timed out" })); browser.kill("SIGKILL"); process.exit(1); }, 50000);
main().catch((e) => console.log(JSON.stringify({ error: String(e) }))).finally(() => { clearTimeout(timer); browser.kill("SIGTERM"); });
