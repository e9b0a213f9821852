import Crypto
import Foundation
import SottoExchangeCore
import SottoSupport
import Synchronization

/// A project: the unit of isolation (Nearby's console project). Sessions of one project never see another
/// project's messages, tokens or sightings; public beacon attachments are the one exception.
public struct Project: Sendable, Hashable, Codable {
    public let id: String
    public let name: String
    /// Most sessions the project may hold at once.
    public let maxSessions: Int
    /// A disabled project's keys open no session (its sessions are cut off as a revoked key's); it can be
    /// enabled again.
    public var disabled: Bool = false

    /// Checks a project name: 1 to 100 characters, no '/', no control characters (a newline or tab would
    /// break the one-line-per-project listings). Both stores apply it.
    /// - Parameter name: the name to check.
    /// - Throws: `StoreError.invalid` saying what a name may be.
    public static func checkName(_ name: String) throws(StoreError) {
        guard !name.isEmpty, name.count <= 100, !name.contains("/"), !StoreText.hasControlCharacters(name) else {
            throw .invalid("a project name is 1 to 100 characters, no '/' and no control characters (newline, tab)")
        }
    }

    /// The same project under another name.
    func renamed(_ name: String) -> Project {
        var renamed = Project(id: id, name: name, maxSessions: maxSessions)
        renamed.disabled = disabled
        return renamed
    }
}

extension SessionProject {
    /// The project as the replica keeps it with each session.
    init(_ project: Project) { self.init(id: project.id, name: project.name, maxSessions: project.maxSessions) }
}

/// Text kept in a store and printed one record per line.
enum StoreText {
    /// True when `text` holds a control character (newline, tab, escape: Unicode category Cc).
    static func hasControlCharacters(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// Checks a key label: at most 200 characters, no control characters.
    static func checkLabel(_ label: String) throws(StoreError) {
        guard label.count <= 200, !hasControlCharacters(label) else {
            throw .invalid("a key label is at most 200 characters, no control characters (newline, tab)")
        }
    }
}

/// An API key as stored: never the secret, only its SHA-256.
public struct APIKeyRecord: Sendable, Hashable {
    /// The public part of the key (`sotto_<id>_<secret>`), used to find the record.
    public let id: String
    public let projectID: String
    public let label: String
    /// SHA-256 of the secret part.
    public let secretHash: [UInt8]
    public let revoked: Bool
    /// Requests per second the key may make, summed over its sessions, and the burst above it.
    public let ratePerSecond: Double
    public let burst: Double
    /// The web origins (`https://host[:port]`) whose pages may open sessions with the key over the web
    /// transport; empty: none (the key serves native clients only). See ``WebOrigin``.
    public var origins: [String] = []
    /// When a rotated key stops working (seconds since 1970); nil: until revoked.
    public var expires: Double? = nil
    /// When the key last opened a session (seconds since 1970, to about a minute); nil: never.
    public var lastUsed: Double? = nil
    /// Most sessions the key may hold at once, over every node (within its project's quota); nil: the project's
    /// quota only.
    public var maxSessions: Int? = nil

    /// Checks a key's session quota: nil, or 1 to 10 000 000.
    /// - Parameter maxSessions: the quota.
    public static func checkQuota(_ maxSessions: Int?) throws(StoreError) {
        guard let maxSessions else { return }
        guard (1...10_000_000).contains(maxSessions) else { throw .invalid("a key's session quota is 1 to 10000000") }
    }

    /// True when the key no longer opens sessions at `now`: revoked, or rotated and past its overlap.
    /// - Parameter now: seconds since 1970.
    public func isRetired(at now: Double) -> Bool { revoked || (expires.map { $0 <= now } ?? false) }

    /// Checks what a new key is made of, as both stores do before they look its project up: a positive rate, a
    /// burst of at least 1, a label, web origins.
    /// - Returns: the origins, normalised.
    static func checkNew(label: String, ratePerSecond: Double, burst: Double, origins: [String]) throws(StoreError) -> [String] {
        guard ratePerSecond.isFinite, ratePerSecond > 0, burst.isFinite, burst >= 1 else {
            throw .invalid("a key's rate must be positive and its burst at least 1")
        }
        try StoreText.checkLabel(label)
        return try WebOrigin.normalize(origins)
    }

