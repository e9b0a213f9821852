import Foundation
import GRDB
import SottoExchangeCore

/// The embedded store of a single `sotto serve` node: one SQLite file (WAL), through GRDB. The default
/// location is `$XDG_DATA_HOME/sotto/exchange.sqlite` (else `~/.local/share/sotto/exchange.sqlite`).
public final class SQLiteStore: ExchangeStore {
    private let database: DatabasePool
    /// The descriptor holding the service's lock on the database file (``init(path:maxPages:service:)``).
    private let serviceLock: Int32?

    /// The default database file for the current user.
    public static var defaultPath: String {
        let environment = ProcessInfo.processInfo.environment
        let base = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/share").path
        return base + "/sotto/exchange.sqlite"
    }

    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    /// - Parameters:
    ///   - path: the database file.
    ///   - maxPages: test hook: a page limit that makes writes fail as on a full disk.
    ///   - service: true for `sotto serve`: the store serves one node, so the file is locked (flock) for as long
    ///     as the store lives, and a second service on the same file is refused. Admin commands share it.
    /// - Throws: `StoreError.unavailable` when the file cannot be opened (its directory must exist), or is
    ///   locked by another service.
    public init(path: String, maxPages: Int? = nil, service: Bool = false) throws(StoreError) {
        let directory = (path as NSString).deletingLastPathComponent
        var isDirectory: ObjCBool = false
        guard directory.isEmpty || (FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) && isDirectory.boolValue) else {
            throw .unavailable("\(path): no directory \(directory) (create it first)")
        }
        if service {
            let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else { throw .unavailable("\(path): \(String(cString: strerror(errno)))") }
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                close(descriptor)
                throw .unavailable("\(path) is in use by another sotto serve: a SQLite store serves one node only; for several nodes share a PostgreSQL store (--store postgres://...)")
            }
            serviceLock = descriptor
        } else {
            serviceLock = nil
        }
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(5)
            if let maxPages {
                configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA max_page_count = \(maxPages)") }
            }
            database = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(database)
        } catch {
            if let serviceLock { close(serviceLock) }
            throw .unavailable("\(path): \(error)")
        }
    }

    deinit { if let serviceLock { close(serviceLock) } }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE project (
                    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, max_sessions INTEGER NOT NULL, created REAL NOT NULL);
                CREATE TABLE api_key (
                    id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES project(id), label TEXT NOT NULL,
                    secret_hash BLOB NOT NULL, revoked INTEGER NOT NULL DEFAULT 0,
                    rate_per_second REAL NOT NULL, burst REAL NOT NULL, created REAL NOT NULL);
                CREATE TABLE beacon (
                    id BLOB PRIMARY KEY, project_id TEXT NOT NULL REFERENCES project(id), public INTEGER NOT NULL,
                    rotation_key INTEGER, rotation_period REAL);
                CREATE TABLE attachment (
                    beacon_id BLOB NOT NULL REFERENCES beacon(id) ON DELETE CASCADE, position INTEGER NOT NULL,
                    namespace TEXT NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (beacon_id, position));
                CREATE TABLE registry_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
                INSERT INTO registry_version VALUES (1, 0);
                """)
        }
        // Rotating beacons' identity keys (16 to 32 bytes); rotation_key (SplitMix64's) is no longer read.
        migrator.registerMigration("v2") { db in
            try db.execute(sql: "ALTER TABLE beacon ADD COLUMN identity_key BLOB")
        }
        // Web origins a key is bound to, separated by spaces (none: '').
        migrator.registerMigration("v3") { db in
            try db.execute(sql: "ALTER TABLE api_key ADD COLUMN origins TEXT NOT NULL DEFAULT ''")
        }
        // Operators (admin API credentials, hashed) and the audit log of admin operations (issue 34).
        migrator.registerMigration("v4") { db in
            try db.execute(sql: """
                CREATE TABLE operator (
                    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, secret_hash BLOB NOT NULL,
                    revoked INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL);
                CREATE TABLE audit (
                    serial INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
                    target TEXT NOT NULL, outcome TEXT NOT NULL);
                """)
        }
        // Disabled projects; rotated keys' end of overlap; keys' last use (issue 34).
        migrator.registerMigration("v5") { db in
            try db.execute(sql: """
                ALTER TABLE project ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE api_key ADD COLUMN expires REAL;
                ALTER TABLE api_key ADD COLUMN last_used REAL;
                """)
        }
        // Decommissioned beacons: kept (attachments and key gone) so that their IDs are never registered again; keys'
        // own session quotas (NULL: the project's only) (issue 34).
        migrator.registerMigration("v6-beacon-decommissioned-key-quota") { db in
            try db.execute(sql: """
                ALTER TABLE beacon ADD COLUMN decommissioned INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE api_key ADD COLUMN max_sessions INTEGER;
                """)
        }
        return migrator
    }

    private func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(StoreError) -> T {
        do { return try await database.write(body) } catch let error as StoreError { throw error } catch {
            throw .unavailable("\(error)")
        }
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws(StoreError) -> T {
        do { return try await database.read(body) } catch let error as StoreError { throw error } catch {
            throw .unavailable("\(error)")
        }
    }

    public func createProject(name: String, maxSessions: Int) async throws(StoreError) -> Project {
        try Project.checkName(name)
        guard maxSessions > 0 else { throw .invalid("the session quota must be positive") }
        let project = Project(id: "p_" + APIKeys.hex((0..<6).map { _ in UInt8.random(in: 0...255) }), name: name, maxSessions: maxSessions)
        return try await write { db in
            if try Row.fetchOne(db, sql: "SELECT 1 FROM project WHERE name = ?", arguments: [name]) != nil {
                throw StoreError.duplicateProject(name)
            }
            try db.execute(sql: "INSERT INTO project (id, name, max_sessions, created) VALUES (?, ?, ?, ?)",
                           arguments: [project.id, name, maxSessions, Date().timeIntervalSince1970])
            return project
        }
    }

    public func projects() async throws(StoreError) -> [Project] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT id, name, max_sessions, disabled FROM project ORDER BY name").map(Self.project)
        }
    }

    public func project(id: String) async throws(StoreError) -> Project? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT id, name, max_sessions, disabled FROM project WHERE id = ? OR name = ?", arguments: [id, id]).map(Self.project)
        }
    }

    private static func project(_ row: Row) -> Project {
        var project = Project(id: row[0], name: row[1], maxSessions: row[2])
        project.disabled = row[3] as Bool
        return project
    }

    public func createKey(project: String, label: String, ratePerSecond: Double, burst: Double, origins: [String]) async throws(StoreError)
        -> (APIKeyRecord, key: String) {
        let (record, key) = try await newKey(project: project, label: label, ratePerSecond: ratePerSecond, burst: burst, origins: origins)
        let (id, hash) = (record.id, record.secretHash)
        try await write { db in
            try db.execute(sql: "INSERT INTO api_key (id, project_id, label, secret_hash, revoked, rate_per_second, burst, created, origins) VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?)",
                           arguments: [id, record.projectID, label, Data(hash), ratePerSecond, burst, Date().timeIntervalSince1970,
                                       WebOrigin.stored(record.origins)])
        }
        return (record, key)
    }

    public func keys(project: String?) async throws(StoreError) -> [APIKeyRecord] {
        let ownerID = try await projectID(of: project)
        return try await read { db in
            let sql = "SELECT \(Self.keyColumns) FROM api_key"
            let rows = try ownerID.map { try Row.fetchAll(db, sql: sql + " WHERE project_id = ? ORDER BY created", arguments: [$0]) }
                ?? Row.fetchAll(db, sql: sql + " ORDER BY created")
            return rows.map(Self.key)
        }
    }

    public func key(id: String) async throws(StoreError) -> APIKeyRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT \(Self.keyColumns) FROM api_key WHERE id = ?",
                             arguments: [id]).map(Self.key)
        }
    }

    private static let keyColumns = "id, project_id, label, secret_hash, revoked, rate_per_second, burst, origins, expires, last_used, max_sessions"

    private static func key(_ row: Row) -> APIKeyRecord {
        let hash: Data = row[3]
        var record = APIKeyRecord(id: row[0], projectID: row[1], label: row[2], secretHash: Array(hash), revoked: row[4] as Bool,
                                  ratePerSecond: row[5], burst: row[6], origins: WebOrigin.parseStored(row[7]), expires: row[8], lastUsed: row[9])
        record.maxSessions = row[10]
        return record
    }

    public func setKeySessionQuota(id: String, maxSessions: Int?) async throws(StoreError) {
        try APIKeyRecord.checkQuota(maxSessions)
        try await write { db in
            try db.execute(sql: "UPDATE api_key SET max_sessions = ? WHERE id = ?", arguments: [maxSessions, id])
            if db.changesCount == 0 { throw StoreError.unknownKey(id) }
        }
    }

    public func revokeKey(id: String) async throws(StoreError) {
        try await write { db in
            try db.execute(sql: "UPDATE api_key SET revoked = 1 WHERE id = ?", arguments: [id])
            if db.changesCount == 0 { throw StoreError.unknownKey(id) }
        }
    }

    public func registerBeacon(_ beacon: BeaconRecord) async throws(StoreError) {
        try beacon.validate()
        guard let owner = try await project(id: beacon.projectID) else { throw .unknownProject(beacon.projectID) }
        try await write { db in
            try Self.refuseDecommissioned(beacon.id, db)
            try db.execute(sql: """
                INSERT OR REPLACE INTO beacon (id, project_id, public, rotation_key, rotation_period, identity_key)
                VALUES (?, ?, ?, NULL, ?, ?)
                """,
                           arguments: [Data(beacon.id), owner.id, beacon.isPublic, beacon.rotation?.period,
                                       beacon.rotation.map { Data($0.key.bytes) }])
            try db.execute(sql: "DELETE FROM attachment WHERE beacon_id = ?", arguments: [Data(beacon.id)])
            for (position, attachment) in beacon.attachments.enumerated() {
                try Self.insert(attachment, beacon: beacon.id, position: position, db)
            }
            try db.execute(sql: "UPDATE registry_version SET version = version + 1")
        }
    }

    private static func insert(_ attachment: Message, beacon: [UInt8], position: Int, _ db: Database) throws {
        try db.execute(sql: "INSERT INTO attachment VALUES (?, ?, ?, ?, ?)",
                       arguments: [Data(beacon), position, attachment.namespace, attachment.type, Data(attachment.content)])
    }

    public func addAttachment(beacon: [UInt8], _ attachment: Message) async throws(StoreError) {
        try await write { db in
            try Self.liveBeacon(beacon, db)
            let position = try Int.fetchOne(db, sql: "SELECT COALESCE(MAX(position) + 1, 0) FROM attachment WHERE beacon_id = ?",
                                            arguments: [Data(beacon)]) ?? 0
            try Self.insert(attachment, beacon: beacon, position: position, db)
            try db.execute(sql: "UPDATE registry_version SET version = version + 1")
        }
    }

    public func beacons() async throws(StoreError) -> [BeaconRecord] {
        try await read { db in
            var attachments: [Data: [Message]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT beacon_id, namespace, type, data FROM attachment ORDER BY beacon_id, position") {
                let data: Data = row[3]
                if let message = try? BeaconAttachment.message(namespace: row[1], type: row[2], data: Array(data)) {
                    attachments[row[0], default: []].append(message)
                }
            }
            let sql = "SELECT id, project_id, public, identity_key, rotation_period, decommissioned FROM beacon ORDER BY id"
            return try Row.fetchAll(db, sql: sql).compactMap { row in
                let id: Data = row[0]
                let key: Data? = row[3]
                let decommissioned: Bool = row[5]
                if decommissioned { return BeaconRecord(decommissioned: Array(id), projectID: row[1]) }
                let rotation = BeaconRecord.storedRotation(key: key.map(Array.init), period: row[4])
                return BeaconRecord(id: Array(id), projectID: row[1], isPublic: row[2], rotation: rotation, attachments: attachments[id] ?? [])
            }
        }
    }

    public func registryVersion() async throws(StoreError) -> Int64 {
        try await read { db in try Int64.fetchOne(db, sql: "SELECT version FROM registry_version") ?? 0 }
    }

    /// Throws `unknownBeacon` unless `beacon` is registered and not decommissioned.
    private static func liveBeacon(_ beacon: [UInt8], _ db: Database) throws {
        guard let decommissioned = try Bool.fetchOne(db, sql: "SELECT decommissioned FROM beacon WHERE id = ?", arguments: [Data(beacon)]) else {
            throw StoreError.unknownBeacon(APIKeys.hex(beacon))
        }
        if decommissioned { throw StoreError.invalid(BeaconRecord.decommissionedMessage(beacon)) }
    }

    private static func refuseDecommissioned(_ beacon: [UInt8], _ db: Database) throws {
        if try Bool.fetchOne(db, sql: "SELECT decommissioned FROM beacon WHERE id = ?", arguments: [Data(beacon)]) == true {
            throw StoreError.invalid(BeaconRecord.decommissionedMessage(beacon))
        }
    }

    public func removeAttachment(beacon: [UInt8], at index: Int) async throws(StoreError) {
        try await write { db in
            try Self.liveBeacon(beacon, db)
            try db.execute(sql: """
                DELETE FROM attachment WHERE beacon_id = ? AND position =
                    (SELECT position FROM attachment WHERE beacon_id = ? ORDER BY position LIMIT 1 OFFSET ?)
                """, arguments: [Data(beacon), Data(beacon), index])
            if db.changesCount == 0 { throw StoreError.invalid("beacon \(APIKeys.hex(beacon)) has no attachment \(index)") }
            try db.execute(sql: "UPDATE registry_version SET version = version + 1")
        }
    }

    public func setBeaconPublic(_ beacon: [UInt8], _ isPublic: Bool) async throws(StoreError) {
        try await write { db in
            try Self.liveBeacon(beacon, db)
            try db.execute(sql: "UPDATE beacon SET public = ? WHERE id = ?", arguments: [isPublic, Data(beacon)])
            try db.execute(sql: "UPDATE registry_version SET version = version + 1")
        }
    }

    public func decommissionBeacon(_ beacon: [UInt8]) async throws(StoreError) {
        try await write { db in
            try Self.liveBeacon(beacon, db)
            try db.execute(sql: "DELETE FROM attachment WHERE beacon_id = ?", arguments: [Data(beacon)])
            try db.execute(sql: """
                UPDATE beacon SET decommissioned = 1, public = 0, identity_key = NULL, rotation_key = NULL, rotation_period = NULL
                WHERE id = ?
                """, arguments: [Data(beacon)])
            try db.execute(sql: "UPDATE registry_version SET version = version + 1")
        }
    }

    // MARK: Console operations (issue 34)

    public func renameProject(_ project: String, to name: String) async throws(StoreError) -> Project {
        try Project.checkName(name)
        guard let existing = try await self.project(id: project) else { throw .unknownProject(project) }
        try await write { db in
            if try Row.fetchOne(db, sql: "SELECT 1 FROM project WHERE name = ? AND id <> ?", arguments: [name, existing.id]) != nil {
                throw StoreError.duplicateProject(name)
            }
            try db.execute(sql: "UPDATE project SET name = ? WHERE id = ?", arguments: [name, existing.id])
        }
        return existing.renamed(name)
    }

    public func setProjectDisabled(_ project: String, _ disabled: Bool) async throws(StoreError) -> Project {
        guard var existing = try await self.project(id: project) else { throw .unknownProject(project) }
        let id = existing.id
        try await write { db in try db.execute(sql: "UPDATE project SET disabled = ? WHERE id = ?", arguments: [disabled, id]) }
        existing.disabled = disabled
        return existing
    }

    public func rotateKey(id: String, overlap: Double) async throws(StoreError) -> (APIKeyRecord, key: String) {
        let (old, record, key) = try await rotation(of: id, overlap: overlap)
        let (newID, hash) = (record.id, record.secretHash)
        let now = Date().timeIntervalSince1970
        try await write { db in
            try db.execute(sql: "INSERT INTO api_key (id, project_id, label, secret_hash, revoked, rate_per_second, burst, created, origins, max_sessions) VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
                           arguments: [newID, old.projectID, old.label, Data(hash), old.ratePerSecond, old.burst, now, WebOrigin.stored(old.origins),
                                       old.maxSessions])
            try db.execute(sql: "UPDATE api_key SET expires = MIN(COALESCE(expires, ?), ?) WHERE id = ?", arguments: [now + overlap, now + overlap, id])
        }
        return (record, key)
    }

    public func recordKeyUse(id: String) async throws(StoreError) {
        let now = Date().timeIntervalSince1970
        try await write { db in
            try db.execute(sql: "UPDATE api_key SET last_used = ? WHERE id = ? AND (last_used IS NULL OR last_used < ?)", arguments: [now, id, now - 60])
        }
    }

    // MARK: Operators and audit

    public func createOperator(name: String) async throws(StoreError) -> (OperatorRecord, secret: String) {
        try OperatorRecord.checkName(name)
        let (id, secret, hash) = OperatorCredentials.generate()
        try await write { db in
            if try Row.fetchOne(db, sql: "SELECT 1 FROM operator WHERE name = ?", arguments: [name]) != nil {
                throw StoreError.duplicateOperator(name)
            }
            try db.execute(sql: "INSERT INTO operator VALUES (?, ?, ?, 0, ?)",
                           arguments: [id, name, Data(hash), Date().timeIntervalSince1970])
        }
        return (OperatorRecord(id: id, name: name, secretHash: hash, revoked: false), secret)
    }

    public func operators() async throws(StoreError) -> [OperatorRecord] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT id, name, secret_hash, revoked FROM operator ORDER BY created, rowid").map(Self.operatorRecord)
        }
    }

    public func operatorRecord(id: String) async throws(StoreError) -> OperatorRecord? {
        try await read { db in
            try Row.fetchOne(db, sql: "SELECT id, name, secret_hash, revoked FROM operator WHERE id = ?", arguments: [id]).map(Self.operatorRecord)
        }
    }

    private static func operatorRecord(_ row: Row) -> OperatorRecord {
        let hash: Data = row[2]
        return OperatorRecord(id: row[0], name: row[1], secretHash: Array(hash), revoked: row[3] as Bool)
    }

    public func revokeOperator(_ nameOrID: String) async throws(StoreError) {
        try await write { db in
            try db.execute(sql: "UPDATE operator SET revoked = 1 WHERE id = ? OR name = ?", arguments: [nameOrID, nameOrID])
            if db.changesCount == 0 { throw StoreError.unknownOperator(nameOrID) }
        }
    }

    public func appendAudit(_ entry: AuditEntry) async throws(StoreError) {
        try await write { db in
            try db.execute(sql: "INSERT INTO audit (time, actor, action, target, outcome) VALUES (?, ?, ?, ?, ?)",
                           arguments: [entry.time, entry.actor, entry.action, entry.target, entry.outcome])
        }
    }

    public func auditEntries(limit: Int) async throws(StoreError) -> [AuditEntry] {
        let limit = max(0, min(limit, 10_000))
        return try await read { db in
            try Row.fetchAll(db, sql: "SELECT time, actor, action, target, outcome FROM audit ORDER BY serial DESC LIMIT ?", arguments: [limit])
                .map { AuditEntry(time: $0[0], actor: $0[1], action: $0[2], target: $0[3], outcome: $0[4]) }
        }
    }
}
