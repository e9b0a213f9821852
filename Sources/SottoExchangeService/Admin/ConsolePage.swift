/// The operator's console: a page served by the admin listener at `/` (`/console.js`, `/console.css`), written
/// here and embedded in the program (no CDN, nothing fetched from elsewhere, works without internet). It logs
/// in with the operator's credential, lists projects and their keys, creates and revokes keys (a new key's
/// secret is shown once). Everything it shows from the API is set with `textContent`: a label holding HTML or
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
          <table id="keys"><thead><tr><th>Id</th><th>Label</th><th>Rate /s</th><th>Burst</th><th>State</th><th>Last use</th><th></th></tr></thead><tbody></tbody></table>
          <form id="new-key">
            <label>Label <input id="key-label" maxlength="200"></label>
            <label>Requests/s <input id="key-rate" type="number" min="0.001" step="any" value="50"></label>
            <label>Burst <input id="key-burst" type="number" min="1" step="any" value="200"></label>
            <button type="submit">Create key</button>
          </form>
          <p id="new-secret-box" hidden>New key, shown once: <code id="new-secret"></code></p>
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
            link.addEventListener("click", () => { project = p; loadProjects().then(loadKeys).catch((e) => say(e.message)); });
            name.appendChild(link);
            cell(row, p.id);
            cell(row, p.maxSessions);
            cell(row, p.disabled ? "disabled" : "active");
            body.appendChild(row);
          }
        }

        async function loadKeys() {
          const body = $("keys").tBodies[0];
          body.replaceChildren();
          $("current-project").textContent = project ? project.name : "(choose a project)";
          if (!project) return;
          const data = await api("GET", "/api/projects/" + encodeURIComponent(project.id) + "/keys");
          for (const k of data.keys) {
            const row = document.createElement("tr");
            cell(row, k.id);
            cell(row, k.label);
            cell(row, k.requestsPerSecond);
            cell(row, k.burst);
            cell(row, k.revoked ? "revoked" : (k.expires ? "until " + time(k.expires) : "active"));
            cell(row, time(k.lastUsed));
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
            body.appendChild(row);
          }
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
              await loadKeys();
            } catch (e) { say(e.message); }
          });
          $("new-key").addEventListener("submit", async (event) => {
            event.preventDefault();
            if (!project) { say("choose a project first"); return; }
            try {
              const data = await api("POST", "/api/projects/" + encodeURIComponent(project.id) + "/keys", {
                label: $("key-label").value, requestsPerSecond: Number($("key-rate").value), burst: Number($("key-burst").value) });
              $("new-secret").textContent = data.secret;
              $("new-secret-box").hidden = false;
              $("key-label").value = "";
              say("");
              await loadKeys();
            } catch (e) { say(e.message); }
          });
          // Ready: the forms are handled here (a driver or a quick user waits for this).
          document.documentElement.dataset.ready = "yes";
          start();
        });
        """
}
