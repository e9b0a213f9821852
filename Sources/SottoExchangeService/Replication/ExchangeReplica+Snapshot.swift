import Foundation
import SottoExchangeCore
import SwiftProtobuf

// A replica's whole state as bytes, so that a node that joins a cluster late (or falls behind a truncated
// log) starts from a snapshot at some log position instead of the log's beginning: a ReplicaSnapshot
// message of replication.proto (format 2), holding the core's own snapshot (MatcherCore.snapshot():
// versioned and checksummed) and the registry. Format 1, written by hand by older builds (a varint 1, the
// core's snapshot, then the registry), is still read.

extension ExchangeReplica {
    /// The format this build writes.
    static let snapshotFormatVersion: UInt32 = 2
    /// The hand-written format of older builds, still read.
    static let legacySnapshotFormatVersion: UInt8 = 1

    /// The replica's state (its timings are configuration, not state).
    func snapshot() -> [UInt8] {
        var message = Sotto_Exchange_Replication_V1_ReplicaSnapshot()
        message.format = Self.snapshotFormatVersion
        message.core = Data(core.snapshot())
        message.sessions = Dictionary(uniqueKeysWithValues: sessions.map { ($0.key.value, $0.value.message(id: $0.key)) })
        message.sessionsPerProject = sessionsPerProject.mapValues(Int64.init)
        message.detached = Dictionary(uniqueKeysWithValues: detached.map { ($0.key.value, $0.value) })
        message.nodes = nodes
        message.deadNodes = deadNodes
        if let time { message.time = time }
        // Encoding a message of plain fields cannot fail (no required fields, no Any).
        return (try? message.serializedBytes()) ?? []
    }

    /// A replica in the state of `snapshot`.
    /// - Throws: `MatcherSnapshotError` for a damaged snapshot or one of another format.
    init(snapshot: [UInt8], timings: ReplicaTimings) throws(MatcherSnapshotError) {
        if snapshot.first == Self.legacySnapshotFormatVersion {
            try self.init(legacySnapshot: snapshot, timings: timings)
            return
        }
        let message: Sotto_Exchange_Replication_V1_ReplicaSnapshot
        do { message = try Sotto_Exchange_Replication_V1_ReplicaSnapshot(serializedBytes: snapshot) } catch {
            throw .corrupt("the replica's state does not decode (\(error))")
        }
        guard message.format == Self.snapshotFormatVersion else {
            throw .unsupportedVersion(found: message.format, supported: Self.snapshotFormatVersion)
        }
        let core = try MatcherCore(snapshot: Array(message.core), generator: SystemRandomNumberGenerator())
        self.init(core: core, timings: timings)
        for (id, session) in message.sessions { sessions[SessionID(id)] = try Session(session) }
        for session in sessions.values { sessionsPerKey[session.keyID, default: 0] += 1 }
        for (project, count) in message.sessionsPerProject {
            guard let count = Int(exactly: count) else { throw .corrupt("a project's session count \(count)") }
            sessionsPerProject[project] = count
        }
        detached = Dictionary(uniqueKeysWithValues: message.detached.map { (SessionID($0.key), $0.value) })
        nodes = message.nodes
        deadNodes = message.deadNodes
        time = message.hasTime ? message.time : nil
    }
}

extension ExchangeReplica.Session {
    func message(id: SessionID) -> Sotto_Exchange_Replication_V1_ReplicaSession {
        var message = Sotto_Exchange_Replication_V1_ReplicaSession()
        message.projectID = project.id
        message.projectName = project.name
        message.maxSessions = Int64(project.maxSessions)
        message.keyID = keyID
        message.secretHash = Data(secretHash)
        if let attachment {
            message.attachedNode = attachment.node
            message.attachedStream = attachment.stream
        }
        // Each operation as the request that made it (the log's encoding).
        for (op, operation) in operations.sorted(by: { $0.key.value < $1.key.value }) {
            switch operation {
            case .publication(let published, let strategy):
                guard case .publish(let body) = Sotto_Exchange_Replication_V1_Request(.publish(op, published, strategy), session: id, stream: 0).kind else { continue }
                message.publications.append(body)
            case .subscription(let filter, let strategy, let lostTimeout):
                guard case .subscribe(let body) = Sotto_Exchange_Replication_V1_Request(.subscribe(op, filter, strategy, lostTimeout: lostTimeout),
                                                                                        session: id, stream: 0).kind else { continue }
                message.subscriptions.append(body)
            }
        }
        return message
    }

    init(_ message: Sotto_Exchange_Replication_V1_ReplicaSession) throws(MatcherSnapshotError) {
        guard let maxSessions = Int(exactly: message.maxSessions) else { throw .corrupt("a project's session quota \(message.maxSessions)") }
        self.init(project: SessionProject(id: message.projectID, name: message.projectName, maxSessions: maxSessions), keyID: message.keyID,
                  secretHash: Array(message.secretHash),
                  attachment: message.hasAttachedNode ? NodeStream(node: message.attachedNode, stream: message.attachedStream) : nil)
        for body in message.publications {
            guard case .publish(let op, let published, let strategy)? = Sotto_Exchange_Replication_V1_Request.with({ $0.kind = .publish(body) }).request else {
                throw .corrupt("a session's publication is invalid")
            }
            operations[op] = .publication(published, strategy)
        }
        for body in message.subscriptions {
            guard case .subscribe(let op, let filter, let strategy, let lostTimeout)? = Sotto_Exchange_Replication_V1_Request.with({ $0.kind = .subscribe(body) }).request else {
                throw .corrupt("a session's subscription is invalid")
            }
            operations[op] = .subscription(filter, strategy, lostTimeout: lostTimeout)
        }
    }
}

// MARK: Format 1 (hand-written, read only): a varint 1, the core's snapshot (count and bytes), then the
// sessions, sessions per project, detached sessions, nodes, dead nodes and time (LegacySnapshot.swift).

extension ExchangeReplica {
    init(legacySnapshot snapshot: [UInt8], timings: ReplicaTimings) throws(MatcherSnapshotError) {
        var reader = SnapshotReader(snapshot, from: 0)
        let version = try reader.read(UInt64.self)
        guard version == UInt64(Self.legacySnapshotFormatVersion) else {
            throw .unsupportedVersion(found: UInt32(clamping: version), supported: Self.snapshotFormatVersion)
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

extension SessionProject: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(id: try reader.read(), name: try reader.read(), maxSessions: try reader.read())
    }
}

extension NodeStream: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(node: try reader.read(), stream: try reader.read())
    }
}

extension ExchangeReplica.Operation: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        switch try reader.readTag(upTo: 1, of: "Operation") {
        case 0: self = .publication(try reader.read(), try reader.read())
        default: self = .subscription(try reader.read(), try reader.read(), lostTimeout: try reader.read())
        }
    }
}

extension ExchangeReplica.Session: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(project: try reader.read(), keyID: try reader.read(), secretHash: try reader.read(),
                  attachment: try reader.read(), operations: try reader.read())
    }
}
