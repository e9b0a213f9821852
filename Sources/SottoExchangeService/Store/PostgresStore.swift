import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import SottoExchangeCore
import SottoExchangeWire
import Synchronization

/// The store of several `sotto serve` nodes sharing one PostgreSQL database, through postgres-nio's
/// connection pool. Same semantics, errors and orderings as ``SQLiteStore``.
///
/// The store runs its pool in a task of its own from `init` until ``shutdown()`` (or until it is released).
/// Every call is bounded by the store's timeout: when the database cannot be reached it answers
/// `StoreError.unavailable` with the reason instead of waiting for it. The schema is brought up to date
/// by `init`, under an advisory lock, so nodes starting together apply each migration once.
public final class PostgresStore: ExchangeStore {
    /// The connection pool, shared with other components that keep their state in the same database.
    public let client: PostgresClient
    /// Where the database is, for messages: `HOST:PORT` or `unix:PATH` (never the password).
    public let endpoint: String
    /// The longest a call waits for a connection and its answer.
    public let timeout: Duration
    private let runTask: Task<Void, Never>
    let location: Location
    private let isShutDown = Atomic<Bool>(false)
    private static let silent = Logger(label: "sotto.store.postgres", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Connects to the database at `url` and brings its schema up to date.
    ///
    /// - Parameters:
    ///   - url: `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (also `postgresql://`) or, over a Unix socket,
    ///     `postgres://USER@/DATABASE?host=/socket/directory`. Query items: `sslmode` (`require`, also
    ///     `verify-full`, or `verify-ca`: TLS, certificates verified against the system's roots or `sslrootcert`;
    ///     `disable`, the default, only on loopback and Unix sockets: any other host needs TLS), `sslrootcert`,
    ///     `connect_timeout` (seconds, overrides `timeout`), `application_name`, and libpq's `host`, `port`,
    ///     `user`, `password`, `dbname`.
    ///   - timeout: the longest a call waits (for a connection and its answer) before answering `unavailable`.
    ///   - backgroundLogger: where the pool logs connection failures and the like (default: nowhere).
    /// - Throws: `StoreError.invalid` for a malformed URL or plaintext beyond loopback; `StoreError.unavailable`
    ///   when the database cannot be reached or its schema is newer than this build.
    public init(url: String, timeout: Duration = .seconds(10), backgroundLogger: Logger? = nil) async throws(StoreError) {
        let location = try Location(parsing: url, defaultTimeout: timeout)
        // Refused, no such host or no socket: said at once with its cause, not after the pool's time-out.
        let outcome = await EndpointProbe.probe(location.probeAddress, greeting: .none,
                                                connectTimeout: Double(location.timeout.components.seconds), answerTimeout: 0)
        switch outcome {
        case .reachable: break
        case .refused: throw .unavailable("cannot reach PostgreSQL at \(location.endpointDescription): connection refused")
        default: throw .unavailable("cannot reach PostgreSQL at \(location.endpointDescription): \(outcome)")
        }
        self.location = location
        endpoint = location.endpointDescription
        self.timeout = location.timeout
        let configuration = location.clientConfiguration()
        let client = backgroundLogger.map { PostgresClient(configuration: configuration, backgroundLogger: $0) }
            ?? PostgresClient(configuration: configuration)
        self.client = client
        // Detached: a graceful shutdown of a ServiceGroup that happens to be around (PostgresClient.run()
        // watches for one) must not close the pool under the service that still drains its sessions.
        runTask = Task.detached { await client.run() }
        do { try await migrate() } catch {
            await shutdown()
            throw error
        }
    }

    deinit { runTask.cancel() }

    /// Closes the pool and its connections; later calls answer `StoreError.unavailable`.
    public func shutdown() async {
        isShutDown.store(true, ordering: .relaxed)
        runTask.cancel()
        await runTask.value
    }

    // MARK: Schema

    /// The migrations, in order: the schema version after migration `i` is `i + 1`. Append, never edit.
    /// (One statement each: the extended query protocol runs one statement per query.)
    static let migrations: [[String]] = [
        [
            """
            CREATE TABLE project (
                id text PRIMARY KEY, name text NOT NULL UNIQUE, max_sessions bigint NOT NULL, created double precision NOT NULL)
            """,
            """
            CREATE TABLE api_key (
                id text PRIMARY KEY, project_id text NOT NULL REFERENCES project(id), label text NOT NULL,
                secret_hash bytea NOT NULL, revoked boolean NOT NULL DEFAULT false,
                rate_per_second double precision NOT NULL, burst double precision NOT NULL, created double precision NOT NULL,
                serial bigint GENERATED ALWAYS AS IDENTITY)
            """,
            "CREATE INDEX api_key_by_project ON api_key (project_id)",
            """
            CREATE TABLE beacon (
                id bytea PRIMARY KEY, project_id text NOT NULL REFERENCES project(id), public boolean NOT NULL,
                rotation_key bigint, rotation_period double precision)
            """,
            """
            CREATE TABLE attachment (
                beacon_id bytea NOT NULL REFERENCES beacon(id) ON DELETE CASCADE, position bigint NOT NULL,
                namespace text NOT NULL, type text NOT NULL, data bytea NOT NULL, PRIMARY KEY (beacon_id, position))
            """,
            "CREATE TABLE registry_version (id integer PRIMARY KEY CHECK (id = 1), version bigint NOT NULL)",
            "INSERT INTO registry_version VALUES (1, 0)",
        ] + PostgresLog.tables,  // the replication log's tables, defined by the log (written and read by it alone)
        // Rotating beacons' identity keys (16 to 32 bytes); rotation_key (SplitMix64's) is no longer read.
        ["ALTER TABLE beacon ADD COLUMN identity_key bytea"],
        // Web origins a key is bound to, separated by spaces (none: '').
        ["ALTER TABLE api_key ADD COLUMN origins text NOT NULL DEFAULT ''"],
        // Operators (admin API credentials, hashed) and the audit log of admin operations (issue 34).
        [
            """
            CREATE TABLE operator (
                id text PRIMARY KEY, name text NOT NULL UNIQUE, secret_hash bytea NOT NULL, revoked boolean NOT NULL DEFAULT false,
                created double precision NOT NULL, serial bigint GENERATED ALWAYS AS IDENTITY)
            """,
            """
            CREATE TABLE audit (
                serial bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, time double precision NOT NULL, actor text NOT NULL,
                action text NOT NULL, target text NOT NULL, outcome text NOT NULL)
            """,
        ],
        // Disabled projects; rotated keys' end of overlap; keys' last use (issue 34).
        [
            "ALTER TABLE project ADD COLUMN disabled boolean NOT NULL DEFAULT false",
            "ALTER TABLE api_key ADD COLUMN expires double precision",
            "ALTER TABLE api_key ADD COLUMN last_used double precision",
        ],
        // Decommissioned beacons: kept (attachments and key gone) so that their IDs are never registered again; keys'
        // own session quotas (NULL: the project's only) (issue 34).
        ["ALTER TABLE beacon ADD COLUMN decommissioned boolean NOT NULL DEFAULT false", "ALTER TABLE api_key ADD COLUMN max_sessions bigint"],
        // Each node's live counters, shared so that every node's console shows the whole service's rates (issue 34).
        ["CREATE TABLE live_counters (node text PRIMARY KEY, updated double precision NOT NULL, counters bytea NOT NULL)"],
    ]

    /// The key of the transaction-level advisory lock that serialises migrations ("sotto" in ASCII).
    static let migrationLock: Int64 = 0x736F_7474_6F

    /// Applies the migrations the database lacks, in one transaction under the advisory lock.
    private func migrate() async throws(StoreError) {
        let known = Self.migrations.count
        try await transaction { connection in
            try await Self.run("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", on: connection)
            try await Self.run("""
                CREATE TABLE IF NOT EXISTS schema_version (
                    version integer PRIMARY KEY, applied double precision NOT NULL DEFAULT extract(epoch from clock_timestamp()))
                """, on: connection)
            let current = try await Self.one(Int.self, "SELECT COALESCE(MAX(version), 0)::bigint FROM schema_version", on: connection) ?? 0
            guard current <= known else {
                throw StoreError.unavailable("the database's schema is version \(current) but this sotto knows up to \(known): upgrade sotto")
            }
            for version in stride(from: current + 1, through: known, by: 1) {
                for statement in Self.migrations[version - 1] {
                    try await Self.run(PostgresQuery(unsafeSQL: statement), on: connection)
                }
                try await Self.run("INSERT INTO schema_version (version) VALUES (\(Int32(version)))", on: connection)
            }
        }
    }

    // MARK: ExchangeStore

    public func createProject(name: String, maxSessions: Int) async throws(StoreError) -> Project {
        try Project.checkName(name)
        guard maxSessions > 0 else { throw .invalid("the session quota must be positive") }
        let project = Project(id: "p_" + APIKeys.hex((0..<6).map { _ in UInt8.random(in: 0...255) }), name: name, maxSessions: maxSessions)
        let inserted = try await withConnection { connection in
            try await Self.one(String.self, """
                INSERT INTO project (id, name, max_sessions, created)
                VALUES (\(project.id), \(name), \(maxSessions), extract(epoch from clock_timestamp()))
                ON CONFLICT (name) DO NOTHING RETURNING id
                """, on: connection)
        }
        guard inserted != nil else { throw .duplicateProject(name) }
        return project
    }

    public func projects() async throws(StoreError) -> [Project] {
        try await withConnection { connection in
            // COLLATE "C": byte order, as SQLite's BINARY collation sorts.
            try await Self.all((String, String, Int, Bool).self, "SELECT id, name, max_sessions, disabled FROM project ORDER BY name COLLATE \"C\"",
                               on: connection).map(Self.project)
        }
    }

    public func project(id: String) async throws(StoreError) -> Project? {
        try await withConnection { connection in
            try await Self.all((String, String, Int, Bool).self, """
                SELECT id, name, max_sessions, disabled FROM project WHERE id = \(id) OR name = \(id) ORDER BY id = \(id) DESC LIMIT 1
                """, on: connection).first.map(Self.project)
        }
    }

    public func createKey(project: String, label: String, ratePerSecond: Double, burst: Double, origins: [String]) async throws(StoreError)
        -> (APIKeyRecord, key: String) {
        let (record, key) = try await newKey(project: project, label: label, ratePerSecond: ratePerSecond, burst: burst, origins: origins)
        let (id, hash, projectID) = (record.id, record.secretHash, record.projectID)
        let stored = WebOrigin.stored(record.origins)
        try await withConnection { connection in
            try await Self.run("""
                INSERT INTO api_key (id, project_id, label, secret_hash, rate_per_second, burst, created, origins)
                VALUES (\(id), \(projectID), \(label), \(ByteBuffer(bytes: hash)), \(ratePerSecond), \(burst),
                        extract(epoch from clock_timestamp()), \(stored))
                """, on: connection)
        }
        return (record, key)
    }

    public func keys(project: String?) async throws(StoreError) -> [APIKeyRecord] {
        let ownerID = try await projectID(of: project)
        return try await withConnection { connection in
            let query: PostgresQuery = if let ownerID {
                "SELECT \(unescaped: Self.keyColumns) FROM api_key WHERE project_id = \(ownerID) ORDER BY created, serial"
            } else {
                "SELECT \(unescaped: Self.keyColumns) FROM api_key ORDER BY created, serial"
            }
            return try await Self.all(KeyRow.self, query, on: connection).map(Self.key)
        }
    }

    public func key(id: String) async throws(StoreError) -> APIKeyRecord? {
        try await withConnection { connection in
            try await Self.all(KeyRow.self, "SELECT \(unescaped: Self.keyColumns) FROM api_key WHERE id = \(id)", on: connection)
                .first.map(Self.key)
        }
    }

    private static func project(_ row: (String, String, Int, Bool)) -> Project {
        var project = Project(id: row.0, name: row.1, maxSessions: row.2)
        project.disabled = row.3
        return project
    }

    private typealias KeyRow = (String, String, String, ByteBuffer, Bool, Double, Double, String, Double?, Double?, Int?)
    private static let keyColumns = "id, project_id, label, secret_hash, revoked, rate_per_second, burst, origins, expires, last_used, max_sessions"

    private static func key(_ row: KeyRow) -> APIKeyRecord {
        var record = APIKeyRecord(id: row.0, projectID: row.1, label: row.2, secretHash: Array(row.3.readableBytesView), revoked: row.4,
                                  ratePerSecond: row.5, burst: row.6, origins: WebOrigin.parseStored(row.7), expires: row.8, lastUsed: row.9)
        record.maxSessions = row.10
        return record
    }

    public func setKeySessionQuota(id: String, maxSessions: Int?) async throws(StoreError) {
        try APIKeyRecord.checkQuota(maxSessions)
        let updated = try await withConnection { connection in
            try await Self.one(String.self, "UPDATE api_key SET max_sessions = \(maxSessions) WHERE id = \(id) RETURNING id", on: connection)
        }
        if updated == nil { throw .unknownKey(id) }
    }

    public func revokeKey(id: String) async throws(StoreError) {
        let revoked = try await withConnection { connection in
            try await Self.one(String.self, "UPDATE api_key SET revoked = true WHERE id = \(id) RETURNING id", on: connection)
        }
        if revoked == nil { throw .unknownKey(id) }
    }

    public func registerBeacon(_ beacon: BeaconRecord) async throws(StoreError) {
        try beacon.validate()
        guard let owner = try await project(id: beacon.projectID) else { throw .unknownProject(beacon.projectID) }
        let id = ByteBuffer(bytes: beacon.id)
        let identityKey = beacon.rotation.map { ByteBuffer(bytes: $0.key.bytes) }
        let rotationPeriod = beacon.rotation?.period
        let attachments = beacon.attachments
        try await transaction { connection in
            if try await Self.one(Bool.self, "SELECT decommissioned FROM beacon WHERE id = \(id) FOR UPDATE", on: connection) == true {
                throw StoreError.invalid(BeaconRecord.decommissionedMessage(beacon.id))
            }
            try await Self.run("""
                INSERT INTO beacon (id, project_id, public, rotation_key, rotation_period, identity_key)
                VALUES (\(id), \(owner.id), \(beacon.isPublic), NULL, \(rotationPeriod), \(identityKey))
                ON CONFLICT (id) DO UPDATE SET project_id = excluded.project_id, public = excluded.public,
                    rotation_key = NULL, rotation_period = excluded.rotation_period, identity_key = excluded.identity_key
                """, on: connection)
            try await Self.run("DELETE FROM attachment WHERE beacon_id = \(id)", on: connection)
            for (position, attachment) in attachments.enumerated() {
                try await Self.insert(attachment, beacon: id, position: position, on: connection)
            }
            try await Self.run("UPDATE registry_version SET version = version + 1", on: connection)
        }
    }

    private static func insert(_ attachment: Message, beacon: ByteBuffer, position: Int, on connection: PostgresConnection) async throws {
        try await run("""
            INSERT INTO attachment (beacon_id, position, namespace, type, data)
            VALUES (\(beacon), \(position), \(attachment.namespace), \(attachment.type), \(ByteBuffer(bytes: attachment.content)))
            """, on: connection)
    }

    public func addAttachment(beacon: [UInt8], _ attachment: Message) async throws(StoreError) {
        let id = ByteBuffer(bytes: beacon)
        try await transaction { connection in
            // The beacon's row lock serialises concurrent additions, so each gets its own position.
            try await Self.liveBeacon(id, beacon, on: connection)
            let position = try await Self.one(Int.self, "SELECT COALESCE(MAX(position) + 1, 0) FROM attachment WHERE beacon_id = \(id)",
                                              on: connection) ?? 0
            try await Self.insert(attachment, beacon: id, position: position, on: connection)
            try await Self.run("UPDATE registry_version SET version = version + 1", on: connection)
        }
    }

    public func beacons() async throws(StoreError) -> [BeaconRecord] {
        // One statement, so one snapshot of beacons and attachments (as SQLite's read transaction).
        let rows = try await withConnection { connection in
            try await Self.all((ByteBuffer, String, Bool, ByteBuffer?, Double?, String?, String?, ByteBuffer?, Bool).self, """
                SELECT b.id, b.project_id, b.public, b.identity_key, b.rotation_period, a.namespace, a.type, a.data, b.decommissioned
                FROM beacon b LEFT JOIN attachment a ON a.beacon_id = b.id ORDER BY b.id, a.position
                """, on: connection)
        }
        var beacons: [BeaconRecord] = []
        for (id, projectID, isPublic, identityKey, rotationPeriod, namespace, type, data, decommissioned) in rows {
            let bytes = Array(id.readableBytesView)
            if decommissioned {
                beacons.append(BeaconRecord(decommissioned: bytes, projectID: projectID))
                continue
            }
            if beacons.last?.id != bytes {
                let rotation = BeaconRecord.storedRotation(key: identityKey.map { Array($0.readableBytesView) }, period: rotationPeriod)
                beacons.append(BeaconRecord(id: bytes, projectID: projectID, isPublic: isPublic, rotation: rotation))
            }
            // As SQLite's store: an attachment that is no longer valid is left out, not an error.
            if let namespace, let type, let data,
               let message = try? BeaconAttachment.message(namespace: namespace, type: type, data: Array(data.readableBytesView)) {
                beacons[beacons.count - 1].attachments.append(message)
            }
        }
        return beacons
    }

    public func registryVersion() async throws(StoreError) -> Int64 {
        try await withConnection { connection in
            try await Self.one(Int64.self, "SELECT version FROM registry_version", on: connection) ?? 0
        }
    }

    /// Locks the beacon's row; throws `unknownBeacon` unless it is registered and not decommissioned.
    private static func liveBeacon(_ id: ByteBuffer, _ beacon: [UInt8], on connection: PostgresConnection) async throws {
        guard let decommissioned = try await one(Bool.self, "SELECT decommissioned FROM beacon WHERE id = \(id) FOR UPDATE", on: connection) else {
            throw StoreError.unknownBeacon(APIKeys.hex(beacon))
        }
        if decommissioned { throw StoreError.invalid(BeaconRecord.decommissionedMessage(beacon)) }
    }

    public func removeAttachment(beacon: [UInt8], at index: Int) async throws(StoreError) {
        let id = ByteBuffer(bytes: beacon)
        try await transaction { connection in
            try await Self.liveBeacon(id, beacon, on: connection)
            guard let position = try await Self.one(Int.self, """
                SELECT position FROM attachment WHERE beacon_id = \(id) ORDER BY position LIMIT 1 OFFSET \(index)
                """, on: connection) else {
                throw StoreError.invalid("beacon \(APIKeys.hex(beacon)) has no attachment \(index)")
            }
            try await Self.run("DELETE FROM attachment WHERE beacon_id = \(id) AND position = \(position)", on: connection)
            try await Self.run("UPDATE registry_version SET version = version + 1", on: connection)
        }
    }

    public func setBeaconPublic(_ beacon: [UInt8], _ isPublic: Bool) async throws(StoreError) {
        let id = ByteBuffer(bytes: beacon)
        try await transaction { connection in
            try await Self.liveBeacon(id, beacon, on: connection)
            try await Self.run("UPDATE beacon SET public = \(isPublic) WHERE id = \(id)", on: connection)
            try await Self.run("UPDATE registry_version SET version = version + 1", on: connection)
        }
    }

    public func decommissionBeacon(_ beacon: [UInt8]) async throws(StoreError) {
        let id = ByteBuffer(bytes: beacon)
        try await transaction { connection in
            try await Self.liveBeacon(id, beacon, on: connection)
            try await Self.run("DELETE FROM attachment WHERE beacon_id = \(id)", on: connection)
            try await Self.run("""
                UPDATE beacon SET decommissioned = true, public = false, identity_key = NULL, rotation_key = NULL, rotation_period = NULL
                WHERE id = \(id)
                """, on: connection)
            try await Self.run("UPDATE registry_version SET version = version + 1", on: connection)
        }
    }

    // MARK: Console operations (issue 34)

    public func renameProject(_ project: String, to name: String) async throws(StoreError) -> Project {
        try Project.checkName(name)
        guard let existing = try await self.project(id: project) else { throw .unknownProject(project) }
        let id = existing.id
        let renamed = try await withConnection { connection in
            try await Self.one(String.self, """
                UPDATE project SET name = \(name) WHERE id = \(id)
                AND NOT EXISTS (SELECT 1 FROM project WHERE name = \(name) AND id <> \(id)) RETURNING id
                """, on: connection)
        }
        guard renamed != nil else {
            // The name is another project's (the unique index refuses a race between two renames the same way).
            throw .duplicateProject(name)
        }
        return existing.renamed(name)
    }

    public func setProjectDisabled(_ project: String, _ disabled: Bool) async throws(StoreError) -> Project {
        guard var existing = try await self.project(id: project) else { throw .unknownProject(project) }
        let id = existing.id
        try await withConnection { connection in
            try await Self.run("UPDATE project SET disabled = \(disabled) WHERE id = \(id)", on: connection)
        }
        existing.disabled = disabled
        return existing
    }

    public func rotateKey(id: String, overlap: Double) async throws(StoreError) -> (APIKeyRecord, key: String) {
        let (old, record, key) = try await rotation(of: id, overlap: overlap)
        let (newID, hash) = (record.id, record.secretHash)
        let stored = WebOrigin.stored(old.origins)
        try await transaction { connection in
            try await Self.run("""
                INSERT INTO api_key (id, project_id, label, secret_hash, rate_per_second, burst, created, origins, max_sessions)
                VALUES (\(newID), \(old.projectID), \(old.label), \(ByteBuffer(bytes: hash)), \(old.ratePerSecond), \(old.burst),
                        extract(epoch from clock_timestamp()), \(stored), \(old.maxSessions))
                """, on: connection)
            try await Self.run("""
                UPDATE api_key SET expires = LEAST(COALESCE(expires, 'Infinity'), extract(epoch from clock_timestamp()) + \(overlap))
                WHERE id = \(id)
                """, on: connection)
        }
        return (record, key)
    }

    public func recordKeyUse(id: String) async throws(StoreError) {
        try await withConnection { connection in
            try await Self.run("""
                UPDATE api_key SET last_used = extract(epoch from clock_timestamp())
                WHERE id = \(id) AND (last_used IS NULL OR last_used < extract(epoch from clock_timestamp()) - 60)
                """, on: connection)
        }
    }

    // MARK: Operators and audit

    public func createOperator(name: String) async throws(StoreError) -> (OperatorRecord, secret: String) {
        try OperatorRecord.checkName(name)
        let (id, secret, hash) = OperatorCredentials.generate()
        let inserted = try await withConnection { connection in
            try await Self.one(String.self, """
                INSERT INTO operator (id, name, secret_hash, created)
                VALUES (\(id), \(name), \(ByteBuffer(bytes: hash)), extract(epoch from clock_timestamp()))
                ON CONFLICT (name) DO NOTHING RETURNING id
                """, on: connection)
        }
        guard inserted != nil else { throw .duplicateOperator(name) }
        return (OperatorRecord(id: id, name: name, secretHash: hash, revoked: false), secret)
    }

    public func operators() async throws(StoreError) -> [OperatorRecord] {
        try await withConnection { connection in
            try await Self.all((String, String, ByteBuffer, Bool).self,
                               "SELECT id, name, secret_hash, revoked FROM operator ORDER BY created, serial", on: connection)
                .map(Self.operatorRecord)
        }
    }

    public func operatorRecord(id: String) async throws(StoreError) -> OperatorRecord? {
        try await withConnection { connection in
            try await Self.all((String, String, ByteBuffer, Bool).self,
                               "SELECT id, name, secret_hash, revoked FROM operator WHERE id = \(id)", on: connection)
                .first.map(Self.operatorRecord)
        }
    }

    private static func operatorRecord(_ row: (String, String, ByteBuffer, Bool)) -> OperatorRecord {
        OperatorRecord(id: row.0, name: row.1, secretHash: Array(row.2.readableBytesView), revoked: row.3)
    }

    public func revokeOperator(_ nameOrID: String) async throws(StoreError) {
        let revoked = try await withConnection { connection in
            try await Self.one(String.self, "UPDATE operator SET revoked = true WHERE id = \(nameOrID) OR name = \(nameOrID) RETURNING id",
                               on: connection)
        }
        if revoked == nil { throw .unknownOperator(nameOrID) }
    }

    public func appendAudit(_ entry: AuditEntry) async throws(StoreError) {
        try await withConnection { connection in
            try await Self.run("""
                INSERT INTO audit (time, actor, action, target, outcome)
                VALUES (\(entry.time), \(entry.actor), \(entry.action), \(entry.target), \(entry.outcome))
                """, on: connection)
        }
    }

    public func auditEntries(limit: Int) async throws(StoreError) -> [AuditEntry] {
        let limit = max(0, min(limit, 10_000))
        return try await withConnection { connection in
            try await Self.all((Double, String, String, String, String).self,
                               "SELECT time, actor, action, target, outcome FROM audit ORDER BY serial DESC LIMIT \(limit)", on: connection)
                .map { AuditEntry(time: $0.0, actor: $0.1, action: $0.2, target: $0.3, outcome: $0.4) }
        }
    }

    // MARK: Live counters

    /// Rows of nodes quiet for this long (s) are deleted by the next node that shares its own.
    static let liveCountersExpiry = 60.0

    public func shareLiveCounters(node: String, counters: [String: ProjectCounters], time: Double) async throws(StoreError) {
        let blob = ByteBuffer(bytes: ProjectCounters.sharedBlob(counters))
        try await withConnection { connection in
            try await Self.run("""
                INSERT INTO live_counters (node, updated, counters) VALUES (\(node), \(time), \(blob))
                ON CONFLICT (node) DO UPDATE SET updated = EXCLUDED.updated, counters = EXCLUDED.counters
                """, on: connection)
            try await Self.run("DELETE FROM live_counters WHERE updated < \(time - Self.liveCountersExpiry)", on: connection)
        }
    }

    public func sharedLiveCounters(since: Double) async throws(StoreError) -> [String: [String: ProjectCounters]] {
        let rows = try await withConnection { connection in
            try await Self.all((String, ByteBuffer).self, "SELECT node, counters FROM live_counters WHERE updated >= \(since)", on: connection)
        }
        var nodes: [String: [String: ProjectCounters]] = [:]
        for (node, blob) in rows { nodes[node] = try ProjectCounters.counters(sharedBlob: Array(blob.readableBytesView)) }
        return nodes
    }

    // MARK: Queries

    /// Runs a statement and drains its rows.
    private static func run(_ query: PostgresQuery, on connection: PostgresConnection) async throws {
        for try await _ in try await connection.query(query, logger: silent) {}
    }

    /// The first column of the first row, if any.
    private static func one<Value: PostgresDecodable & Sendable>(_ type: Value.Type, _ query: PostgresQuery,
                                                      on connection: PostgresConnection) async throws -> Value? {
        var first: Value?
        for try await value in try await connection.query(query, logger: silent).decode(Value.self) where first == nil {
            first = value
        }
        return first
    }

    /// Every row, decoded as `columns`.
    private static func all<each Column: PostgresDecodable & Sendable>(_ columns: (repeat each Column).Type, _ query: PostgresQuery,
                                                           on connection: PostgresConnection) async throws -> [(repeat each Column)] {
        var rows: [(repeat each Column)] = []
        for try await row in try await connection.query(query, logger: silent).decode(columns) { rows.append(row) }
        return rows
    }

    /// `operation` on a pooled connection, within the store's timeout.
    private func withConnection<Value: Sendable>(
        _ operation: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws(StoreError) -> Value {
        guard !isShutDown.load(ordering: .relaxed) else { throw .unavailable("the PostgreSQL store at \(endpoint) is shut down") }
        let client = self.client
        let outcome = await Deadline.race(timeout) {
            try await client.withConnection { connection in try await operation(connection) }
        }
        switch outcome {
        case .finished(.success(let value)): return value
        case .finished(.failure(let error)): throw await storeError(error)
        case .timedOut: throw await timeoutError()
        }
    }

    /// `operation` in a transaction (rolled back when it throws), within the store's timeout.
    private func transaction<Value: Sendable>(
        _ operation: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws(StoreError) -> Value {
        try await withConnection { connection in
            try await Self.run("BEGIN", on: connection)
            let value: Value
            do { value = try await operation(connection) } catch {
                // A failed rollback leaves a broken connection, which the pool drops; the first error is the one to tell.
                try? await Self.run("ROLLBACK", on: connection)
                throw error
            }
            try await Self.run("COMMIT", on: connection)
            return value
        }
    }

    // MARK: Errors

    /// What a failed call tells its caller: the store's own errors as they are, the server's message, or why
    /// the database cannot be reached.
    private func storeError(_ error: any Error) async -> StoreError {
        if let error = error as? StoreError { return error }
        if isShutDown.load(ordering: .relaxed) { return .unavailable("the PostgreSQL store at \(endpoint) is shut down") }
        if error is CancellationError { return .unavailable("cancelled while waiting for PostgreSQL at \(endpoint)") }
        if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
            let state = error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
            return .unavailable("PostgreSQL at \(endpoint): \(message)\(state)")
        }
        if let reason = await probe() { return .unavailable(reason) }
        return .unavailable("PostgreSQL at \(endpoint): \(Self.describe(error))")
    }

    private func timeoutError() async -> StoreError {
        if isShutDown.load(ordering: .relaxed) { return .unavailable("the PostgreSQL store at \(endpoint) is shut down") }
        if let reason = await probe() { return .unavailable(reason) }
        return .unavailable("no answer from PostgreSQL at \(endpoint) within \(Self.seconds(timeout)) s (it accepts connections: "
                            + "the pool is busy, or still waiting to retry after an outage)")
    }

    /// Why a fresh connection to the database fails, or nil when one succeeds.
    private func probe() async -> String? {
        let configuration: PostgresConnection.Configuration
        do { configuration = try location.connectionConfiguration(connectTimeout: min(timeout, .seconds(3))) } catch {
            return "TLS configuration for PostgreSQL at \(endpoint): \(error)"
        }
        let endpoint = self.endpoint
        let outcome = await Deadline.race(.seconds(4)) {
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: Self.silent)
            try? await connection.close()
        }
        switch outcome {
        case .finished(.success): return nil
        case .timedOut: return "cannot reach PostgreSQL at \(endpoint): no answer within 4 s"
        case .finished(.failure(let error)):
            if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
                return "PostgreSQL at \(endpoint) refused the connection: \(message)"
            }
            return "cannot reach PostgreSQL at \(endpoint): \(Self.describe(error))"
        }
    }

