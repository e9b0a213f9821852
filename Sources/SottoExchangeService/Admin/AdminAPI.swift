import Crypto
import Foundation
import SottoExchangeCore
import SottoSupport

/// One HTTP request to the admin API, as the listener read it: what ``AdminAPI/handle(_:)`` needs, nothing of
/// the socket.
public struct AdminRequest: Sendable {
    /// `GET` or `POST` (others are refused with 405).
    public var method: String
    /// The path, without the query.
    public var path: String
    /// The query items (`limit=20`).
    public var query: [String: String]
    /// Header names lowercased, each with its first value.
    public var headers: [String: String]
    /// The body (at most ``AdminAPI/maxBodyBytes``).
    public var body: [UInt8]
    /// The peer's address without its port (`127.0.0.1`, `unix`): failed logins are counted by it.
    public var peer: String

    /// - Parameters:
    ///   - method: the HTTP method.
    ///   - target: the request target, path and query (`/api/audit?limit=5`).
    ///   - headers: the headers, names in any case.
    ///   - body: the body's bytes.
    ///   - peer: the peer's address without its port.
    public init(method: String, target: String, headers: [(String, String)] = [], body: [UInt8] = [], peer: String = "127.0.0.1") {
        self.method = method
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        path = parts.first.map(String.init) ?? "/"
        var query: [String: String] = [:]
        if parts.count == 2 {
            for item in parts[1].split(separator: "&") {
                let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = String(pair[0]).removingPercentEncoding ?? String(pair[0])
                let value = pair.count == 2 ? (String(pair[1]).removingPercentEncoding ?? String(pair[1])) : ""
                if query[name] == nil { query[name] = value }
            }
        }
        self.query = query
        var lowered: [String: String] = [:]
        for (name, value) in headers where lowered[name.lowercased()] == nil { lowered[name.lowercased()] = value }
        self.headers = lowered
        self.body = body
        self.peer = peer
    }
}

/// The admin API's answer: a status, headers and a JSON body (or the page's text).
public struct AdminResponse: Sendable {
    /// The HTTP status code.
    public var status: Int
    /// Extra headers (`Set-Cookie`, `Retry-After`).
    public var headers: [(String, String)]
    /// The body.
    public var body: [UInt8]
    /// Its media type.
    public var contentType: String
    /// A server-sent events stream (`text/event-stream`) written after the head instead of `body`, one event per
    /// point, until the client leaves (the listener then calls its `stop`).
    public var events: LiveEvents?

    /// The body as JSON (tests, `sotto admin --server`).
    public var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }

    static func json(_ status: Int, _ object: [String: Any], headers: [(String, String)] = []) -> AdminResponse {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return AdminResponse(status: status, headers: headers, body: Array(data), contentType: "application/json")
    }

    static func error(_ status: Int, _ message: String, headers: [(String, String)] = []) -> AdminResponse {
        json(status, ["error": message], headers: headers)
    }
}

