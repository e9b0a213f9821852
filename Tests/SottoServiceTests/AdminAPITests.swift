import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Synchronization
import Testing

/// The admin API of `sotto serve --admin` (issue 34): operators' sessions, CSRF, failed logins, validation,
/// audit; and over a real listener, a key made through it opens a session that its revocation cuts off.
@Suite(.timeLimit(.minutes(1))) struct AdminAPITests {
    /// A store with an operator, and an API on it with a clock the test moves.
    final class Fixture: Sendable {
        let directory: String
        let store: SQLiteStore
        let secret: String
        /// Seconds since 1970, moved by the test.
        final class Time: Sendable { let now = Mutex<Double>(1_800_000_000) }
        let clock = Time()
        let api: AdminAPI

        init() async throws {
            directory = try temporaryDirectory()
            store = try SQLiteStore(path: directory + "/exchange.sqlite")
            secret = try await store.createOperator(name: "alice").secret
            let clock = self.clock
            api = AdminAPI(store: store, now: { clock.now.withLock { $0 } })
        }

        func advance(_ seconds: Double) { clock.now.withLock { $0 += seconds } }

        func login(_ secret: String? = nil, peer: String = "127.0.0.1") async -> AdminResponse {
            await api.handle(AdminRequest(method: "POST", target: "/api/login", body: Self.body(["secret": secret ?? self.secret]), peer: peer))
        }

        /// Logs in: the session cookie's value and the CSRF token.
        func session() async throws -> (cookie: String, csrf: String) {
            let response = await login()
            #expect(response.status == 200)
            let setCookie = try #require(response.headers.first { $0.0 == "Set-Cookie" }?.1)
            let cookie = try #require(setCookie.split(separator: ";").first.map(String.init))
            return (cookie, try #require(response.json?["csrf"] as? String))
        }

        func call(_ method: String, _ target: String, _ body: [String: Any]? = nil, cookie: String? = nil, csrf: String? = nil,
                  bearer: String? = nil) async -> AdminResponse {
            var headers: [(String, String)] = []
            if let cookie { headers.append(("Cookie", cookie)) }
            if let csrf { headers.append(("X-CSRF-Token", csrf)) }
            if let bearer { headers.append(("Authorization", "Bearer " + bearer)) }
            return await api.handle(AdminRequest(method: method, target: target, headers: headers, body: body.map(Self.body) ?? []))
        }

        static func body(_ object: [String: Any]) -> [UInt8] { Array((try? JSONSerialization.data(withJSONObject: object)) ?? Data()) }
    }

    @Test func loginGivesAStrictCookieAndStateChangesNeedTheCSRFToken() async throws {
        let fixture = try await Fixture()
        let response = await fixture.login()
        #expect(response.status == 200)
        #expect(response.json?["operator"] as? String == "alice")
        let setCookie = try #require(response.headers.first { $0.0 == "Set-Cookie" }?.1)
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] { #expect(setCookie.contains(attribute), "\(setCookie)") }
        #expect(!setCookie.contains("Secure"), "a loopback listener serves plain HTTP")
        let (cookie, csrf) = try await fixture.session()

        // Without a session: refused.
        #expect(await fixture.call("GET", "/api/projects").status == 401)
        // Reading needs the cookie only; changing needs the token too.
        #expect(await fixture.call("GET", "/api/projects", cookie: cookie).status == 200)
        let refused = await fixture.call("POST", "/api/projects", ["name": "museum"], cookie: cookie)
        #expect(refused.status == 403)
        #expect((refused.json?["error"] as? String)?.contains("X-CSRF-Token") == true)
        #expect(await fixture.call("POST", "/api/projects", ["name": "museum"], cookie: cookie, csrf: String(repeating: "0", count: 64)).status == 403)
        #expect(try await fixture.store.projects().isEmpty, "a refused request changes nothing")
        let created = await fixture.call("POST", "/api/projects", ["name": "museum", "maxSessions": 10], cookie: cookie, csrf: csrf)
        #expect(created.status == 201)
        #expect(try await fixture.store.projects().map(\.name) == ["museum"])
        // GET /api/session gives the token back (a reloaded page).
        #expect(await fixture.call("GET", "/api/session", cookie: cookie).json?["csrf"] as? String == csrf)
        // Logged out: the cookie no longer works.
        #expect(await fixture.call("POST", "/api/logout", cookie: cookie, csrf: csrf).status == 200)
        #expect(await fixture.call("GET", "/api/projects", cookie: cookie).status == 401)
        // Idle sessions expire.
        let (later, _) = try await fixture.session()
        fixture.advance(AdminAPI.sessionIdleTimeout + 1)
        #expect(await fixture.call("GET", "/api/projects", cookie: later).status == 401)

        let audit = try await fixture.store.auditEntries(limit: 20)
        #expect(audit.contains { $0.action == "csrf" && $0.actor == "operator:alice" && $0.outcome.hasPrefix("refused") })
        #expect(audit.contains { $0.action == "project.create" && $0.target == "museum" && $0.outcome == "ok" && $0.time == 1_800_000_000 })
        #expect(audit.filter { $0.action == "login" && $0.outcome == "ok" }.count == 3)
    }

    @Test func wrongCredentialsAreRefusedAndRateLimitedAndProjectKeysAreNotCredentials() async throws {
        let fixture = try await Fixture()
        _ = try await fixture.store.createProject(name: "museum", maxSessions: 10)
        let projectKey = try await fixture.store.createKey(project: "museum", label: "", ratePerSecond: 1, burst: 1).key
        let asKey = await fixture.login(projectKey)
        #expect(asKey.status == 401)
        #expect((asKey.json?["error"] as? String)?.contains("project key") == true)
        #expect(await fixture.call("GET", "/api/projects", bearer: projectKey).status == 401)
        // The operator's credential works as a bearer (tools), with no cookie and so no CSRF.
        #expect(await fixture.call("POST", "/api/projects", ["name": "shop"], bearer: fixture.secret).status == 201)

        let wrong = "sottoadmin_0011223344556677_" + String(repeating: "ab", count: 32)
        // The two project-key attempts above were failures from this peer too.
        for _ in 0..<(AdminAPI.loginFailureLimit - 2) { #expect(await fixture.login(wrong).status == 401) }
        // The limit: from then on even the right secret is refused from that peer, for the window.
        let limited = await fixture.login()
        #expect(limited.status == 429)
        #expect(limited.headers.contains { $0.0 == "Retry-After" })
        #expect(await fixture.login(peer: "10.0.0.2").status == 200, "another peer is not limited")
        fixture.advance(AdminAPI.loginWindow)
        #expect(await fixture.login().status == 200)
        let audit = try await fixture.store.auditEntries(limit: 50)
        #expect(audit.contains { $0.action == "login" && $0.target == "a project key" && $0.outcome == "refused" })
        #expect(audit.contains { $0.action == "login" && $0.target == "operator id 0011223344556677" })
        #expect(audit.contains { $0.action == "login" && $0.outcome.contains("too many") })
        #expect(!audit.contains { $0.target.contains(projectKey) || $0.outcome.contains("abab") }, "no secret in the audit")
    }

    @Test func inputIsValidatedAndALabelWithMarkupIsReturnedAsData() async throws {
        let fixture = try await Fixture()
        let (cookie, csrf) = try await fixture.session()
        func post(_ target: String, _ body: [String: Any]) async -> AdminResponse {
            await fixture.call("POST", target, body, cookie: cookie, csrf: csrf)
        }
        #expect(await fixture.api.handle(AdminRequest(method: "POST", target: "/api/projects", headers: [("Cookie", cookie), ("X-CSRF-Token", csrf)],
                                                      body: Array("not json".utf8))).status == 400)
        #expect(await post("/api/projects", ["maxSessions": 3]).json?["error"] as? String == "'name' is required")
        #expect(await post("/api/projects", ["name": "x", "maxSessions": 0]).status == 400)
        #expect(await post("/api/projects", ["name": "x", "maxSessions": "many"]).status == 400)
        #expect(await post("/api/projects", ["name": "a\nb"]).status == 400)
        #expect(await post("/api/projects", ["name": "museum"]).status == 201)
        #expect(await post("/api/projects", ["name": "museum"]).status == 409)
        #expect(await post("/api/projects/nowhere/keys", [:]).status == 404)
        #expect(await post("/api/projects/museum/keys", ["requestsPerSecond": -1]).status == 400)
        #expect(await post("/api/projects/museum/keys", ["burst": 1e12]).status == 400)
        #expect(await post("/api/projects/museum/keys", ["origins": ["ftp://x"]]).status == 400)
        #expect(await post("/api/keys/nope/revoke", [:]).status == 404)
        let huge = await fixture.api.handle(AdminRequest(method: "POST", target: "/api/projects", headers: [("Cookie", cookie), ("X-CSRF-Token", csrf)],
                                                         body: [UInt8](repeating: 32, count: AdminAPI.maxBodyBytes + 1)))
        #expect(huge.status == 413)
        #expect(await fixture.call("DELETE", "/api/projects", cookie: cookie).status == 405)
        #expect(await fixture.call("GET", "/api/nothing", cookie: cookie).status == 404)

        let label = "<img src=x onerror=alert(1)><script>alert(2)</script>"
        let created = await post("/api/projects/museum/keys", ["label": label, "requestsPerSecond": 5, "burst": 10,
                                                               "origins": ["https://museum.example"]])
        #expect(created.status == 201)
        #expect(created.contentType == "application/json")
        let secret = try #require(created.json?["secret"] as? String)
        #expect(secret.hasPrefix("sotto_"))
        let listed = await fixture.call("GET", "/api/projects/museum/keys", cookie: cookie)
        let keys = try #require(listed.json?["keys"] as? [[String: Any]])
        #expect(keys.count == 1)
        #expect(keys.first?["label"] as? String == label, "the label comes back as data, unchanged")
        #expect(keys.first?["origins"] as? [String] == ["https://museum.example"])
        #expect(keys.first?["secret"] == nil && !String(decoding: listed.body, as: UTF8.self).contains(secret), "a listing holds no secret")
        #expect(await post("/api/projects/museum/rename", ["name": "gallery"]).json?["project"].flatMap { ($0 as? [String: Any])?["name"] as? String } == "gallery")
        #expect(await post("/api/projects/gallery/rename", ["name": "<b>x</b>\n"]).status == 400)
        #expect(await post("/api/projects/gallery/disable", [:]).json?["project"].flatMap { ($0 as? [String: Any])?["disabled"] as? Bool } == true)
        #expect(await post("/api/projects/gallery/enable", [:]).status == 200)
        #expect(await post("/api/keys/nope/rotate", [:]).status == 404)
        #expect(await post("/api/keys/\(keys.first?["id"] as? String ?? "")/rotate", ["overlapSeconds": -5]).status == 400)
        let audit = await fixture.call("GET", "/api/audit?limit=5", cookie: cookie)
        #expect((audit.json?["entries"] as? [[String: Any]])?.count == 5)
        #expect(await fixture.call("GET", "/api/audit?limit=0", cookie: cookie).status == 400)
    }

    @Test func beyondLoopbackTheListenerNeedsTLSAndTheCookieIsSecure() async throws {
        let fixture = try await Fixture()
        let exposed = AdminOptions(endpoint: .tcp(host: "0.0.0.0", port: 0))
        #expect(throws: MatcherServerError.self) {
            _ = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: fixture.store, admin: exposed)
        }
        await #expect(throws: MatcherServerError.self) { _ = try await AdminListener.bind(endpoint: exposed.endpoint, tls: nil) }
        let secure = AdminAPI(store: fixture.store, secureCookies: true)
        let response = await secure.handle(AdminRequest(method: "POST", target: "/api/login", body: Fixture.body(["secret": fixture.secret])))
        #expect(response.headers.first { $0.0 == "Set-Cookie" }?.1.hasSuffix("; Secure") == true)
    }

    @Test func aRevokedOperatorIsLoggedOut() async throws {
        let fixture = try await Fixture()
        let (cookie, _) = try await fixture.session()
        try await fixture.store.revokeOperator("alice")
        #expect(await fixture.call("GET", "/api/projects", cookie: cookie).status == 401)
        #expect(await fixture.login().status == 401)
        #expect(await fixture.call("GET", "/api/projects", bearer: fixture.secret).status == 401)
    }

    /// `sotto serve`'s server on `store` with its admin listener, both on loopback: its task and the two bound
    /// addresses (waits until both listen).
    static func serve(_ store: any ExchangeStore) async throws -> (task: Task<Void, any Error>, admin: String, grpc: String) {
        let (listening, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .unbounded)
        let server = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store, configuration: TestServer.fastConfiguration,
                                       admin: AdminOptions(endpoint: .tcp(host: "127.0.0.1", port: 0)) { continuation.yield("admin " + $0) }) { service, _ in
            continuation.yield("grpc " + service)
        }
        let task = Task { try await server.run() }
        let bound = try await withDeadline(10, "the listeners") { () -> (admin: String, grpc: String)? in
            var admin = "", grpc = ""
            for await line in listening {
                if line.hasPrefix("admin ") { admin = String(line.dropFirst(6)) } else { grpc = String(line.dropFirst(5)) }
                if !admin.isEmpty && !grpc.isEmpty { return (admin, grpc) }
            }
            return nil
        }
        guard let bound else { task.cancel(); throw TimedOut(what: "the listeners") }
        return (task, bound.admin, bound.grpc)
    }

    /// Over real sockets: `sotto serve`'s server with its admin listener on loopback.
    @Test func aKeyMadeThroughTheAdminListenerOpensASessionThatItsRevocationCutsOff() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let operatorSecret = try await store.createOperator(name: "alice").secret
        let (task, admin, grpc) = try await AdminAPITests.serve(store)
        defer { task.cancel() }
        let session = URLSession(configuration: .ephemeral)
        func call(_ method: String, _ path: String, _ body: [String: Any]? = nil, headers: [String: String] = [:]) async throws -> (Int, [String: Any], HTTPURLResponse?) {
            var request = URLRequest(url: URL(string: "http://\(admin)\(path)")!)
            request.httpMethod = method
            request.timeoutInterval = 5
            request.httpShouldHandleCookies = false
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            if let body {
                request.httpBody = try JSONSerialization.data(withJSONObject: body)
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            }
            let (data, response) = try await session.data(for: request)
            let http = response as? HTTPURLResponse
            return (http?.statusCode ?? -1, (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:], http)
        }
        let login = try await call("POST", "/api/login", ["secret": operatorSecret])
        #expect(login.0 == 200)
        let cookie = try #require(login.2?.value(forHTTPHeaderField: "Set-Cookie")?.split(separator: ";").first.map(String.init))
        let csrf = try #require(login.1["csrf"] as? String)
        let authenticated = ["Cookie": cookie, "X-CSRF-Token": csrf]
        #expect(try await call("POST", "/api/projects", ["name": "museum", "maxSessions": 10], headers: authenticated).0 == 201)
        let created = try await call("POST", "/api/projects/museum/keys", ["label": "kiosk", "requestsPerSecond": 100, "burst": 100], headers: authenticated)
        #expect(created.0 == 201)
        let key = try #require(created.1["secret"] as? String)
        let keyID = try #require((created.1["key"] as? [String: Any])?["id"] as? String)

        // The key opens a session on the exchange; the operator's credential does not, nor the key the admin API.
        let client = try RawClient(try MatcherAddress(parsing: grpc))
        defer { Task { await client.close() } }
        let kiosk = RawSession(client)
        #expect(await kiosk.hello(key: key) != nil)
        let intruder = RawSession(client)
        intruder.send(.hello(key: operatorSecret, broadcasts: true, clientVersion: "raw-test"))
        #expect(await intruder.end() != nil)
        #expect(RevocationTests.isUnauthenticated(intruder), "an admin credential is refused on the exchange port")
        #expect(try await call("GET", "/api/projects", headers: ["Authorization": "Bearer " + key]).0 == 401, "a project key is refused on the admin port")

        let start = ContinuousClock.now
        #expect(try await call("POST", "/api/keys/\(keyID)/revoke", headers: authenticated).0 == 200)
        let ended = await RevocationTests.endTime(of: kiosk, since: start)
        #expect(ended.map { $0 < RevocationTests.bound } == true, "the revoked key's session ended after \(ended.map { "\($0) s" } ?? "never")")
        #expect(RevocationTests.isUnauthenticated(kiosk))

        // Rotated with a short overlap: the old key's session goes on, then is cut off once the overlap is over.
        let second = try await call("POST", "/api/projects/museum/keys", ["label": "screen"], headers: authenticated)
        let secondKey = try #require(second.1["secret"] as? String)
        let secondID = try #require((second.1["key"] as? [String: Any])?["id"] as? String)
        let screen = RawSession(client)
        #expect(await screen.hello(key: secondKey) != nil)
        let rotated = try await call("POST", "/api/keys/\(secondID)/rotate", ["overlapSeconds": 1], headers: authenticated)
        #expect(rotated.0 == 201)
        let rotatedKey = try #require(rotated.1["secret"] as? String)
        #expect(screen.ended == nil, "the old key works during the overlap")
        #expect(await screen.end(5) != nil, "the old key's session ends after the overlap")
        #expect(RevocationTests.isUnauthenticated(screen))

        // A disabled project: its keys' sessions end, and none opens.
        let rotatedSession = RawSession(client)
        #expect(await rotatedSession.hello(key: rotatedKey) != nil)
        #expect(try await call("POST", "/api/projects/museum/disable", headers: authenticated).0 == 200)
        #expect(await rotatedSession.end(RevocationTests.bound * 5) != nil)
        #expect(RevocationTests.isUnauthenticated(rotatedSession))

        let audit = try await store.auditEntries(limit: 20).filter { $0.actor == "operator:alice" }.map(\.action)
        #expect(audit.prefix(6) == ["project.disable", "key.rotate", "key.create", "key.revoke", "key.create", "project.create"])
        #expect(audit.contains("login"))
        screen.cancel()
        rotatedSession.cancel()
        kiosk.cancel()
        intruder.cancel()
    }
}

