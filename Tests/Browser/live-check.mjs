// The console's beacons and live view in headless Chromium, driven over its debugging pipe (the Chrome DevTools
// Protocol, no other package): logs in, opens the project PROJECT, registers a beacon and attaches markup to it
// (shown as text), then waits for the live numbers to change (the test opens sessions meanwhile). Prints one
// JSON object of what it saw (AdminLiveBrowserTests checks it).
//   CONSOLE_SECRET=... node live-check.mjs CHROMIUM URL PROFILE-DIRECTORY PROJECT
import { launch, openPage } from "./devtools.mjs";
const [chromium, url, profile, projectName] = process.argv.slice(2);
const secret = process.env.CONSOLE_SECRET || "";
const { browser, send } = launch(chromium, profile);
const results = {};
async function main() {
  results.step = "start";
  const { sessionId, evaluate, until } = await openPage(send);
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
