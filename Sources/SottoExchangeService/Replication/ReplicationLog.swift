import Foundation
import PostgresNIO
import SottoExchange
import SottoExchangeWire
import SwiftProtobuf

/// An entry as read back from the log: its place, the log's time for it (s since the log's origin) and the
/// database's wall clock then (s since 1970).
struct LoggedEntry: Sendable {
    var sequence: Int64
    var time: Double
    var wallClock: Double
    var entry: ReplicaEntry
}

/// The ordered log that several nodes share: appends are numbered without gaps in commit order and stamped
/// with the database's clock; every node reads every entry in that order.
protocol ReplicationLog: Sendable {
    /// Appends one entry; returns its sequence number.
    func append(_ entry: ReplicaEntry) async throws -> Int64
    /// The entries after `sequence`, in order, at most `limit`.
    func entries(after sequence: Int64, limit: Int) async throws -> [LoggedEntry]
    /// Yields whenever some node appended (a hint: readers also poll on their own ticks).
    func appended() -> AsyncStream<Void>
    /// Ends the log's connections.
    func close()
    /// The newest snapshot of the replicated state and the sequence number of the last entry it includes.
    func latestSnapshot() async throws -> (sequence: Int64, bytes: [UInt8])?
    /// Saves a snapshot of the state after entry `sequence`, then forgets what the previous snapshot made
    /// unnecessary: older snapshots and the entries up to the previous one (a node that far behind reloads).
    func saveSnapshot(sequence: Int64, bytes: [UInt8]) async throws
}

/// Why a log entry could not be read.
struct LogEntryError: Error, CustomStringConvertible {
    let description: String
}

// MARK: The entry's wire form (replication.proto)

extension ReplicaEntry {
    /// The entry as stored in the log.
    func serialized() throws -> [UInt8] {
        var entry = Sotto_Exchange_Replication_V1_Entry()
        entry.node = node
        entry.seed = Data(seed)
        entry.nodeClock = nodeClock
        entry.commands = try commands.map { try $0.wire() }
        return try entry.serializedBytes()
    }

    /// An entry read from the log; a command that does not decode is dropped by every replica alike.
    init(serialized bytes: [UInt8]) throws {
        let wire: Sotto_Exchange_Replication_V1_Entry
        do { wire = try Sotto_Exchange_Replication_V1_Entry(serializedBytes: bytes) } catch {
            throw LogEntryError(description: "a log entry does not decode: \(error)")
        }
        self.init(node: wire.node, seed: Array(wire.seed), nodeClock: wire.nodeClock,
                  commands: wire.commands.compactMap(ReplicaCommand.init(wire:)))
    }
}

