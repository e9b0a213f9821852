// The console page of `sotto serve --admin` in headless Chromium, driven over its debugging pipe (the Chrome
// DevTools Protocol, no other package): logs in, creates a project and a key whose label is markup, reads what
// the page shows, revokes the key (with CONSOLE_HANDOFF, once the test has opened a session with it). Prints one
// JSON object of what it saw (AdminBrowserTests checks it).
//   CONSOLE_SECRET=... node console-check.mjs CHROMIUM URL PROFILE-DIRECTORY
// (the operator's credential in the environment, never on a command line).
import { existsSync, writeFileSync } from "node:fs";
import { launch, openPage } from "./devtools.mjs";
const [chromium, url, profile] = process.argv.slice(2);
const secret = process.env.CONSOLE_SECRET || "";
// CONSOLE_HANDOFF=DIR: the new key's secret is written to DIR/secret, and the revocation waits for DIR/go.
const handoff = process.env.CONSOLE_HANDOFF || "";
const { browser, send } = launch(chromium, profile);
const results = {};
async function main() {
  results.step = "start";
  const { sessionId, evaluate, until } = await openPage(send);
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
  if (handoff) {
    // The test opens a session with the key the page showed, then says "go": the page revokes it while it is on.
    results.step = "handoff";
    writeFileSync(`${handoff}/secret`, results.secret);
    const deadline = Date.now() + 20000;
    while (!existsSync(`${handoff}/go`)) {
      if (Date.now() > deadline) throw new Error("no go from the test");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  await evaluate(`Array.from(document.querySelectorAll("#keys button")).find(b => b.textContent === "Revoke").click(); true`);
  results.revoked = await until(`(document.querySelector("#keys tbody tr td:nth-child(5)") || {}).textContent === "revoked"`);
  console.log(JSON.stringify(results));
}
const timer = setTimeout(() => { console.log(JSON.stringify({ ...results, error: "timed out" })); browser.kill("SIGKILL"); process.exit(1); }, 40000);
main().catch((e) => console.log(JSON.stringify({ error: String(e) }))).finally(() => { clearTimeout(timer); browser.kill("SIGTERM"); });