/// `sotto admin --server`: the admin API's client, against a real listener on a Unix socket.
@Suite(.timeLimit(.minutes(1))) struct RemoteAdminStoreTests {
    @Test func theAdminOperationsGoThroughTheAPIAndAreAuditedAsTheOperator() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let secret = try await store.createOperator(name: "alice").secret
        let listener = try await AdminListener.bind(endpoint: .unix(path: directory + "/admin.sock"), tls: nil)
        let serving = Task { try await listener.serve(api: AdminAPI(store: store)) }
        defer { listener.close(); serving.cancel() }
        #expect(listener.address == "unix:\(directory)/admin.sock")

        let remote = try RemoteAdminStore(server: listener.address, secret: secret)
        let project = try await remote.createProject(name: "museum", maxSessions: 10)
        #expect(try await store.project(id: "museum") == project)
        let (record, key) = try await remote.createKey(project: "museum", label: "<script>x</script>", ratePerSecond: 5, burst: 10, origins: [])
        #expect(try await APIKeys.authenticate(key, in: store)?.keyID == record.id)
        #expect(try await remote.keys(project: nil).map(\.label) == ["<script>x</script>"])
        let (rotated, rotatedKey) = try await remote.rotateKey(id: record.id, overlap: 60)
        #expect(try await APIKeys.authenticate(rotatedKey, in: store)?.keyID == rotated.id)
        #expect(try await remote.key(id: record.id)?.expires != nil)
        #expect(try await remote.renameProject("museum", to: "gallery").name == "gallery")
        #expect(try await remote.setProjectDisabled("gallery", true).disabled)
        #expect(try await remote.projects().map(\.disabled) == [true])
        try await remote.revokeKey(id: rotated.id)
        #expect(try await store.key(id: rotated.id)?.revoked == true)
        await #expect(throws: StoreError.invalid("no API key 'nope'")) { try await remote.revokeKey(id: "nope") }
        let actions = try await remote.auditEntries(limit: 9).filter { $0.actor == "operator:alice" }.map(\.action)
        #expect(actions.prefix(8) == ["key.revoke", "key.revoke", "project.list", "project.disable", "project.rename", "key.list", "key.rotate", "key.list"])

        // What the API does not do, and a wrong credential, are said plainly.
        await #expect(throws: StoreError.invalid("operators are made on the store (bootstrap): sotto admin operator ... --store")) { _ = try await remote.operators() }
        let projectKey = try await store.createKey(project: project.id, label: "", ratePerSecond: 1, burst: 1).key
        let asKey = try RemoteAdminStore(server: listener.address, secret: projectKey)
        await #expect(throws: StoreError.invalid("the admin API refused the credential: a project key is not an admin credential (SOTTO_ADMIN_SECRET)")) {
            _ = try await asKey.projects()
        }
        #expect(throws: StoreError.self, "plain HTTP beyond loopback would send the credential in clear") {
            _ = try RemoteAdminStore(server: "http://192.0.2.1:7460", secret: secret)
        }
        #expect(throws: StoreError.self) { _ = try RemoteAdminStore(server: "ftp://127.0.0.1", secret: secret) }
    }
}