extension ReplicaCommand {
    func wire() throws -> Sotto_Exchange_Replication_V1_Command {
        var command = Sotto_Exchange_Replication_V1_Command()
        switch self {
        case .open(let open):
            var body = Sotto_Exchange_Replication_V1_Open()
            body.attachment = open.stream
            body.session = open.session.value
            body.secretHash = Data(open.secretHash)
            if let resume = open.resume {
                body.resumeSession = resume.session.value
                body.resumeSecretHash = Data(resume.secretHash)
            }
            body.projectID = open.project.id
            body.projectName = open.project.name
            body.maxSessions = UInt32(clamping: open.project.maxSessions)
            body.keyID = open.keyID
            body.broadcasts = open.broadcasts
            command.kind = .open(body)
        case .detach(let session, let stream):
            var body = Sotto_Exchange_Replication_V1_Detach()
            body.session = session.value
            body.attachment = stream
            command.kind = .detach(body)
        case .end(let session, let stream):
            var body = Sotto_Exchange_Replication_V1_End()
            body.session = session.value
            body.attachment = stream
            command.kind = .end(body)
        case .frame(let session, let stream, let frame):
            var body = Sotto_Exchange_Replication_V1_Frame()
            body.session = session.value
            body.attachment = stream
            body.clientFrame = try frame.serializedBytes()
            command.kind = .frame(body)
        case .beacons(let beacons):
            var body = Sotto_Exchange_Replication_V1_Beacons()
            body.beacons = beacons.map { beacon in
                var wire = Sotto_Exchange_Replication_V1_Beacon()
                wire.id = Data(beacon.id)
                wire.projectID = beacon.projectID
                wire.public = beacon.isPublic
                if let rotation = beacon.rotation {
                    wire.rotates = true
                    wire.identityKey = Data(rotation.key.bytes)
                    wire.rotationPeriod = rotation.period
                }
                wire.attachments = beacon.attachments.map { message in
                    var attachment = Sotto_Exchange_Replication_V1_Attachment()
                    attachment.namespace = message.namespace
                    attachment.type = message.type
                    attachment.content = Data(message.content)
                    return attachment
                }
                return wire
            }
            command.kind = .beacons(body)
        case .revoke(let keys):
            var body = Sotto_Exchange_Replication_V1_Revoke()
            body.keyIds = keys
            command.kind = .revoke(body)
        case .usage(let usage):
            func spent(_ units: [String: Double]) -> [Sotto_Exchange_Replication_V1_Spent] {
                units.sorted { $0.key < $1.key }.map { id, units in
                    var spent = Sotto_Exchange_Replication_V1_Spent()
                    spent.id = id
                    spent.units = units
                    return spent
                }
            }
            var body = Sotto_Exchange_Replication_V1_Usage()
            body.keys = spent(usage.keys)
            body.projects = spent(usage.projects)
            body.opens = spent(usage.opens)
            command.kind = .usage(body)
        }
        return command
    }

    init?(wire command: Sotto_Exchange_Replication_V1_Command) {
        switch command.kind {
        case .open(let body):
            let resume = body.resumeSession.isEmpty ? nil : (SessionID(body.resumeSession), Array(body.resumeSecretHash))
            self = .open(Open(stream: body.attachment, session: SessionID(body.session), secretHash: Array(body.secretHash),
                              resume: resume,
                              project: Project(id: body.projectID, name: body.projectName, maxSessions: Int(body.maxSessions)),
                              keyID: body.keyID, broadcasts: body.broadcasts))
        case .detach(let body): self = .detach(SessionID(body.session), stream: body.attachment)
        case .end(let body): self = .end(SessionID(body.session), stream: body.attachment)
        case .frame(let body):
            guard let frame = try? ClientFrame(serializedBytes: body.clientFrame) else { return nil }
            self = .frame(SessionID(body.session), stream: body.attachment, frame)
        case .beacons(let body):
            var beacons: [BeaconRecord] = []
            for wire in body.beacons {
                // Exactly as the store gave them (validated there).
                let attachments = wire.attachments.map {
                    Message(delivered: $0.namespace, type: $0.type, content: Array($0.content))
                }
                // A rotation that does not decode (an entry of an older build, with a 64-bit key) fails closed,
                // as the store's: the beacon stays, resolving nothing.
                let rotation = BeaconRecord.storedRotation(key: wire.rotates ? Array(wire.identityKey) : nil,
                                                           period: wire.rotates ? wire.rotationPeriod : nil)
                beacons.append(BeaconRecord(id: Array(wire.id), projectID: wire.projectID, isPublic: wire.public,
                                            rotation: rotation, attachments: attachments))
            }
            self = .beacons(beacons)
        case .revoke(let body): self = .revoke(keys: body.keyIds)
        case .usage(let body):
            // Finite, positive amounts only: a damaged entry must not refill a bucket.
            func units(_ spent: [Sotto_Exchange_Replication_V1_Spent]) -> [String: Double] {
                var units: [String: Double] = [:]
                for item in spent where item.units.isFinite && item.units > 0 { units[item.id, default: 0] += item.units }
                return units
            }
            self = .usage(RateUsage(keys: units(body.keys), projects: units(body.projects), opens: units(body.opens)))
        case .none: return nil
        }
    }
}