    /// A new key of project `projectID` (its id and secret from the CSPRNG): the record to store and the plaintext
    /// key, shown once.
    static func generate(projectID: String, label: String, ratePerSecond: Double, burst: Double, origins: [String],
                         maxSessions: Int? = nil) -> (APIKeyRecord, key: String) {
        let (id, key, hash) = APIKeys.generate()
        var record = APIKeyRecord(id: id, projectID: projectID, label: label, secretHash: hash, revoked: false,
                                  ratePerSecond: ratePerSecond, burst: burst, origins: origins)
        record.maxSessions = maxSessions
        return (record, key)
    }

    /// Checks a rotation's overlap, how long the old key keeps working: 0 to 30 days (s).
    static func checkOverlap(_ overlap: Double) throws(StoreError) {
        guard overlap.isFinite, (0...30 * 86_400).contains(overlap) else { throw .invalid("the overlap is 0 to 2592000 s (30 days)") }
    }

    /// The key that replaces this one in a rotation (same project, label, limits, origins and quota), after
    /// checking that this key still opens sessions at `now` (s since 1970).
    func successor(at now: Double) throws(StoreError) -> (APIKeyRecord, key: String) {
        guard !isRetired(at: now) else { throw .invalid("key \(id) is revoked or expired: create a new one") }
        return Self.generate(projectID: projectID, label: label, ratePerSecond: ratePerSecond, burst: burst, origins: origins,
                             maxSessions: maxSessions)
    }
}

/// A key that authenticated: its project and limits.
public struct AuthenticatedKey: Sendable, Hashable {
    public let keyID: String
    public let project: Project
    public let ratePerSecond: Double
    public let burst: Double
    /// The web origins the key is bound to (``APIKeyRecord/origins``).
    public var origins: [String] = []
    /// The key's own session quota (``APIKeyRecord/maxSessions``); nil: the project's only.
    public var maxSessions: Int? = nil
}

/// A registered beacon (an ID a speaker loops, fixed or rotating) with its attachments.
public struct BeaconRecord: Sendable, Hashable {
    /// The stable ID (1 to 15 bytes).
    public let id: [UInt8]
    public let projectID: String
    /// Public attachments are delivered to subscribers of every project.
    public let isPublic: Bool
    /// How a rotating beacon's broadcast ID changes (its identity key, kept at rest in the store); nil for a
    /// fixed beacon.
    public let rotation: BeaconRotation?
    public var attachments: [Message]
    /// Decommissioned for good: its attachments and key are gone, its ID resolves to nothing for anyone and is
    /// never registered again (the record is kept for that).
    public var decommissioned = false

    /// A decommissioned beacon of project `projectID`, as the stores list it.
    init(decommissioned id: [UInt8], projectID: String) {
        self.init(id: id, projectID: projectID, isPublic: false, rotation: nil)
        decommissioned = true
    }

    /// Why a decommissioned beacon's ID is refused.
    static func decommissionedMessage(_ id: [UInt8]) -> String {
        "beacon \(Hex.encode(id)) was decommissioned: its ID is never registered again"
    }

    /// What the matcher registers for this record: itself, or for a decommissioned beacon, a beacon of no
    /// project, private and without attachments, so that its ID heard resolves to nothing for anyone.
    package var registered: RegisteredBeacon {
        decommissioned ? RegisteredBeacon(id: id, projectID: "", isPublic: false, rotation: nil, attachments: [])
            : RegisteredBeacon(id: id, projectID: projectID, isPublic: isPublic, rotation: rotation, attachments: attachments)
    }

    /// Refuses an ID that is not 1 to 15 bytes, or a rotating beacon's ID shorter than
    /// `BeaconProvisioning.minimumIDLength` (its rotating IDs, as long, would collide too often).
    func validate() throws(StoreError) {
        guard (1...15).contains(id.count) else { throw .invalid(ExchangeError.invalidBeaconID(id.count).description) }
        if rotation != nil, id.count < BeaconProvisioning.minimumIDLength {
            throw .invalid("a rotating beacon's ID must be \(BeaconProvisioning.minimumIDLength) to 15 bytes, got \(id.count)")
        }
    }

