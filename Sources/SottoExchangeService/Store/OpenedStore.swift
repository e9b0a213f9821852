import Foundation
import PostgresNIO

/// How a node's matcher is kept: alone in the process, or replicated through a log that several nodes share.
/// Chosen explicitly by whoever starts the service (the store does not decide it by its type).
public struct Replication: Sendable {
    enum Kind: Sendable {
        case standalone
        /// The replication log in this PostgreSQL database (the log opens connections of its own).
        case postgresLog(PostgresClient.Configuration)
    }

    let kind: Kind

    /// The node serves alone: every command is applied at once.
    public static let standalone = Replication(kind: .standalone)

    /// The node shares its matcher with the other nodes of the PostgreSQL database that `store` uses, through
    /// the replication log in that database (whose tables the store's schema holds).
    /// - Parameter store: the PostgreSQL store the nodes share.
    public static func sharedLog(in store: PostgresStore) -> Replication {
        Replication(kind: .postgresLog(store.location.clientConfiguration()))
    }

    /// True when the matcher is replicated through a shared log.
    public var isShared: Bool {
        if case .postgresLog = kind { return true }
        return false
    }
}

/// A store opened from a `--store` specification, with the replication it implies and how to close it.
public struct OpenedStore: Sendable {
    /// Projects, keys and beacons.
    public let store: any ExchangeStore
    /// Standalone for SQLite; a shared log for PostgreSQL (several nodes may serve one database).
    public let replication: Replication
    /// Ends the store's connections (a PostgreSQL pool); nothing for SQLite. Call once, when done.
    public let close: @Sendable () async -> Void

    /// Why a store specification cannot be opened.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// The specification itself is wrong (a usage error): an unknown scheme, a missing path.
        case usage(String)
        /// The store cannot be opened (the database is away, the file is locked or damaged).
        case unavailable(String)

        public var description: String {
            switch self {
            case .usage(let message), .unavailable(let message): return message
            }
        }
    }

    /// Opens the store of `spec`: `sqlite:PATH` (or a bare path), or `postgres://...` (also `postgresql://`);
    /// schemes are case-insensitive, any other is refused rather than taken for a file name. A PostgreSQL store
    /// brings its schema up to date.
    /// - Parameters:
    ///   - spec: the specification; nil: the default SQLite file (``SQLiteStore/defaultPath``), whose
    ///     directories are made.
    ///   - service: lock a SQLite store for this process (one `sotto serve` per file).
    /// - Throws: ``Failure/usage(_:)`` for a malformed specification, ``Failure/unavailable(_:)`` when the
    ///   store cannot be opened.
    public static func open(_ spec: String?, service: Bool = false) async throws(Failure) -> OpenedStore {
        let isDefault = spec == nil
        var spec = spec ?? "sqlite:" + SQLiteStore.defaultPath
        if let scheme = scheme(of: spec), !["sqlite", "postgres", "postgresql"].contains(scheme.lowercased()) {
            throw .usage("--store: unknown scheme '\(scheme):' in \(spec); give sqlite:PATH or postgres://... (a file name with a colon: sqlite:\(spec))")
        }
        // Schemes are case-insensitive (SQLITE:x is sqlite:x, never a file named "SQLITE:x").
        if let scheme = scheme(of: spec) { spec = scheme.lowercased() + spec.dropFirst(scheme.count) }
        if spec.hasPrefix("postgres://") || spec.hasPrefix("postgresql://") {
            let store: PostgresStore
            do { store = try await PostgresStore(url: spec) } catch { throw .unavailable(error.description) }
            return OpenedStore(store: store, replication: .sharedLog(in: store), close: { await store.shutdown() })
        }
        if spec.hasPrefix("postgres:") || spec.hasPrefix("postgresql:") {
            throw .usage("--store \(spec): a PostgreSQL store is a URL, postgres://USER@HOST:PORT/DATABASE")
        }
        let path = spec.hasPrefix("sqlite:") ? String(spec.dropFirst("sqlite:".count)) : spec
        guard !path.isEmpty else { throw .usage("--store sqlite:PATH needs a path") }
        if isDefault {
            // The default location's directories are made; a path given is used as it is (a typo stays an error).
            try? FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        }
        do {
            return OpenedStore(store: try SQLiteStore(path: path, service: service), replication: .standalone, close: {})
        } catch { throw .unavailable("\(error)") }
    }

    /// The URL scheme `spec` starts with ("mysql" in "mysql://x", "sqlite" in "sqlite:x"), or nil for a path.
    static func scheme(of spec: String) -> String? {
        guard let colon = spec.firstIndex(of: ":"), colon != spec.startIndex else { return nil }
        let name = spec[..<colon]
        guard let first = name.first, first.isASCII && first.isLetter,
              name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }) else { return nil }
        return String(name)
    }
}