    /// A short reason for a connection-level error (PSQLError's description hides everything on purpose).
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as PSQLError:
            if let message = error.serverInfo?[.message] { return message }
            if error.code == .sslUnsupported { return "the server does not accept TLS (sslmode=require)" }
            if let underlying = error.underlying { return describe(underlying) }
            return error.code.description
        case let error as NIOConnectionError:
            if let failure = error.connectionErrors.first { return describe(failure.error) }
            if let dns = error.dnsAError ?? error.dnsAAAAError { return "cannot resolve \(error.host): \(dns)" }
            return "no address for \(error.host)"
        case let error as IOError:
            return String(cString: strerror(error.errnoCode)).lowercased()
        case ChannelError.connectTimeout(let amount):
            return "no answer within \(Double(amount.nanoseconds) / 1e9) s"
        case let error as NIOSSLError:
            return "TLS: \(error)"
        case let error as BoringSSLError:
            return "TLS: \(error)"
        default:
            return String(describing: error)
        }
    }

    static func seconds(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return value == value.rounded() ? String(Int(value)) : String(value)
    }
}


// MARK: - Location

extension PostgresStore {
    /// A parsed store URL: where the server is, who connects, and with what security.
    struct Location: Sendable {
        enum Endpoint: Sendable, Equatable {
            case tcp(host: String, port: Int)
            case unix(path: String)
        }

