// The shot itself, for scripts/screenshot-console: logs in to the console at URL in a headless Chromium (driven over
// the DevTools protocol by Tests/Browser/devtools.mjs), opens the project PROJECT, registers the beacon BEACON with
// an attachment, waits until the live view counts at least SESSIONS sessions and some sightings a second (a `sotto
// load` run is under way) and its sparklines have a few points, then writes a PNG of the whole page (1000 CSS pixels
// wide). Prints one JSON object of what it saw; exits 0 when the view counted the load, 1 when the shot was taken
// without it, 2 on an error.
//   CONSOLE_SECRET=... node scripts/screenshot-console.mjs CHROMIUM URL PROJECT BEACON SESSIONS OUT.png
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { launch, openPage, sleep } from "../Tests/Browser/devtools.mjs";

const [chromium, url, projectName, beacon, sessions, out] = process.argv.slice(2);
const profile = mkdtempSync(path.join(tmpdir(), "sotto-console-shot-"));
const { browser, send } = launch(chromium, profile);
const seen = { step: "start" };
async function main() {
  const { sessionId, evaluate, until } = await openPage(send);
  await send("Emulation.setDeviceMetricsOverride", { width: 1000, height: 1200, deviceScaleFactor: 1, mobile: false }, sessionId);
  const $ = (id) => `document.getElementById(${JSON.stringify(id)})`;
  seen.step = "login";
  await send("Page.navigate", { url }, sessionId);
  if (!await until(`document.documentElement.dataset.ready === "yes" && !${$("login-view")}.hidden`, 20)) throw new Error("no login form");
  await evaluate(`${$("secret")}.value = ${JSON.stringify(process.env.CONSOLE_SECRET || "")}; ${$("login")}.requestSubmit(); true`);
  if (!await until(`!${$("main-view")}.hidden && document.querySelectorAll("#projects tbody button").length > 0`, 20)) throw new Error("not logged in");
  seen.step = "project";
  await evaluate(`Array.from(document.querySelectorAll("#projects tbody button")).find(b => b.textContent === ${JSON.stringify(projectName)}).click(); true`);
  if (!await until(`!${$("project-view")}.hidden && document.documentElement.dataset.project`, 20)) throw new Error("no project view");
  seen.step = "beacon";
  await evaluate(`${$("beacon-id")}.value = ${JSON.stringify(beacon)}; ${$("new-beacon")}.requestSubmit(); true`);
  await until(`document.querySelectorAll("#beacons tbody tr").length === 1`, 20);
  await evaluate(`${$("attach-namespace")}.value = "museum"; ${$("attach-type")}.value = "exhibit";
                  ${$("attach-text")}.value = "The Night Watch, Rembrandt, 1642"; ${$("new-attachment")}.requestSubmit(); true`);
  await until(`document.querySelectorAll("#beacons .attachment").length === 1`, 20);
  seen.step = "live";
  const points = `(document.querySelector("#spark-sightingsPerSecond polyline")?.getAttribute("points") || "").split(" ").filter(Boolean).length`;
  seen.counted = await until(`Number(${$("live-sessions")}.textContent) >= ${Number(sessions)} && Number(${$("live-sightingsPerSecond")}.textContent) > 0 && ${points} >= 24`, 60);
  seen.sessions = await evaluate(`${$("live-sessions")}.textContent`);
  seen.sightingsPerSecond = await evaluate(`${$("live-sightingsPerSecond")}.textContent`);
  seen.foundPerSecond = await evaluate(`${$("live-foundPerSecond")}.textContent`);
  seen.sparkPoints = await evaluate(points);
  await sleep(300);  // the last numbers drawn
  const height = Math.ceil(await evaluate(`document.documentElement.scrollHeight`));
  await send("Emulation.setDeviceMetricsOverride", { width: 1000, height, deviceScaleFactor: 1, mobile: false }, sessionId);
  const shot = await send("Page.captureScreenshot", { format: "png" }, sessionId);
  if (!shot.result?.data) throw new Error("no screenshot: " + JSON.stringify(shot.error || {}));
  writeFileSync(out, Buffer.from(shot.result.data, "base64"));
  seen.step = "done";
}
let status = 2;
const timer = setTimeout(() => { console.log(JSON.stringify({ ...seen, error: "timed out after 120 s" })); browser.kill("SIGKILL"); process.exit(2); }, 120_000);
try {
  await main();
  status = seen.counted ? 0 : 1;
  console.log(JSON.stringify(seen));
} catch (error) {
  console.log(JSON.stringify({ ...seen, error: String(error) }));
} finally {
  clearTimeout(timer);
  browser.kill("SIGTERM");
  await new Promise((resolve) => browser.on("exit", resolve));
  rmSync(profile, { recursive: true, force: true });
}
process.exit(status);
