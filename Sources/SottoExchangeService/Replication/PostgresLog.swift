import Foundation
import Logging
import NIOCore
import PostgresNIO
import SottoExchangeCore

/// The replication log in PostgreSQL: table `exchange_log`, numbered through the one-row `exchange_head`.
///
/// An append takes the head row's lock, so appends are numbered in commit order without gaps (a reader
/// that sees entry n has seen every entry before it), and stamps the entry with the database's clock: the
/// time every replica applies it at, whatever the nodes' clocks say. `NOTIFY sotto_exchange` wakes the
/// other nodes; they also read after each of their own appends (at least every tick), so a lost
/// notification only delays.
///
/// Encoding and decoding run off the caller's actor (`@concurrent`): a node's matcher goes on while a batch
/// is written or read.
///
/// The log's connections run with `synchronous_commit = off`: an append returns before its WAL reaches
/// the disk. What the log holds is the ephemeral state of sessions (the store's projects and keys keep
/// their own, synchronous, connections), and a database crash would lose at most the last moment of it.
final class PostgresLog: ReplicationLog {
    static let channel = "sotto_exchange"

    /// The log's tables: `exchange_head` (the one row numbering appends, and the log's time origin),
    /// `exchange_log` (the entries) and `exchange_snapshot`. Created by the store's first migration, with
    /// its schema version (one statement each; never edited, as migrations are not).
    static let tables = [
        "CREATE TABLE exchange_head (id int PRIMARY KEY CHECK (id = 1), seq bigint NOT NULL, origin double precision NOT NULL)",
        "INSERT INTO exchange_head VALUES (1, 0, extract(epoch from clock_timestamp()))",
        "CREATE TABLE exchange_log (seq bigint PRIMARY KEY, node text NOT NULL, at double precision NOT NULL, body bytea NOT NULL)",
        "CREATE TABLE exchange_snapshot (seq bigint PRIMARY KEY, at double precision NOT NULL, body bytea NOT NULL)",
    ]
    private let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger

    /// A log on the database of `configuration` (its own pool of connections).
    init(configuration: PostgresClient.Configuration, logger: Logger) {
        var configuration = configuration
        configuration.options.additionalStartupParameters.append(("synchronous_commit", "off"))
        configuration.options.additionalStartupParameters.append(("application_name", "sotto-serve-log"))
        let client = PostgresClient(configuration: configuration)
        self.client = client
        self.logger = logger
        // Detached: a graceful shutdown of the service group must not close the pool before the host has
        // appended what its last clients sent (PostgresClient.run() watches for one).
        runner = Task.detached { await client.run() }
    }

    deinit { runner.cancel() }

    /// Ends the log's connections.
    func close() { runner.cancel() }

    @concurrent func append(_ entry: ReplicaEntry) async throws -> Int64 {
        let body = ByteBuffer(bytes: try entry.serialized())
        let rows = try await client.query("""
            WITH head AS (UPDATE exchange_head SET seq = seq + 1 WHERE id = 1 RETURNING seq, origin),
            added AS (INSERT INTO exchange_log (seq, node, at, body)
                      SELECT seq, \(entry.node), extract(epoch from clock_timestamp()) - origin, \(body) FROM head
                      RETURNING seq)
            SELECT seq, pg_notify('sotto_exchange', seq::text)::text FROM added
            """)
        for try await (sequence, _) in rows.decode((Int64, String).self) { return sequence }
        throw LogEntryError(description: "the log's head row is missing (was the schema migrated?)")
    }

    @concurrent func entries(after sequence: Int64, limit: Int) async throws -> [LoggedEntry] {
        let rows = try await client.query("""
            SELECT l.seq, l.at, l.at + h.origin, l.body FROM exchange_log l, exchange_head h
            WHERE l.seq > \(sequence) ORDER BY l.seq LIMIT \(limit)
            """)
        var entries: [LoggedEntry] = []
        for try await (seq, at, wall, body) in rows.decode((Int64, Double, Double, ByteBuffer).self) {
            let entry: ReplicaEntry
            do { entry = try ReplicaEntry(serialized: Array(buffer: body)) } catch {
                // Every replica skips it alike: the state stays the same everywhere.
                logger.error("log entry \(seq): \(error)")
                entry = ReplicaEntry(node: "", commands: [])
            }
            entries.append(LoggedEntry(sequence: seq, time: at, wallClock: wall, entry: entry))
        }
        return entries
    }

    func latestSnapshot() async throws -> (sequence: Int64, bytes: [UInt8])? {
        let rows = try await client.query("SELECT seq, body FROM exchange_snapshot ORDER BY seq DESC LIMIT 1")
        for try await (seq, body) in rows.decode((Int64, ByteBuffer).self) { return (seq, Array(buffer: body)) }
        return nil
    }

    func saveSnapshot(sequence: Int64, bytes: [UInt8]) async throws {
        let body = ByteBuffer(bytes: bytes)
        let logger = self.logger
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("""
                INSERT INTO exchange_snapshot (seq, at, body) VALUES (\(sequence), extract(epoch from clock_timestamp()), \(body))
                ON CONFLICT (seq) DO NOTHING
                """, logger: logger)
            // Keep this snapshot and the one before; the log from the one before on.
            let rows = try await connection.query("""
                SELECT seq FROM exchange_snapshot WHERE seq < \(sequence) ORDER BY seq DESC LIMIT 1
                """, logger: logger)
            var previous: Int64?
            for try await seq in rows.decode(Int64.self) { previous = seq }
            if let previous {
                try await connection.query("DELETE FROM exchange_snapshot WHERE seq < \(previous)", logger: logger)
                try await connection.query("DELETE FROM exchange_log WHERE seq <= \(previous)", logger: logger)
            }
        }
    }

    func appended() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let client = self.client, logger = self.logger
        let listener = Task {
            while !Task.isCancelled {
                do {
                    try await client.withConnection { connection in
                        try await connection.listen(on: Self.channel) { notifications in
                            continuation.yield()  // listening now: read what came before
                            for try await _ in notifications { continuation.yield() }
                        }
                    }
                } catch {
                    logger.debug("LISTEN \(Self.channel): \(error)")
                }
                try? await Task.sleep(for: .milliseconds(500))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in listener.cancel() }
        return stream
    }
}