    /// The rotation stored as an identity key and a period: nil for a fixed beacon (neither). A rotation that
    /// cannot be used (one stored before identity keys existed, with a 64-bit key anyone could invert and no
    /// identity key; a damaged key; an identity key without its period, or a period without its key) fails
    /// closed: the beacon stays registered as rotating, under ``unresolvableKey``, so that neither the IDs it
    /// broadcasts nor its stable ID (never on the air) resolve to it: no attachment, no stable ID, to any
    /// project (its rotating IDs pass for unregistered beacons', random and unlinkable). It resolves again
    /// once registered again.
    static func storedRotation(key: [UInt8]?, period: Double?) -> BeaconRotation? {
        if key == nil && period == nil { return nil }
        if let key, let period, let identity = try? BeaconIdentityKey(bytes: key), let rotation = try? BeaconRotation(key: identity, period: period) {
            return rotation
        }
        return Self.unresolvable
    }

    /// A key from this process's CSPRNG that no beacon has: IDs under it resolve nothing anyone broadcasts.
    static let unresolvableKey = BeaconIdentityKey.generate()
    /// The rotation of a beacon whose stored rotation cannot be used.
    package static let unresolvable = try! BeaconRotation(key: unresolvableKey, period: 900)

    public init(id: [UInt8], projectID: String, isPublic: Bool, rotation: BeaconRotation?, attachments: [Message] = []) {
        self.id = id
        self.projectID = projectID
        self.isPublic = isPublic
        self.rotation = rotation
        self.attachments = attachments
    }
}

/// Every way the store can fail; each says what to do.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownProject(String)
    case duplicateProject(String)
    case unknownKey(String)
    case unknownBeacon(String)
    case invalid(String)
    /// The database refused a write (full disk, read-only file) or could not be reached.
    case unavailable(String)
    case unknownOperator(String)
    case duplicateOperator(String)

    public var description: String {
        switch self {
        case .unknownProject(let p): return "no project '\(p)' (sotto admin project list)"
        case .duplicateProject(let p): return "a project named '\(p)' exists already"
        case .unknownKey(let k): return "no API key '\(k)'"
        case .unknownBeacon(let b): return "no beacon \(b) (sotto admin beacon register)"
        case .invalid(let what): return what
        case .unavailable(let why): return "the store is unavailable: \(why)"
        case .unknownOperator(let o): return "no operator '\(o)' (sotto admin operator list)"
        case .duplicateOperator(let o): return "an operator named '\(o)' exists already"
        }
    }
}

/// Where the matcher service keeps what outlives a session: projects, API keys (hashed), beacons and their
/// attachments. Sessions, tokens and sightings live in the matcher core. ``SQLiteStore`` serves one node;
/// ``PostgresStore`` several, sharing one database.
public protocol ExchangeStore: Sendable {
    func createProject(name: String, maxSessions: Int) async throws(StoreError) -> Project
    func projects() async throws(StoreError) -> [Project]
    /// Creates a key and returns its full text, which is shown once and never stored.
    /// `origins`: the web origins whose pages may use it (normalised by ``WebOrigin``; empty: none).
    func createKey(project: String, label: String, ratePerSecond: Double, burst: Double, origins: [String]) async throws(StoreError)
        -> (APIKeyRecord, key: String)
    func keys(project: String?) async throws(StoreError) -> [APIKeyRecord]
    func revokeKey(id: String) async throws(StoreError)
    /// The key record with this public id, if any (revoked ones included).
    func key(id: String) async throws(StoreError) -> APIKeyRecord?
    func project(id: String) async throws(StoreError) -> Project?
    func registerBeacon(_ beacon: BeaconRecord) async throws(StoreError)
    func addAttachment(beacon: [UInt8], _ attachment: Message) async throws(StoreError)
    func beacons() async throws(StoreError) -> [BeaconRecord]
    /// Changes whenever beacons or attachments change (so a running service reloads them).
    func registryVersion() async throws(StoreError) -> Int64
    /// Deletes a beacon's attachment: the `index`th (from 0) in the order ``beacons()`` lists them.
    func removeAttachment(beacon: [UInt8], at index: Int) async throws(StoreError)
    /// Makes a beacon's attachments public (delivered to every project) or unlisted (its project only).
    func setBeaconPublic(_ beacon: [UInt8], _ isPublic: Bool) async throws(StoreError)
    /// Decommissions a beacon for good: its attachments and key are deleted, its ID resolves to nothing and can
    /// never be registered again.
    func decommissionBeacon(_ beacon: [UInt8]) async throws(StoreError)

