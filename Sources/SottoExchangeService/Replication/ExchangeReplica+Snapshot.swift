import SottoExchange

// A replica's whole state as bytes, so that a node that joins a cluster late (or falls behind a truncated
// log) starts from a snapshot at some log position instead of the log's beginning. Layout: format version,
// then the core's own snapshot (MatcherCore.snapshot(): versioned and checksummed), then the registry.

extension ExchangeReplica {
    /// The registry format this build writes and reads.
    static let snapshotFormatVersion: UInt64 = 1

    /// The replica's state (its timings are configuration, not state).
    func snapshot() -> [UInt8] {
        var writer = SnapshotWriter()
        writer.write(Self.snapshotFormatVersion)
        writer.writeBytes(core.snapshot())
        writer.write(sessions)
        writer.write(sessionsPerProject)
        writer.write(detached)
        writer.write(nodes)
        writer.write(deadNodes)
        writer.write(time)
        return writer.bytes
    }

    /// A replica in the state of `snapshot`.
    /// - Throws: `MatcherSnapshotError` for a damaged snapshot or one of another format.
    init(snapshot: [UInt8], timings: ReplicaTimings) throws(MatcherSnapshotError) {
        var reader = SnapshotReader(snapshot, from: 0)
        let version = try reader.read(UInt64.self)
        guard version == Self.snapshotFormatVersion else {
            throw .unsupportedVersion(found: UInt32(clamping: version), supported: UInt32(Self.snapshotFormatVersion))
        }
        let core = try MatcherCore(snapshot: Array(try reader.readBytes()), generator: SystemRandomNumberGenerator())
        self.init(core: core, timings: timings)
        sessions = try reader.read()
        for session in sessions.values { sessionsPerKey[session.keyID, default: 0] += 1 }
        sessionsPerProject = try reader.read()
        detached = try reader.read()
        nodes = try reader.read()
        deadNodes = try reader.read()
        time = try reader.read()
        guard reader.remaining == 0 else { throw .corrupt("\(reader.remaining) bytes after the replica's state") }
    }
}

extension Project: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(id)
        writer.write(name)
        writer.write(maxSessions)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(id: try reader.read(), name: try reader.read(), maxSessions: try reader.read())
    }
}

extension NodeStream: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(node)
        writer.write(stream)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(node: try reader.read(), stream: try reader.read())
    }
}

extension ExchangeReplica.Operation: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        switch self {
        case .publication(let message, let strategy):
            writer.writeByte(0)
            writer.write(message)
            writer.write(strategy)
        case .subscription(let filter, let strategy, let lostTimeout):
            writer.writeByte(1)
            writer.write(filter)
            writer.write(strategy)
            writer.write(lostTimeout)
        }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        switch try reader.readTag(upTo: 1, of: "Operation") {
        case 0: self = .publication(try reader.read(), try reader.read())
        default: self = .subscription(try reader.read(), try reader.read(), lostTimeout: try reader.read())
        }
    }
}

extension ExchangeReplica.Session: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(project)
        writer.write(keyID)
        writer.write(secretHash)
        writer.write(attachment)
        writer.write(operations)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(project: try reader.read(), keyID: try reader.read(), secretHash: try reader.read(),
                  attachment: try reader.read(), operations: try reader.read())
    }
}