/// The console page served by the admin listener.
@Suite(.timeLimit(.minutes(1))) struct ConsolePageTests {
    @Test func thePageIsServedUnderAStrictPolicyWithNothingFromElsewhereAndShowsDataAsText() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let listener = try await AdminListener.bind(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil)
        let serving = Task { try await listener.serve(api: AdminAPI(store: store)) }
        defer { listener.close(); serving.cancel() }
        let session = URLSession(configuration: .ephemeral)
        func get(_ path: String) async throws -> (HTTPURLResponse?, String) {
            var request = URLRequest(url: URL(string: "http://\(listener.address)\(path)")!)
            request.timeoutInterval = 5
            let (data, response) = try await session.data(for: request)
            return (response as? HTTPURLResponse, String(decoding: data, as: UTF8.self))
        }
        let (page, html) = try await get("/")
        #expect(page?.statusCode == 200)
        #expect(page?.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("text/html") == true)
        let policy = try #require(page?.value(forHTTPHeaderField: "Content-Security-Policy"))
        #expect(policy.contains("default-src 'none'") && policy.contains("script-src 'self'") && !policy.contains("unsafe"))
        #expect(page?.value(forHTTPHeaderField: "X-Frame-Options") == "DENY")
        #expect(html.contains("<script src=\"/console.js\""))
        let (scriptResponse, script) = try await get("/console.js")
        #expect(scriptResponse?.statusCode == 200)
        #expect(try await get("/console.css").0?.statusCode == 200)
        // No CDN nor any other origin; data shown as text only (a label with markup stays text).
        for text in [html, script] { #expect(!text.contains("http://") && !text.contains("https://") && !text.contains("//cdn")) }
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            #expect(!script.contains(sink), "the console's script uses \(sink)")
        }
        #expect(script.contains("textContent"))
        #expect(!html.contains("<script>") && !html.contains("style="), "no inline script or style (the policy would refuse them)")
        // The API under the page still needs a session.
        #expect(try await get("/api/projects").0?.statusCode == 401)
    }
}