    /// Creates an operator (an admin API credential, never a project key) and returns its full credential,
    /// which is shown once and never stored.
    func createOperator(name: String) async throws(StoreError) -> (OperatorRecord, secret: String)
    /// Every operator, revoked ones included, in order of creation.
    func operators() async throws(StoreError) -> [OperatorRecord]
    /// The operator whose credential has this public id, if any (revoked ones included).
    func operatorRecord(id: String) async throws(StoreError) -> OperatorRecord?
    /// Revokes an operator, by name or id: it can no longer log in.
    func revokeOperator(_ nameOrID: String) async throws(StoreError)
    /// Renames a project (by id or name); its id, keys and sessions stay.
    func renameProject(_ project: String, to name: String) async throws(StoreError) -> Project
    /// Disables (or enables again) a project, by id or name: a disabled project's keys open no session.
    func setProjectDisabled(_ project: String, _ disabled: Bool) async throws(StoreError) -> Project
    /// Rotates a key: a new key with the same project, label, limits and origins (its full text returned, shown
    /// once), while the old one keeps working for `overlap` seconds (then it stops, as if revoked).
    func rotateKey(id: String, overlap: Double) async throws(StoreError) -> (APIKeyRecord, key: String)
    /// Sets a key's own session quota (nil: the project's only); a rotated key's successor inherits it.
    func setKeySessionQuota(id: String, maxSessions: Int?) async throws(StoreError)
    /// Notes that a key opened a session now (at most one write a minute per key).
    func recordKeyUse(id: String) async throws(StoreError)
    /// Appends a line to the audit log.
    func appendAudit(_ entry: AuditEntry) async throws(StoreError)
    /// The last `limit` lines of the audit log, newest first.
    func auditEntries(limit: Int) async throws(StoreError) -> [AuditEntry]
    /// Shares this node's live counters (per project, since it started) with the other nodes of the service, as of
    /// `time` (s since 1970). A store of one node (SQLite) keeps nothing: there is nobody to share with.
    func shareLiveCounters(node: String, counters: [String: ProjectCounters], time: Double) async throws(StoreError)
    /// The live counters every node shared at `since` (s since 1970) or later, per node; nodes gone quiet are left out.
    func sharedLiveCounters(since: Double) async throws(StoreError) -> [String: [String: ProjectCounters]]
}

extension ExchangeStore {
    /// The id of the project `project` names (its id or its name), nil for nil (every project).
    /// - Throws: `StoreError.unknownProject` when it names none.
    func projectID(of project: String?) async throws(StoreError) -> String? {
        guard let project else { return nil }
        guard let owner = try await self.project(id: project) else { throw .unknownProject(project) }
        return owner.id
    }

    /// A new key checked (``APIKeyRecord``'s rules) and made for the project `project` names, for the store to write:
    /// its record (origins normalised) and its plaintext, shown once.
    /// - Throws: `StoreError.invalid` for a bad rate, burst, label or origin; `.unknownProject` when `project` names none.
    func newKey(project: String, label: String, ratePerSecond: Double, burst: Double, origins: [String]) async throws(StoreError)
        -> (APIKeyRecord, key: String) {
        let origins = try APIKeyRecord.checkNew(label: label, ratePerSecond: ratePerSecond, burst: burst, origins: origins)
        guard let owner = try await self.project(id: project) else { throw .unknownProject(project) }
        return APIKeyRecord.generate(projectID: owner.id, label: label, ratePerSecond: ratePerSecond, burst: burst, origins: origins)
    }