        let endpoint: Endpoint
        let username: String
        let password: String?
        let database: String?
        /// nil: plaintext (loopback and Unix sockets only).
        let tls: TLSConfiguration?
        let timeout: Duration
        let applicationName: String?

        /// The endpoint as an address to probe.
        var probeAddress: MatcherAddress {
            switch endpoint {
            case .tcp(let host, let port): return .tcp(host: host, port: port)
            case .unix(let path): return .unix(path: path)
            }
        }

        var endpointDescription: String {
            switch endpoint {
            case .tcp(let host, let port): return MatcherAddress.tcp(host: host, port: port).description
            case .unix(let path): return "unix:\(path)"
            }
        }

        private static let queryItems: Set<String> = [
            "host", "port", "user", "password", "dbname", "sslmode", "sslrootcert", "connect_timeout", "application_name",
        ]

        init(parsing url: String, defaultTimeout: Duration) throws(StoreError) {
            let shape = "a PostgreSQL store is postgres://USER:PASSWORD@HOST:PORT/DATABASE or postgres://USER@/DATABASE?host=/socket/dir"
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
                  scheme == "postgres" || scheme == "postgresql" else { throw .invalid(shape) }
            var items: [String: String] = [:]
            for item in components.queryItems ?? [] {
                guard Self.queryItems.contains(item.name) else {
                    throw .invalid("unknown query item '\(item.name)' in the PostgreSQL URL (known: \(Self.queryItems.sorted().joined(separator: ", ")))")
                }
                items[item.name] = item.value ?? ""
            }
            // libpq: a query item overrides the URL's part.
            var host = items["host"] ?? components.host ?? ""
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            var port = components.port ?? 5432
            if let text = items["port"] {
                guard let value = Int(text) else { throw .invalid("the PostgreSQL port '\(text)' is not a number") }
                port = value
            }
            guard (1...65535).contains(port) else { throw .invalid("the PostgreSQL port \(port) is not 1 to 65535") }
            let user = items["user"] ?? components.user.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.userName
            guard !user.isEmpty else { throw .invalid("the PostgreSQL URL needs a user (postgres://USER@...)") }
            username = user
            password = items["password"] ?? components.password
            let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
            let name = items["dbname"] ?? path
            guard !name.contains("/") else { throw .invalid("'\(name)' is not a database name") }
            database = name.isEmpty ? nil : name
            applicationName = items["application_name"]
            if let text = items["connect_timeout"] {
                guard let seconds = Int(text), seconds > 0 else { throw .invalid("connect_timeout is a positive number of seconds") }
                timeout = .seconds(seconds)
            } else {
                timeout = defaultTimeout
            }

            if host.isEmpty {
                throw .invalid("the PostgreSQL URL has no host: give HOST:PORT, or ?host=/socket/dir for a Unix socket")
            }
            if host.hasPrefix("/") {
                // libpq's convention: a directory, in which the server's socket is named after the port.
                endpoint = .unix(path: (host.hasSuffix("/") ? host : host + "/") + ".s.PGSQL.\(port)")
            } else {
                endpoint = .tcp(host: host, port: port)
            }

            let local = MatcherAddress.tcp(host: host, port: port).isLocal || host.hasPrefix("/")
            switch items["sslmode"] ?? "disable" {
            case "disable":
                guard local else {
                    throw .invalid("\(host):\(port) is reachable from other machines: add ?sslmode=require (plaintext only on loopback or a Unix socket)")
                }
                tls = nil
            case "require", "verify-full", "verify-ca":
                if host.hasPrefix("/") {
                    tls = nil  // As libpq: no TLS over a Unix socket.
                } else {
                    var configuration = TLSConfiguration.makeClientConfiguration()
                    if items["sslmode"] == "verify-ca" { configuration.certificateVerification = .noHostnameVerification }
                    if let file = items["sslrootcert"] {
                        guard FileManager.default.isReadableFile(atPath: file) else { throw .invalid("cannot read sslrootcert \(file)") }
                        configuration.trustRoots = .file(file)
                    }
                    tls = configuration
                }
            case let mode:
                throw .invalid("sslmode=\(mode) is not supported: use sslmode=require (TLS, certificate verified) or disable (loopback only)")
            }
        }

