/// The operator's console: a page served by the admin listener at `/` (`/console.js`, `/console.css`), written
/// here and embedded in the program (no CDN, nothing fetched from elsewhere, works without internet). It logs
/// in with the operator's credential, lists projects and their keys, creates and revokes keys (a new key's
/// secret is shown once); per project, registers beacons and manages their attachments, visibility and
/// decommissioning (a new rotating beacon's key file shown once), and shows the live view: numbers updated by
/// server-sent events every second, with sparklines of the last five minutes (inline SVG drawn by the script). Everything it shows from the API is set with `textContent`: a label holding HTML or
/// script is shown as text. The listener's Content-Security-Policy allows scripts and styles from its own
/// origin only.
enum ConsolePage {
    /// Path to (media type, body).
    static let files: [String: (type: String, body: String)] = [
        "/": ("text/html; charset=utf-8", html),
        "/index.html": ("text/html; charset=utf-8", html),
        "/console.js": ("text/javascript; charset=utf-8", script),
        "/console.css": ("text/css; charset=utf-8", style),
    ]

    static let html = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Sotto console</title>
        <link rel="stylesheet" href="/console.css">
        <script src="/console.js" defer></script>
        </head>
        <body>
        <header><h1>Sotto console</h1><span id="who"></span> <button id="logout" hidden>Log out</button></header>
        <p id="status" role="status"></p>
        <section id="login-view">
          <form id="login">
            <label>Operator credential <input id="secret" type="password" autocomplete="current-password" required></label>
            <button type="submit">Log in</button>
          </form>
        </section>
        <section id="main-view" hidden>
          <h2>Projects</h2>
          <table id="projects"><thead><tr><th>Name</th><th>Id</th><th>Max sessions</th><th>State</th></tr></thead><tbody></tbody></table>
          <form id="new-project">
            <label>New project <input id="project-name" required maxlength="100"></label>
            <button type="submit">Create</button>
          </form>
          <h2>Keys of <span id="current-project">(choose a project)</span></h2>
          <table id="keys"><thead><tr><th>Id</th><th>Label</th><th>Rate /s</th><th>Burst</th><th>State</th><th>Last use</th><th>Max sessions</th><th></th></tr></thead><tbody></tbody></table>
          <form id="new-key">
            <label>Label <input id="key-label" maxlength="200"></label>
            <label>Requests/s <input id="key-rate" type="number" min="0.001" step="any" value="50"></label>
            <label>Burst <input id="key-burst" type="number" min="1" step="any" value="200"></label>
            <label>Max sessions <input id="key-max-sessions" type="number" min="1" max="10000000" step="1" placeholder="project's"></label>
            <button type="submit">Create key</button>
          </form>
          <p id="new-secret-box" hidden>New key, shown once: <code id="new-secret"></code></p>
          <section id="project-view" hidden>
            <h2>Live</h2>
            <table id="live"><tbody>
              <tr><th>Sessions</th><td id="live-sessions">0</td><td><svg id="spark-sessions" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Publications</th><td id="live-publications">0</td><td><svg id="spark-publications" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Subscriptions</th><td id="live-subscriptions">0</td><td><svg id="spark-subscriptions" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Sightings/s</th><td id="live-sightingsPerSecond">0</td><td><svg id="spark-sightingsPerSecond" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Found/s</th><td id="live-foundPerSecond">0</td><td><svg id="spark-foundPerSecond" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Lost/s</th><td id="live-lostPerSecond">0</td><td><svg id="spark-lostPerSecond" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Invalid tokens/s</th><td id="live-invalidTokensPerSecond">0</td><td><svg id="spark-invalidTokensPerSecond" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Rate-limited/s</th><td id="live-rateLimitedPerSecond">0</td><td><svg id="spark-rateLimitedPerSecond" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
              <tr><th>Median SNR (dB)</th><td id="live-medianSNR">-</td><td><svg id="spark-medianSNR" class="spark" viewBox="0 0 300 30" preserveAspectRatio="none"></svg></td></tr>
            </tbody></table>
            <p>Publications by type: <span id="live-publications-by-type"></span></p>
            <p>Subscriptions by type: <span id="live-subscriptions-by-type"></span></p>
            <h2>Beacons</h2>
            <table id="beacons"><thead><tr><th>Id</th><th>Visibility</th><th>Rotation</th><th>Attachments</th><th></th></tr></thead><tbody></tbody></table>
            <form id="new-beacon">
              <label>Beacon ID (hex) <input id="beacon-id" required maxlength="30" pattern="[0-9a-fA-F]+"></label>
              <label><input id="beacon-public" type="checkbox"> public</label>
              <label>Rotates every (s) <input id="beacon-period" type="number" min="1" max="86400" step="any"></label>
              <button type="submit">Register</button>
            </form>
            <p id="provisioning-box" hidden>Key file of the new rotating beacon, shown once (for <code>sotto beacon --key-file</code>):</p>
            <pre id="provisioning" hidden></pre>
            <form id="new-attachment">
              <label>Beacon ID <input id="attach-beacon" required maxlength="30"></label>
              <label>Namespace <input id="attach-namespace" required maxlength="100"></label>
              <label>Type <input id="attach-type" required maxlength="100"></label>
              <label>Text <input id="attach-text" maxlength="1024"></label>
              <button type="submit">Attach</button>
            </form>
          </section>
        </section>
        </body>
        </html>
        """

    static let style = """
        body { font: 15px system-ui, sans-serif; margin: 1.5em; max-width: 70em; }
        table { border-collapse: collapse; margin: 0.5em 0; }
        th, td { border-bottom: 1px solid #ccc; padding: 0.3em 0.8em; text-align: left; }
        tr.selected { background: #eef; }
        #status { color: #a00; min-height: 1.2em; }
        code { background: #f4f4f4; padding: 0.2em; word-break: break-all; }
        svg.spark { width: 20em; height: 1.6em; }
        svg.spark polyline { fill: none; stroke: #36c; stroke-width: 1.5; vector-effect: non-scaling-stroke; }
        #live td:nth-child(2) { text-align: right; min-width: 5em; font-variant-numeric: tabular-nums; }
        ul.attachments { margin: 0; padding-left: 1em; }
        """

    static let script = """
        "use strict";
        // The Sotto operator's console. Everything from the API is shown with textContent, never as HTML.
        let csrf = null;
        let project = null;

        const $ = (id) => document.getElementById(id);

        function say(text) { $("status").textContent = text || ""; }

        async function api(method, path, body) {
          const headers = {};
          if (body !== undefined) headers["Content-Type"] = "application/json";
          if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
          const response = await fetch(path, { method, headers, credentials: "same-origin",
                                                body: body === undefined ? undefined : JSON.stringify(body) });
          const data = await response.json().catch(() => ({}));
          if (!response.ok) throw new Error(data.error || ("HTTP " + response.status));
          return data;
        }

        function cell(row, text) {
          const td = document.createElement("td");
          td.textContent = text === null || text === undefined ? "" : String(text);
          row.appendChild(td);
          return td;
        }

        function time(seconds) { return seconds ? new Date(seconds * 1000).toISOString() : "never"; }

        function show(loggedIn, name) {
          $("login-view").hidden = loggedIn;
          $("main-view").hidden = !loggedIn;
          $("logout").hidden = !loggedIn;
          $("who").textContent = loggedIn ? name : "";
        }

        async function loadProjects() {
          const data = await api("GET", "/api/projects");
          const body = $("projects").tBodies[0];
          body.replaceChildren();
          for (const p of data.projects) {
            const row = document.createElement("tr");
            if (project && project.id === p.id) row.className = "selected";
            const name = cell(row, "");
            const link = document.createElement("button");
            link.type = "button";
            link.textContent = p.name;
            link.addEventListener("click", () => { project = p; loadProjects().then(openProject).catch((e) => say(e.message)); });
            name.appendChild(link);
            cell(row, p.id);
            cell(row, p.maxSessions);
            cell(row, p.disabled ? "disabled" : "active");
            body.appendChild(row);
          }
        }

        async function loadKeys() {
          const body = $("keys").tBodies[0];
          $("current-project").textContent = project ? project.name : "(choose a project)";
          if (!project) { body.replaceChildren(); return; }
          // Read first, then replace the rows at once (two loads at a time must not add up).
          const data = await api("GET", "/api/projects/" + encodeURIComponent(project.id) + "/keys");
          const rows = [];
          for (const k of data.keys) {
            const row = document.createElement("tr");
            cell(row, k.id);
            cell(row, k.label);
            cell(row, k.requestsPerSecond);
            cell(row, k.burst);
            cell(row, k.revoked ? "revoked" : (k.expires ? "until " + time(k.expires) : "active"));
            cell(row, time(k.lastUsed));
            cell(row, k.maxSessions === null || k.maxSessions === undefined ? "project's" : k.maxSessions);
            const actions = cell(row, "");
            if (!k.revoked) {
              const revoke = document.createElement("button");
              revoke.type = "button";
              revoke.textContent = "Revoke";
              revoke.addEventListener("click", async () => {
                try {
                  await api("POST", "/api/keys/" + encodeURIComponent(k.id) + "/revoke", {});
                  say("");
                  await loadKeys();
                } catch (e) { say(e.message); }
              });
              actions.appendChild(revoke);
            }
            rows.push(row);
          }
          body.replaceChildren(...rows);
        }

        // Live view: the project's history (sparklines) and its server-sent events, one point a second.
        const liveFields = ["sessions", "publications", "subscriptions", "sightingsPerSecond", "foundPerSecond", "lostPerSecond",
                            "invalidTokensPerSecond", "rateLimitedPerSecond", "medianSNR"];
        let liveHistory = [];
        let liveSource = null;
        const historyLength = 300;

        function number(value) {
          if (value === null || value === undefined) return "-";
          return Number.isInteger(value) ? String(value) : Number(value).toFixed(1);
        }

        function byType(map) {
          const names = Object.keys(map || {}).sort();
          return names.length ? names.map((n) => n + ": " + map[n]).join(", ") : "none";
        }

        function sparkline(svg, values) {
          const known = values.filter((v) => v !== null && v !== undefined);
          const top = Math.max(1, ...known), bottom = Math.min(0, ...known);
          const step = values.length > 1 ? 300 / (historyLength - 1) : 0;
          const start = 300 - step * (values.length - 1);
          const points = [];
          values.forEach((v, i) => {
            if (v === null || v === undefined) return;
            const y = 29 - 28 * (v - bottom) / (top - bottom);
            points.push((start + i * step).toFixed(1) + "," + y.toFixed(1));
          });
          let line = svg.firstChild;
          if (!line) {
            line = document.createElementNS(svg.namespaceURI, "polyline");
            svg.appendChild(line);
          }
          line.setAttribute("points", points.join(" "));
        }

        function showLive(point) {
          for (const field of liveFields) {
            $("live-" + field).textContent = number(point[field]);
            sparkline($("spark-" + field), liveHistory.map((p) => p[field]));
          }
        }

        function stopLive() {
          if (liveSource) { liveSource.close(); liveSource = null; }
          liveHistory = [];
        }

        async function startLive() {
          stopLive();
          if (!project) return;
          const base = "/api/projects/" + encodeURIComponent(project.id) + "/live";
          const view = await api("GET", base);
          liveHistory = view.history.slice(-historyLength);
          $("live-publications-by-type").textContent = byType(view.publicationsByType);
          $("live-subscriptions-by-type").textContent = byType(view.subscriptionsByType);
          showLive(view.current);
          liveSource = new EventSource(base + "/events");
          liveSource.onmessage = (event) => {
            const point = JSON.parse(event.data);
            liveHistory.push(point);
            if (liveHistory.length > historyLength) liveHistory.shift();
            showLive(point);
          };
          // The by-type lists change less often: read them every 10 s.
          const watched = project.id;
          setTimeout(function again() {
            if (!liveSource || !project || project.id !== watched) return;
            api("GET", base).then((v) => {
              $("live-publications-by-type").textContent = byType(v.publicationsByType);
              $("live-subscriptions-by-type").textContent = byType(v.subscriptionsByType);
            }).catch(() => {}).finally(() => setTimeout(again, 10000));
          }, 10000);
        }

        function button(text, action) {
          const b = document.createElement("button");
          b.type = "button";
          b.textContent = text;
          b.addEventListener("click", async () => {
            try { await action(); say(""); await loadBeacons(); } catch (e) { say(e.message); }
          });
          return b;
        }

        async function loadBeacons() {
          const body = $("beacons").tBodies[0];
          if (!project) { body.replaceChildren(); return; }
          // Read first, then replace the rows at once (two loads at a time must not add up).
          const data = await api("GET", "/api/beacons?project=" + encodeURIComponent(project.id));
          const rows = [];
          for (const b of data.beacons) {
            const row = document.createElement("tr");
            cell(row, b.id);
            cell(row, b.decommissioned ? "decommissioned" : b.visibility);
            cell(row, b.rotating ? "every " + b.rotationPeriod + " s" : "fixed");
            const list = document.createElement("ul");
            list.className = "attachments";
            for (const a of b.attachments) {
              const item = document.createElement("li");
              const text = document.createElement("span");
              text.className = "attachment";
              text.textContent = a.namespace + "/" + a.type + ": " + (a.text !== undefined ? a.text : "0x" + a.hex);
              item.appendChild(text);
              item.appendChild(button("Delete", () => api("POST", "/api/beacons/" + b.id + "/attachments/" + a.index + "/delete", {})));
              list.appendChild(item);
            }
            cell(row, "").appendChild(list);
            const actions = cell(row, "");
            if (!b.decommissioned) {
              const other = b.visibility === "public" ? "unlisted" : "public";
              actions.appendChild(button("Make " + other, () => api("POST", "/api/beacons/" + b.id + "/visibility", { visibility: other })));
              actions.appendChild(button("Decommission", async () => {
                if (window.confirm("Decommission beacon " + b.id + " for good?")) await api("POST", "/api/beacons/" + b.id + "/decommission", {});
              }));
            }
            rows.push(row);
          }
          body.replaceChildren(...rows);
        }

        async function openProject() {
          $("project-view").hidden = !project;
          await loadKeys();
          await loadBeacons();
          await startLive();
          // Shown and watching (a driver waits for this).
          document.documentElement.dataset.project = project ? project.id : "";
        }

        async function start() {
          try {
            const session = await api("GET", "/api/session");
            csrf = session.csrf;
            show(true, session.operator);
            await loadProjects();
          } catch (e) {
            show(false);
          }
        }

        document.addEventListener("DOMContentLoaded", () => {
          $("login").addEventListener("submit", async (event) => {
            event.preventDefault();
            try {
              const data = await api("POST", "/api/login", { secret: $("secret").value });
              $("secret").value = "";
              csrf = data.csrf;
              say("");
              show(true, data.operator);
              await loadProjects();
            } catch (e) { say(e.message); }
          });
          $("logout").addEventListener("click", async () => {
            try { await api("POST", "/api/logout", {}); } catch (e) { /* logged out anyway */ }
            csrf = null; project = null;
            stopLive();
            $("project-view").hidden = true;
            show(false);
          });
          $("new-project").addEventListener("submit", async (event) => {
            event.preventDefault();
            try {
              const data = await api("POST", "/api/projects", { name: $("project-name").value });
              $("project-name").value = "";
              project = data.project;
              say("");
              await loadProjects();
              await openProject();
            } catch (e) { say(e.message); }
          });
          $("new-key").addEventListener("submit", async (event) => {
            event.preventDefault();
            if (!project) { say("choose a project first"); return; }
            try {
              const body = { label: $("key-label").value, requestsPerSecond: Number($("key-rate").value), burst: Number($("key-burst").value) };
              if ($("key-max-sessions").value) body.maxSessions = Number($("key-max-sessions").value);
              const data = await api("POST", "/api/projects/" + encodeURIComponent(project.id) + "/keys", body);
              $("new-secret").textContent = data.secret;
              $("new-secret-box").hidden = false;
              $("key-label").value = "";
              say("");
              await loadKeys();
            } catch (e) { say(e.message); }
          });
          $("new-beacon").addEventListener("submit", async (event) => {
            event.preventDefault();
            if (!project) { say("choose a project first"); return; }
            const body = { id: $("beacon-id").value, visibility: $("beacon-public").checked ? "public" : "unlisted" };
            if ($("beacon-period").value) body.rotationPeriod = Number($("beacon-period").value);
            try {
              const data = await api("POST", "/api/projects/" + encodeURIComponent(project.id) + "/beacons", body);
              $("provisioning").textContent = data.provisioning || "";
              $("provisioning").hidden = !data.provisioning;
              $("provisioning-box").hidden = !data.provisioning;
              $("attach-beacon").value = data.beacon.id;
              $("beacon-id").value = "";
              say("");
              await loadBeacons();
            } catch (e) { say(e.message); }
          });
          $("new-attachment").addEventListener("submit", async (event) => {
            event.preventDefault();
            try {
              await api("POST", "/api/beacons/" + encodeURIComponent($("attach-beacon").value) + "/attachments",
                        { namespace: $("attach-namespace").value, type: $("attach-type").value, text: $("attach-text").value });
              $("attach-text").value = "";
              say("");
              await loadBeacons();
            } catch (e) { say(e.message); }
          });
          // Ready: the forms are handled here (a driver or a quick user waits for this).
          document.documentElement.dataset.ready = "yes";
          start();
        });
        """
}