/// Chromium and node, where Debian installs them (scripts/install-deps), if anywhere.
let consoleChromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }
let consoleNode = ["/usr/bin/node", "/usr/local/bin/node"].first { FileManager.default.isExecutableFile(atPath: $0) }

/// The console page in a real browser: headless Chromium (started by the test, driven over its debugging pipe by
/// Tests/Browser/console-check.mjs under node) logs in, creates a project and a key labelled with markup, sees the
/// label as text (no element made, no script run), and revokes the key while a subscriber's session opened with it
/// is on the exchange: the session is cut off; the audit has it all.
@Suite(.timeLimit(.minutes(1)), .enabled(if: consoleChromium != nil && consoleNode != nil, "no chromium or node (scripts/install-deps)"))
struct AdminBrowserTests {
    static let chromium = consoleChromium
    static let node = consoleNode
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Browser/console-check.mjs").path

    /// Runs the driver and returns its JSON line (a dedicated thread waits for the process, not the pool).
    static func drive(url: String, secret: String, profile: String, handoff: String) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try #require(node))
        process.arguments = [script, try #require(chromium), url, profile]
        process.environment = ["CONSOLE_SECRET": secret, "CONSOLE_HANDOFF": handoff, "PATH": "/usr/bin:/bin", "HOME": profile]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let ended: Void = await withCheckedContinuation { continuation in
            process.terminationHandler = { _ in continuation.resume() }
            do { try process.run() } catch { continuation.resume() }
        }
        _ = ended
        return String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    @Test func anOperatorLogsInMakesAKeyLabelledWithMarkupSeesItAsTextAndRevokesItCuttingOffItsSession() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let secret = try await store.createOperator(name: "alice").secret
        // A whole service with its admin listener, as `sotto serve --admin` runs it: the page's revocation reaches
        // the exchange's sessions.
        let (task, admin, grpc) = try await AdminAPITests.serve(store)
        defer { task.cancel() }

        let handoff = directory + "/handoff"
        try FileManager.default.createDirectory(atPath: handoff, withIntermediateDirectories: true)
        let driving = Task { try await Self.drive(url: "http://\(admin)/", secret: secret, profile: directory + "/profile", handoff: handoff) }
        // The key the page made and showed, as a subscriber's session on the exchange; then the page revokes it.
        #expect(await eventually(30) { FileManager.default.fileExists(atPath: handoff + "/secret") }, "the page showed a key's secret")
        let keySecret = try String(contentsOfFile: handoff + "/secret", encoding: .utf8)
        let client = try RawClient(try MatcherAddress(parsing: grpc))
        defer { Task { await client.close() } }
        let subscriber = RawSession(client)
        #expect(await subscriber.hello(key: keySecret) != nil, "the key the page made opens a session")
        subscriber.send(Frames.subscribe(1))
        await subscriber.settled()
        #expect(subscriber.ended == nil)
        let start = ContinuousClock.now
        FileManager.default.createFile(atPath: handoff + "/go", contents: Data())

        let text = try await driving.value
        let seen = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? ["error": "no answer: \(text)"]
        #expect(seen["error"] == nil, "\(seen)")
        #expect(seen["loggedIn"] as? Bool == true && seen["operator"] as? String == "alice")
        #expect(seen["projectListed"] as? Bool == true && seen["keyShown"] as? Bool == true)
        let label = try #require(seen["label"] as? String)
        #expect(seen["labelText"] as? String == label, "the label is shown as its text")
        #expect(seen["markupInTable"] as? Int == 0 && seen["pwned"] as? Int == 0, "no element made from it, no script run")
        #expect(seen["revoked"] as? Bool == true)
        let ended = await RevocationTests.endTime(of: subscriber, since: start)
        #expect(ended != nil && RevocationTests.isUnauthenticated(subscriber),
                "the revoked key's session is cut off (\(ended.map { "\($0) s after the go, the page's click and its call included" } ?? "never"))")
        let key = try #require(try await store.keys(project: "museum").first)
        #expect(key.label == label && key.revoked)
        #expect((seen["secret"] as? String)?.hasPrefix("sotto_\(key.id)_") == true && seen["secret"] as? String == keySecret,
                "the new key's secret was shown once")
        let actions = try await store.auditEntries(limit: 20).filter { $0.actor == "operator:alice" }.map(\.action)
        for action in ["login", "project.create", "key.create", "key.revoke"] { #expect(actions.contains(action)) }
        subscriber.cancel()
    }
}