        func clientConfiguration() -> PostgresClient.Configuration {
            var configuration: PostgresClient.Configuration
            switch endpoint {
            case .tcp(let host, let port):
                configuration = .init(host: host, port: port, username: username, password: password, database: database,
                                      tls: tls.map { .require($0) } ?? .disable)
            case .unix(let path):
                configuration = .init(unixSocketPath: path, username: username, password: password, database: database)
            }
            configuration.options.connectTimeout = timeout
            if let applicationName { configuration.options.additionalStartupParameters = [("application_name", applicationName)] }
            return configuration
        }

        /// The same server for a single connection (the pool's configuration takes a TLSConfiguration, a
        /// connection's an NIOSSLContext).
        func connectionConfiguration(connectTimeout: Duration) throws -> PostgresConnection.Configuration {
            var configuration: PostgresConnection.Configuration
            switch endpoint {
            case .tcp(let host, let port):
                configuration = .init(host: host, port: port, username: username, password: password, database: database,
                                      tls: try tls.map { .require(try NIOSSLContext(configuration: $0)) } ?? .disable)
            case .unix(let path):
                configuration = .init(unixSocketPath: path, username: username, password: password, database: database)
            }
            configuration.options.connectTimeout = .nanoseconds(Int64(connectTimeout.components.seconds) * 1_000_000_000
                                                                 + connectTimeout.components.attoseconds / 1_000_000_000)
            return configuration
        }
    }
}

