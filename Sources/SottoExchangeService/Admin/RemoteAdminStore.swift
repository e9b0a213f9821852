import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SottoExchangeWire
import SottoExchangeCore
import SottoSupport

/// The admin API of a running `sotto serve --admin`, as a store: what `sotto admin --server URL` works on.
/// Projects, keys, beacons and the audit log go through the API (which audits them as the operator); operators
/// are not in the API and are refused with a message saying to use the store. Every call is bounded by
/// ``timeout``.
public final class RemoteAdminStore: ExchangeStore {
    /// The API's base: `http://HOST:PORT`, `https://HOST:PORT` or `http+unix://ENCODED-PATH`.
    let base: String
    /// The operator's credential, sent as `Authorization: Bearer`.
    private let secret: String
    /// The longest a call waits for its answer.
    public let timeout: TimeAmount

    /// - Parameters:
    ///   - server: `http://HOST:PORT`, `https://HOST:PORT`, or `unix:PATH` (the listener's Unix socket).
    ///   - secret: the operator's credential (from `sotto admin operator create`).
    ///   - timeout: the longest a call waits, in seconds.
    /// - Throws: `StoreError.invalid` for a URL of another shape, or plain HTTP to a host beyond loopback.
    public init(server: String, secret: String, timeout: Double = 10) throws(StoreError) {
        if server.hasPrefix("unix:") {
            let path = String(server.dropFirst("unix:".count))
            guard !path.isEmpty, let encoded = path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) else {
                throw .invalid("--server unix:PATH needs the socket's path")
            }
            base = "http+unix://" + encoded
        } else {
            guard let url = URL(string: server), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", let host = url.host,
                  url.path.isEmpty || url.path == "/" else {
                throw .invalid("--server is http://HOST:PORT, https://HOST:PORT or unix:PATH (the address of sotto serve --admin)")
            }
            if scheme == "http", let address = try? MatcherAddress(parsing: "\(host.contains(":") ? "[\(host)]" : host):\(url.port ?? 80)"), !address.isLocal {
                throw .invalid("\(host) is reachable from other machines: use https:// (the credential must not cross the network in clear)")
            }
            base = server.hasSuffix("/") ? String(server.dropLast()) : server
        }
        self.secret = secret
        self.timeout = .nanoseconds(Int64(timeout * 1e9))
    }

    /// One call: the answer's JSON object, or the API's error as a `StoreError`.
    func call(_ method: HTTPMethod, _ path: String, _ body: [String: Any]? = nil) async throws(StoreError) -> [String: Any] {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer " + secret)
        if let body {
            guard let data = try? JSONSerialization.data(withJSONObject: body) else { throw .invalid("cannot encode the request") }
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: data))
        }
        let status: UInt, bytes: ByteBuffer
        do {
            let response = try await HTTPClient.shared.execute(request, timeout: timeout)
            status = response.status.code
            bytes = try await response.body.collect(upTo: 8 << 20)
        } catch {
            throw .unavailable("the admin API at \(base): \(error)")
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView))) as? [String: Any]
        guard (200..<300).contains(status), let object else {
            let message = object?["error"] as? String ?? "HTTP \(status)"
            switch status {
            case 401: throw .invalid("the admin API refused the credential: \(message) (SOTTO_ADMIN_SECRET)")
            case 500...: throw .unavailable("the admin API at \(base): \(message)")
            default: throw .invalid(message)
            }
        }
        return object
    }

    static func segment(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(.init(charactersIn: "-_."))) ?? text }

    static func project(_ object: Any?) throws(StoreError) -> Project {
        guard let object = object as? [String: Any], let id = object["id"] as? String, let name = object["name"] as? String,
              let maxSessions = (object["maxSessions"] as? NSNumber)?.intValue else { throw .unavailable("the admin API answered no project") }
        var project = Project(id: id, name: name, maxSessions: maxSessions)
        project.disabled = object["disabled"] as? Bool ?? false
        return project
    }

    static func key(_ object: Any?) throws(StoreError) -> APIKeyRecord {
        guard let object = object as? [String: Any], let id = object["id"] as? String, let project = object["project"] as? String else {
            throw .unavailable("the admin API answered no key")
        }
        return APIKeyRecord(id: id, projectID: project, label: object["label"] as? String ?? "", secretHash: [], revoked: object["revoked"] as? Bool ?? false,
                            ratePerSecond: (object["requestsPerSecond"] as? NSNumber)?.doubleValue ?? 0, burst: (object["burst"] as? NSNumber)?.doubleValue ?? 0,
                            origins: object["origins"] as? [String] ?? [], expires: (object["expires"] as? NSNumber)?.doubleValue,
                            lastUsed: (object["lastUsed"] as? NSNumber)?.doubleValue, maxSessions: (object["maxSessions"] as? NSNumber)?.intValue)
    }

    public func createProject(name: String, maxSessions: Int) async throws(StoreError) -> Project {
        try Self.project(try await call(.POST, "/api/projects", ["name": name, "maxSessions": maxSessions])["project"])
    }

    public func projects() async throws(StoreError) -> [Project] {
        guard let list = try await call(.GET, "/api/projects")["projects"] as? [Any] else { throw .unavailable("the admin API answered no projects") }
        var projects: [Project] = []
        for item in list { projects.append(try Self.project(item)) }
        return projects
    }

    public func project(id: String) async throws(StoreError) -> Project? { try await projects().first { $0.id == id || $0.name == id } }

    public func createKey(project: String, label: String, ratePerSecond: Double, burst: Double, origins: [String]) async throws(StoreError)
        -> (APIKeyRecord, key: String) {
        let answer = try await call(.POST, "/api/projects/\(Self.segment(project))/keys",
                                    ["label": label, "requestsPerSecond": ratePerSecond, "burst": burst, "origins": origins])
        guard let secret = answer["secret"] as? String else { throw .unavailable("the admin API answered no key") }
        return (try Self.key(answer["key"]), secret)
    }

    public func keys(project: String?) async throws(StoreError) -> [APIKeyRecord] {
        let answer = try await call(.GET, project.map { "/api/projects/\(Self.segment($0))/keys" } ?? "/api/keys")
        guard let list = answer["keys"] as? [Any] else { throw .unavailable("the admin API answered no keys") }
        var keys: [APIKeyRecord] = []
        for item in list { keys.append(try Self.key(item)) }
        return keys
    }

    public func key(id: String) async throws(StoreError) -> APIKeyRecord? { try await keys(project: nil).first { $0.id == id } }

    public func revokeKey(id: String) async throws(StoreError) { _ = try await call(.POST, "/api/keys/\(Self.segment(id))/revoke") }

    public func renameProject(_ project: String, to name: String) async throws(StoreError) -> Project {
        try Self.project(try await call(.POST, "/api/projects/\(Self.segment(project))/rename", ["name": name])["project"])
    }

    public func setProjectDisabled(_ project: String, _ disabled: Bool) async throws(StoreError) -> Project {
        try Self.project(try await call(.POST, "/api/projects/\(Self.segment(project))/\(disabled ? "disable" : "enable")")["project"])
    }

    public func rotateKey(id: String, overlap: Double) async throws(StoreError) -> (APIKeyRecord, key: String) {
        let answer = try await call(.POST, "/api/keys/\(Self.segment(id))/rotate", ["overlapSeconds": overlap])
        guard let secret = answer["secret"] as? String else { throw .unavailable("the admin API answered no key") }
        return (try Self.key(answer["key"]), secret)
    }

    // MARK: Beacons

    /// Registers (or replaces) a beacon; a rotating one's identity key (made by the caller, who keeps its one
    /// copy) is sent to the service, over the admin listener's TLS beyond loopback.
    public func registerBeacon(_ beacon: BeaconRecord) async throws(StoreError) {
        var body: [String: Any] = [
            "id": Hex.encode(beacon.id), "visibility": beacon.isPublic ? "public" : "unlisted",
            "attachments": beacon.attachments.map { ["namespace": $0.namespace, "type": $0.type, "hex": Hex.encode($0.content)] },
        ]
        if let rotation = beacon.rotation {
            body["rotationPeriod"] = rotation.period
            body["identityKey"] = Hex.encode(rotation.key.bytes)
        }
        _ = try await call(.POST, "/api/projects/\(Self.segment(beacon.projectID))/beacons", body)
    }

    public func addAttachment(beacon: [UInt8], _ attachment: Message) async throws(StoreError) {
        _ = try await call(.POST, "/api/beacons/\(Hex.encode(beacon))/attachments",
                           ["namespace": attachment.namespace, "type": attachment.type, "hex": Hex.encode(attachment.content)])
    }

    public func removeAttachment(beacon: [UInt8], at index: Int) async throws(StoreError) {
        _ = try await call(.POST, "/api/beacons/\(Hex.encode(beacon))/attachments/\(index)/delete")
    }

    public func setBeaconPublic(_ beacon: [UInt8], _ isPublic: Bool) async throws(StoreError) {
        _ = try await call(.POST, "/api/beacons/\(Hex.encode(beacon))/visibility", ["visibility": isPublic ? "public" : "unlisted"])
    }

    public func decommissionBeacon(_ beacon: [UInt8]) async throws(StoreError) {
        _ = try await call(.POST, "/api/beacons/\(Hex.encode(beacon))/decommission")
    }

    /// The beacons, as the API lists them: a rotating beacon's key stays on the service (the record carries its
    /// period with a placeholder key).
    public func beacons() async throws(StoreError) -> [BeaconRecord] {
        guard let list = try await call(.GET, "/api/beacons")["beacons"] as? [[String: Any]] else {
            throw .unavailable("the admin API answered no beacons")
        }
        var beacons: [BeaconRecord] = []
        for item in list {
            guard let idText = item["id"] as? String, let id = Hex.decode(idText), let project = item["project"] as? String else {
                throw .unavailable("the admin API answered a beacon without its id or project")
            }
            if item["decommissioned"] as? Bool == true {
                beacons.append(BeaconRecord(decommissioned: id, projectID: project))
                continue
            }
            let rotation = ((item["rotationPeriod"] as? NSNumber)?.doubleValue).flatMap { try? BeaconRotation(key: BeaconRecord.unresolvableKey, period: $0) }
            var attachments: [Message] = []
            for attachment in item["attachments"] as? [[String: Any]] ?? [] {
                guard let namespace = attachment["namespace"] as? String, let type = attachment["type"] as? String,
                      let data = (attachment["hex"] as? String).flatMap(Hex.decode),
                      let message = try? BeaconAttachment.message(namespace: namespace, type: type, data: data) else { continue }
                attachments.append(message)
            }
            beacons.append(BeaconRecord(id: id, projectID: project, isPublic: item["visibility"] as? String == "public", rotation: rotation,
                                        attachments: attachments))
        }
        return beacons
    }

    public func auditEntries(limit: Int) async throws(StoreError) -> [AuditEntry] {
        let answer = try await call(.GET, "/api/audit?limit=\(min(max(limit, 1), 1_000))")
        guard let list = answer["entries"] as? [[String: Any]] else { throw .unavailable("the admin API answered no audit entries") }
        return list.map {
            AuditEntry(time: ($0["time"] as? NSNumber)?.doubleValue ?? 0, actor: $0["actor"] as? String ?? "", action: $0["action"] as? String ?? "",
                       target: $0["target"] as? String ?? "", outcome: $0["outcome"] as? String ?? "")
        }
    }

    // Not in the admin API (yet): said plainly.

    static let operatorsOnStore = StoreError.invalid("operators are made on the store (bootstrap): sotto admin operator ... --store")

    public func registryVersion() async throws(StoreError) -> Int64 {
        throw .invalid("the registry's version is the store's: sotto serve follows it on the store")
    }
    public func createOperator(name: String) async throws(StoreError) -> (OperatorRecord, secret: String) { throw Self.operatorsOnStore }
    public func operators() async throws(StoreError) -> [OperatorRecord] { throw Self.operatorsOnStore }
    public func operatorRecord(id: String) async throws(StoreError) -> OperatorRecord? { throw Self.operatorsOnStore }
    public func revokeOperator(_ nameOrID: String) async throws(StoreError) { throw Self.operatorsOnStore }
    public func setKeySessionQuota(id: String, maxSessions: Int?) async throws(StoreError) {
        _ = try await call(.POST, "/api/keys/\(Self.segment(id))/quota", ["maxSessions": maxSessions.map { $0 as Any } ?? NSNull()])
    }

    public func recordKeyUse(id: String) async throws(StoreError) {}
    public func appendAudit(_ entry: AuditEntry) async throws(StoreError) { throw .invalid("the admin API writes its own audit log") }
}