/// The admin API of `sotto serve --admin` (issue 34): operators log in with their credential (``OperatorCredentials``)
/// and manage projects and keys; every call is audited in the store (``AuditedStore``) as `operator:NAME`.
///
/// Two ways to authenticate: a console session (`POST /api/login`, then the `sotto_admin` cookie: HttpOnly,
/// SameSite=Strict, Secure beyond loopback; every state-changing request also carries the session's CSRF token in
/// `X-CSRF-Token`), or the credential itself in `Authorization: Bearer` (tools such as `sotto admin --server`;
/// no cookie, so no CSRF). A project key is never accepted. Failed logins are limited per peer
/// (``loginFailureLimit`` within ``loginWindow``). Sessions live in memory: a restart logs everyone out.
///
/// Endpoints (JSON in and out; errors are `{"error": "..."}` with a 4xx/5xx status):
/// `POST /api/login {"secret"}`, `POST /api/logout`, `GET /api/session`, `GET /api/projects`,
/// `POST /api/projects {"name", "maxSessions"}`, `GET /api/keys` (all), `GET /api/projects/P/keys`,
/// `POST /api/projects/P/keys {"label", "requestsPerSecond", "burst", "origins", "maxSessions"}` (the key's secret is
/// in the answer, once), `POST /api/keys/ID/quota {"maxSessions": N or null}` (the key's own session quota), `POST /api/projects/P/rename {"name"}`, `POST /api/projects/P/disable` (its keys' sessions
/// are cut off) and `.../enable`, `POST /api/keys/ID/revoke`, `POST /api/keys/ID/rotate {"overlapSeconds"}`
/// (a new secret, once; the old one works for the overlap, default 3600 s), `GET /api/audit?limit=N`; beacons under
/// `/api/beacons` and `/api/projects/P/beacons` (register, list, attachments, visibility, decommission); live views
/// `GET /api/projects/P/live` and its server-sent events `GET /api/projects/P/live/events` (``LiveFeed``).
public actor AdminAPI {
    /// Largest request body accepted (bytes).
    public static let maxBodyBytes = 16 * 1024
    /// The session cookie's name.
    public static let cookieName = "sotto_admin"
    /// Seconds a console session lasts without a request.
    public static let sessionIdleTimeout = 1_800.0
    /// Most console sessions held at once (the oldest goes first).
    public static let maxSessions = 1_000
    /// Failed logins from one peer within ``loginWindow`` after which its logins are refused (429) until the
    /// window of its first failure has passed.
    public static let loginFailureLimit = LoginThrottle.maxFailures
    /// The window of ``loginFailureLimit``, in seconds.
    public static let loginWindow = LoginThrottle.window

    struct ConsoleSession {
        let operatorID: String
        let name: String
        let csrf: [UInt8]
        var lastUse: Double
    }

    let store: any ExchangeStore
    /// Seconds since 1970: the sessions' clock and the audit entries' time.
    let now: @Sendable () -> Double
    /// True when the listener is reachable beyond loopback (the cookie is then `Secure`, over TLS).
    let secureCookies: Bool
    /// Cuts off a revoked key's sessions on this node at once (the revocation poll does the other nodes).
    let onRevoke: @Sendable (Set<String>) async -> Void
    /// The live views' feed (`sotto serve --admin`), if any.
    let live: LiveFeed?
    private var sessions: [String: ConsoleSession] = [:]
    private var throttle = LoginThrottle()

    /// - Parameters:
    ///   - store: the service's store (operators, projects, keys, the audit log).
    ///   - secureCookies: mark the session cookie `Secure` (a listener beyond loopback, over TLS).
    ///   - now: the clock, in seconds since 1970.
    ///   - onRevoke: called with the ids of a key just revoked, to end its sessions on this node at once.
    ///   - live: the live views' feed (nil: the live endpoints answer 404).
    public init(store: any ExchangeStore, secureCookies: Bool = false, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 },
                onRevoke: @escaping @Sendable (Set<String>) async -> Void = { _ in }, live: LiveFeed? = nil) {
        self.live = live
        self.store = store
        self.secureCookies = secureCookies
        self.now = now
        self.onRevoke = onRevoke
    }

    /// Who a request comes from, once authenticated.
    struct Caller {
        let record: OperatorRecord
        /// The console session's id, when authenticated by cookie (then CSRF applies).
        let session: String?
    }

    /// Answers one request.
    /// - Parameter request: the request.
    public func handle(_ request: AdminRequest) async -> AdminResponse {
        guard request.method == "GET" || request.method == "POST" else { return .error(405, "only GET and POST") }
        guard request.body.count <= Self.maxBodyBytes else { return .error(413, "a request body is at most \(Self.maxBodyBytes) bytes") }
        // The console page (public: it holds no data; everything it shows comes from the API).
        if let file = ConsolePage.files[request.path] {
            guard request.method == "GET" else { return .error(405, "the page is read with GET") }
            return AdminResponse(status: 200, headers: [], body: Array(file.body.utf8), contentType: file.type)
        }
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, parts[0].isEmpty, parts[1] == "api" else { return .error(404, "no such endpoint (the API is under /api/)") }
        let segments = Array(parts.dropFirst(2))
        if segments == ["login"] {
            guard request.method == "POST" else { return .error(405, "log in with POST") }
            return await login(request)
        }
        let caller: Caller
        switch await authenticate(request) {
        case .success(let found): caller = found
        case .failure(let refusal): return refusal.response
        }
        // A console session's state-changing request must carry its CSRF token (a cross-site form cannot).
        if request.method == "POST", let id = caller.session, let session = sessions[id] {
            let presented = Array((request.headers["x-csrf-token"] ?? "").utf8)
            guard APIKeys.constantTimeEqual(APIKeys.hash(String(decoding: presented, as: UTF8.self)), APIKeys.hash(Hex.encode(session.csrf))) else {
                await audit(caller, "csrf", request.path, "refused: no valid X-CSRF-Token")
                return .error(403, "missing or wrong X-CSRF-Token (GET /api/session gives it)")
            }
        }
        let audited = AuditedStore(store, actor: "operator:" + caller.record.name, now: now)
        do {
            return try await dispatch(segments, request, caller, audited)
        } catch {
            return Self.response(for: error)
        }
    }

    private func dispatch(_ segments: [String], _ request: AdminRequest, _ caller: Caller, _ store: AuditedStore) async throws(StoreError) -> AdminResponse {
        if let answer = try await dispatchBeacons(segments, request, store) { return answer }
        if let answer = try await dispatchLive(segments, request, caller) { return answer }
        // PATH with the path's variable parts as '*', and those parts.
        let variable: Set<Int> = segments.count == 3 && ["projects", "keys"].contains(segments[0]) ? [1] : []
        let shape = segments.enumerated().map { variable.contains($0.offset) ? "*" : $0.element }.joined(separator: "/")
        let argument = variable.isEmpty ? "" : segments[1]
        switch (request.method, shape) {
        case ("POST", "logout"):
            if let id = caller.session { sessions[id] = nil }
            await audit(caller, "logout", "", "ok")
            return .json(200, ["ok": true], headers: [("Set-Cookie", cookie(value: "", maxAge: 0))])
        case ("GET", "session"):
            let csrf = caller.session.flatMap { sessions[$0] }.map { Hex.encode($0.csrf) }
            return .json(200, ["operator": caller.record.name, "csrf": csrf ?? NSNull()])
        case ("GET", "projects"):
            return .json(200, ["projects": try await store.projects().map(Self.json)])
        case ("POST", "projects"):
            let body = try Self.decode(ProjectBody.self, request.body)
            let maxSessions = body.maxSessions ?? 100_000
            guard (1...10_000_000).contains(maxSessions) else { throw .invalid("'maxSessions' must be 1 to 10000000") }
            let name = body.name
            return .json(201, ["project": Self.json(try await store.createProject(name: name, maxSessions: maxSessions))])
        case ("GET", "keys"):
            return .json(200, ["keys": try await store.keys(project: nil).map(Self.json)])
        case ("GET", "projects/*/keys"):
            return .json(200, ["keys": try await store.keys(project: argument).map(Self.json)])
        case ("POST", "projects/*/keys"):
            let project = argument
            let body = try Self.decode(KeyBody.self, request.body)
            try Self.check(body.requestsPerSecond, "requestsPerSecond", above: 0, upTo: 1e9)
            try Self.check(body.burst, "burst", above: 0, upTo: 1e9)
            guard (body.origins?.count ?? 0) <= 32 else { throw .invalid("'origins' holds at most 32 origins") }
            try APIKeyRecord.checkQuota(body.maxSessions)
            let label = body.label ?? "", rate = body.requestsPerSecond ?? 50, burst = body.burst ?? 200, origins = body.origins ?? []
            var (record, key) = try await store.createKey(project: project, label: label, ratePerSecond: rate, burst: burst, origins: origins)
            if let quota = body.maxSessions {
                // A key whose quota cannot be set must not stay usable without it.
                do { try await store.setKeySessionQuota(id: record.id, maxSessions: quota) } catch {
                    try? await store.revokeKey(id: record.id)
                    throw error
                }
                record.maxSessions = quota
            }
            return .json(201, ["key": Self.json(record), "secret": key])
        case ("POST", "keys/*/quota"):
            let quota = try Self.decode(QuotaBody.self, request.body).maxSessions
            try await store.setKeySessionQuota(id: argument, maxSessions: quota)
            return .json(200, ["key": argument, "maxSessions": quota ?? NSNull()])
        case ("POST", "projects/*/rename"):
            let name = try Self.decode(RenameBody.self, request.body).name
            return .json(200, ["project": Self.json(try await store.renameProject(argument, to: name))])
        case ("POST", "projects/*/disable"), ("POST", "projects/*/enable"):
            let disabled = segments[2] == "disable"
            let project = try await store.setProjectDisabled(argument, disabled)
            // Its keys' sessions on this node end at once (other nodes: their revocation poll).
            if disabled { await onRevoke(Set(try await self.store.keys(project: project.id).map(\.id))) }
            return .json(200, ["project": Self.json(project)])
        case ("POST", "keys/*/rotate"):
            let body = try Self.decode(RotateBody.self, request.body)
            let overlap = body.overlapSeconds ?? 3_600
            guard overlap.isFinite, (0...2_592_000).contains(overlap) else { throw .invalid("'overlapSeconds' must be 0 to 2592000 (30 days)") }
            let (record, key) = try await store.rotateKey(id: argument, overlap: overlap)
            return .json(201, ["key": Self.json(record), "secret": key, "previousExpires": now() + overlap])
        case ("POST", "keys/*/revoke"):
            let id = argument
            try await store.revokeKey(id: id)
            await onRevoke([id])
            return .json(200, ["revoked": id])
        case ("GET", "audit"):
            var limit = 100
            if let text = request.query["limit"] {
                guard let value = Int(text), (1...1_000).contains(value) else { throw .invalid("limit is 1 to 1000") }
                limit = value
            }
            let entries = try await store.auditEntries(limit: limit)
            return .json(200, ["entries": entries.map {
                ["time": $0.time, "actor": $0.actor, "action": $0.action, "target": $0.target, "outcome": $0.outcome] as [String: Any]
            }])
        default:
            return .error(404, "no endpoint \(request.method) \(request.path)")
        }
    }

    // MARK: Authentication

    private func login(_ request: AdminRequest) async -> AdminResponse {
        let time = now()
        if let wait = throttle.refusal(peer: request.peer, now: time) {
            try? await store.appendAudit(AuditEntry(time: time, actor: "peer:" + request.peer, action: "login", target: "",
                                                    outcome: "refused: too many failed logins"))
            return .error(429, "too many failed logins: try again in \(Int(wait.rounded(.up))) s", headers: [("Retry-After", "\(Int(wait.rounded(.up)))")])
        }
        let secret: String
        do { secret = try Self.decode(LoginBody.self, request.body).secret } catch { return Self.response(for: error) }
        let record: OperatorRecord?
        do { record = try await OperatorCredentials.authenticate(secret, in: store) } catch { return Self.response(for: error) }
        guard let record else {
            throttle.failed(peer: request.peer, now: time)
            // The audit says which operator id was tried (never the secret), or that a project key was.
            let tried = APIKeys.parse(secret) != nil ? "a project key" : OperatorCredentials.parse(secret).map { "operator id " + ($0.id.count <= 32 && $0.id.allSatisfy(\.isHexDigit) ? $0.id : "malformed") } ?? "malformed"
            try? await store.appendAudit(AuditEntry(time: time, actor: "peer:" + request.peer, action: "login", target: tried, outcome: "refused"))
            return .error(401, APIKeys.parse(secret) != nil ? "a project key is not an admin credential (sotto admin operator create)"
                                                             : "unknown or revoked credential")
        }
        throttle.succeeded(peer: request.peer)
        var generator = SystemRandomNumberGenerator()
        let id = Hex.encode((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let csrf = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        expireSessions(now: time)
        if sessions.count >= Self.maxSessions, let oldest = sessions.min(by: { $0.value.lastUse < $1.value.lastUse })?.key { sessions[oldest] = nil }
        sessions[id] = ConsoleSession(operatorID: record.id, name: record.name, csrf: csrf, lastUse: time)
        try? await store.appendAudit(AuditEntry(time: time, actor: "operator:" + record.name, action: "login", target: "", outcome: "ok"))
        return .json(200, ["operator": record.name, "csrf": Hex.encode(csrf)], headers: [("Set-Cookie", cookie(value: id, maxAge: Int(Self.sessionIdleTimeout)))])
    }

    private func cookie(value: String, maxAge: Int) -> String {
        "\(Self.cookieName)=\(value); Path=/; HttpOnly; SameSite=Strict; Max-Age=\(maxAge)\(secureCookies ? "; Secure" : "")"
    }

    enum Refusal: Error {
        case unauthenticated(String)
        case store(StoreError)
        var response: AdminResponse {
            switch self {
            case .unauthenticated(let why): return .error(401, why)
            case .store(let error): return AdminAPI.response(for: error)
            }
        }
    }

    private func authenticate(_ request: AdminRequest) async -> Result<Caller, Refusal> {
        let time = now()
        if let authorization = request.headers["authorization"] {
            guard authorization.hasPrefix("Bearer ") else { return .failure(.unauthenticated("Authorization: Bearer CREDENTIAL")) }
            let secret = String(authorization.dropFirst("Bearer ".count))
            if let wait = throttle.refusal(peer: request.peer, now: time) {
                return .failure(.unauthenticated("too many failed logins: try again in \(Int(wait.rounded(.up))) s"))
            }
            do {
                guard let record = try await OperatorCredentials.authenticate(secret, in: store) else {
                    throttle.failed(peer: request.peer, now: time)
                    try? await store.appendAudit(AuditEntry(time: time, actor: "peer:" + request.peer, action: "bearer", target: request.path, outcome: "refused"))
                    return .failure(.unauthenticated(APIKeys.parse(secret) != nil ? "a project key is not an admin credential" : "unknown or revoked credential"))
                }
                return .success(Caller(record: record, session: nil))
            } catch { return .failure(.store(error)) }
        }
        guard let id = Self.cookie(request.headers["cookie"] ?? ""), var session = sessions[id] else {
            return .failure(.unauthenticated("log in first (POST /api/login)"))
        }
        guard time - session.lastUse <= Self.sessionIdleTimeout else {
            sessions[id] = nil
            return .failure(.unauthenticated("the session expired: log in again"))
        }
        // A revoked operator's sessions end at their next request.
        do {
            guard let record = try await store.operatorRecord(id: session.operatorID), !record.revoked else {
                sessions[id] = nil
                return .failure(.unauthenticated("the operator was revoked"))
            }
            session.lastUse = time
            sessions[id] = session
            return .success(Caller(record: record, session: id))
        } catch { return .failure(.store(error)) }
    }

    /// The session id in a Cookie header.
    static func cookie(_ header: String) -> String? {
        for pair in header.split(separator: ";") {
            let trimmed = pair.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix(cookieName + "=") { return String(trimmed.dropFirst(cookieName.count + 1)) }
        }
        return nil
    }

    private func expireSessions(now: Double) {
        sessions = sessions.filter { now - $0.value.lastUse <= Self.sessionIdleTimeout }
    }

    func audit(_ caller: Caller, _ action: String, _ target: String, _ outcome: String) async {
        try? await store.appendAudit(AuditEntry(time: now(), actor: "operator:" + caller.record.name, action: action, target: target, outcome: outcome))
    }

    // MARK: JSON

    static func response(for error: StoreError) -> AdminResponse {
        switch error {
        case .unknownProject, .unknownKey, .unknownBeacon, .unknownOperator: return .error(404, error.description)
        case .duplicateProject, .duplicateOperator: return .error(409, error.description)
        case .invalid: return .error(400, error.description)
        case .unavailable: return .error(503, error.description)
        }
    }

    static func json(_ project: Project) -> [String: Any] {
        ["id": project.id, "name": project.name, "maxSessions": project.maxSessions, "disabled": project.disabled]
    }

    static func json(_ key: APIKeyRecord) -> [String: Any] {
        ["id": key.id, "project": key.projectID, "label": key.label, "revoked": key.revoked, "requestsPerSecond": key.ratePerSecond,
         "burst": key.burst, "origins": key.origins, "expires": key.expires ?? NSNull(), "lastUsed": key.lastUsed ?? NSNull(),
         "maxSessions": key.maxSessions ?? NSNull()]
    }

    struct LoginBody: Decodable { let secret: String }
    struct ProjectBody: Decodable { let name: String; let maxSessions: Int? }
    struct RenameBody: Decodable { let name: String }
    struct RotateBody: Decodable { let overlapSeconds: Double? }
    struct KeyBody: Decodable { let label: String?; let requestsPerSecond: Double?; let burst: Double?; let origins: [String]?; let maxSessions: Int? }
    struct QuotaBody: Decodable { let maxSessions: Int? }

    /// The body decoded as `T`, or a 400 naming what is wrong.
    static func decode<T: Decodable>(_ type: T.Type, _ body: [UInt8]) throws(StoreError) -> T {
        do { return try JSONDecoder().decode(T.self, from: Data(body)) } catch let DecodingError.keyNotFound(key, _) {
            throw .invalid("'\(key.stringValue)' is required")
        } catch let DecodingError.typeMismatch(_, context) {
            throw .invalid("'\(context.codingPath.map(\.stringValue).joined(separator: "."))' has the wrong type")
        } catch {
            throw .invalid("the body must be a JSON object")
        }
    }

    /// Checks a number against `(lower, upper]`.
    static func check(_ value: Double?, _ name: String, above lower: Double, upTo upper: Double) throws(StoreError) {
        guard let value else { return }
        guard value.isFinite, value > lower, value <= upper else { throw .invalid("'\(name)' must be a number in (\(lower), \(upper)]") }
    }
}

/// Failed logins per peer: after ``maxFailures`` within ``window`` seconds, the peer's logins are refused until
/// the window of its first failure has passed. A success clears the peer's count. Peers are forgotten when
/// their window passes; at most ``maxPeers`` are tracked (beyond, every peer counts as one).
struct LoginThrottle {
    static let maxFailures = 5
    static let window = 60.0
    static let maxPeers = 10_000
    private var failures: [String: (first: Double, count: Int)] = [:]

    private func key(_ peer: String) -> String { failures.count >= Self.maxPeers && failures[peer] == nil ? "*" : peer }

    /// Seconds until the peer may try again, or nil when it may now.
    func refusal(peer: String, now: Double) -> Double? {
        guard let entry = failures[key(peer)], now - entry.first < Self.window, entry.count >= Self.maxFailures else { return nil }
        return max(1, Self.window - (now - entry.first))
    }

    mutating func failed(peer: String, now: Double) {
        failures = failures.filter { now - $0.value.first < Self.window }
        let key = key(peer)
        if let entry = failures[key] { failures[key] = (entry.first, entry.count + 1) } else { failures[key] = (now, 1) }
    }

    mutating func succeeded(peer: String) { failures[peer] = nil }
}