// MARK: - Deadline

/// Races an operation against a timer without waiting for the operation once the timer wins (a query
/// in flight on a connection that went silent is not cancellable; the caller must not hang on it).
enum Deadline {
    enum Outcome<Value: Sendable>: Sendable {
        case finished(Result<Value, any Error>)
        case timedOut
    }

    /// The operation's result, or `.timedOut` after `timeout` (the operation is then cancelled and left to end on its own).
    static func race<Value: Sendable>(_ timeout: Duration,
                                      _ operation: @escaping @Sendable () async throws -> Value) async -> Outcome<Value> {
        let race = Race<Value>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Outcome<Value>, Never>) in
                race.start(continuation, timeout: timeout, operation)
            }
        } onCancel: {
            race.finish(.finished(.failure(CancellationError())))
        }
    }

    /// The first of the operation and the timer to finish resumes the caller and cancels the other.
    private final class Race<Value: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Outcome<Value>, Never>?
            var pending: Outcome<Value>?
            var tasks: [Task<Void, Never>] = []
        }

        private let state = Mutex(State())

        func start(_ continuation: CheckedContinuation<Outcome<Value>, Never>, timeout: Duration,
                   _ operation: @escaping @Sendable () async throws -> Value) {
            let early = state.withLock { state -> Outcome<Value>? in
                if let pending = state.pending { return pending }
                state.continuation = continuation
                return nil
            }
            if let early { continuation.resume(returning: early); return }
            let worker = Task.detached {
                do { self.finish(.finished(.success(try await operation()))) } catch { self.finish(.finished(.failure(error))) }
            }
            let timer = Task.detached {
                do { try await Task.sleep(for: timeout) } catch { return }
                self.finish(.timedOut)
            }
            let finished = state.withLock { state -> Bool in
                if state.continuation == nil { return true }
                state.tasks = [worker, timer]
                return false
            }
            if finished { worker.cancel(); timer.cancel() }
        }

        func finish(_ outcome: Outcome<Value>) {
            let (continuation, tasks) = state.withLock { state -> (CheckedContinuation<Outcome<Value>, Never>?, [Task<Void, Never>]) in
                guard state.pending == nil else { return (nil, []) }
                state.pending = outcome
                defer { state.continuation = nil; state.tasks = [] }
                return (state.continuation, state.tasks)
            }
            continuation?.resume(returning: outcome)
            for task in tasks { task.cancel() }
        }
    }
}