    /// A rotation checked (its overlap, the key known and still opening sessions): the old key, and the new one
    /// with its plaintext, for the store to write.
    func rotation(of id: String, overlap: Double) async throws(StoreError) -> (old: APIKeyRecord, new: APIKeyRecord, key: String) {
        try APIKeyRecord.checkOverlap(overlap)
        guard let old = try await key(id: id) else { throw .unknownKey(id) }
        let (new, key) = try old.successor(at: Date().timeIntervalSince1970)
        return (old, new, key)
    }
}

/// A store of one node shares no live counters.
extension ExchangeStore {
    public func shareLiveCounters(node: String, counters: [String: ProjectCounters], time: Double) async throws(StoreError) {}
    public func sharedLiveCounters(since: Double) async throws(StoreError) -> [String: [String: ProjectCounters]] { [:] }
}

extension ExchangeStore {
    /// Creates a key bound to no web origin (it serves native clients only) and returns its full text.
    /// - Parameters:
    ///   - project: the project's id or name.
    ///   - label: what the key is for.
    ///   - ratePerSecond: requests per second over the key's sessions.
    ///   - burst: requests allowed above the rate at once.
    public func createKey(project: String, label: String, ratePerSecond: Double, burst: Double) async throws(StoreError) -> (APIKeyRecord, key: String) {
        try await createKey(project: project, label: label, ratePerSecond: ratePerSecond, burst: burst, origins: [])
    }
}

/// API keys: `sotto_<id>_<secret>`, 8 bytes of id and 32 bytes of secret from the system CSPRNG, hex; only
/// the secret's SHA-256 is stored and it is compared in constant time.
public enum APIKeys {
    static let prefix = "sotto_"

    /// A new key: its public id and full text.
    public static func generate() -> (id: String, key: String, secretHash: [UInt8]) {
        var generator = SystemRandomNumberGenerator()
        let id = hex((0..<8).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let secret = hex((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        return (id, prefix + id + "_" + secret, hash(secret))
    }

    /// The id and secret of a key's text, or nil when it is not shaped like a key.
    public static func parse(_ key: String) -> (id: String, secret: String)? {
        guard key.hasPrefix(prefix), key.utf8.count < 200 else { return nil }
        let parts = key.dropFirst(prefix.count).split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    public static func hash(_ secret: String) -> [UInt8] { Array(SHA256.hash(data: Array(secret.utf8))) }

    /// Equal contents, in a time that depends only on the lengths.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool { ConstantTime.equal(a, b) }

    /// The project and limits of `key`, or nil for an unknown, malformed or revoked key. The work done is
    /// the same whether the id exists or not (a hash and a constant-time comparison).
    public static func authenticate(_ key: String, in store: any ExchangeStore) async throws(StoreError) -> AuthenticatedKey? {
        let parsed = parse(key)
        var record: APIKeyRecord?
        if let parsed { record = try await store.key(id: parsed.id) }
        let presented = hash(parsed?.secret ?? key)
        let expected = record?.secretHash ?? [UInt8](repeating: 0, count: presented.count)
        let matches = constantTimeEqual(presented, expected)
        let now = Date().timeIntervalSince1970
        guard matches, let record, !record.isRetired(at: now), let project = try await store.project(id: record.projectID), !project.disabled else {
            return nil
        }
        // Last use, for operators: at most one write a minute per key from this process, not waited for.
        if noteUse(of: record.id, at: now) { Task { try? await store.recordKeyUse(id: record.id) } }
        return AuthenticatedKey(keyID: record.id, project: project, ratePerSecond: record.ratePerSecond, burst: record.burst,
                                origins: record.origins, maxSessions: record.maxSessions)
    }

    static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

    /// When this process last wrote each key's last use (cleared when it holds 10 000 keys).
    private static let usesWritten = Mutex<[String: Double]>([:])

    /// True when the key's last use should be written now (none written by this process within a minute).
    static func noteUse(of id: String, at now: Double) -> Bool {
        usesWritten.withLock { written in
            if let last = written[id], now - last < 60 { return false }
            if written.count >= 10_000 { written.removeAll() }
            written[id] = now
            return true
        }
    }
}
