import Foundation
import PostgresNIO
import SottoExchangeCore
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
            body.keyMaxSessions = UInt32(clamping: open.keyMaxSessions ?? 0)
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
        case .request(let session, let stream, let request):
            command.kind = .request(Sotto_Exchange_Replication_V1_Request(request, session: session, stream: stream))
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
                              project: SessionProject(id: body.projectID, name: body.projectName, maxSessions: Int(body.maxSessions)),
                              keyID: body.keyID, broadcasts: body.broadcasts,
                              keyMaxSessions: body.keyMaxSessions == 0 ? nil : Int(body.keyMaxSessions)))
        case .detach(let body): self = .detach(SessionID(body.session), stream: body.attachment)
        case .end(let body): self = .end(SessionID(body.session), stream: body.attachment)
        case .request(let body):
            guard let request = body.request else { return nil }
            self = .request(SessionID(body.session), stream: body.attachment, request)
        case .frame(let body):
            // An entry of an older build: checked as the edge checks a frame now; what it would refuse is dropped
            // (its client was answered, if at all, by the replica of that build).
            guard let frame = try? ClientFrame(serializedBytes: body.clientFrame), let request = try? frame.validatedRequest() else { return nil }
            self = .request(SessionID(body.session), stream: body.attachment, request)
        case .beacons(let body):
            var beacons: [RegisteredBeacon] = []
            for wire in body.beacons {
                // Exactly as the store gave them (validated there).
                let attachments = wire.attachments.map {
                    Message(delivered: $0.namespace, type: $0.type, content: Array($0.content))
                }
                // A rotation that does not decode (an entry of an older build, with a 64-bit key) fails closed,
                // as the store's: the beacon stays, resolving nothing.
                let rotation = BeaconRecord.storedRotation(key: wire.rotates ? Array(wire.identityKey) : nil,
                                                           period: wire.rotates ? wire.rotationPeriod : nil)
                beacons.append(RegisteredBeacon(id: Array(wire.id), projectID: wire.projectID, isPublic: wire.public,
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

// MARK: Requests in the log

extension Sotto_Exchange_Replication_V1_Request {
    init(_ request: MatcherRequest, session: SessionID, stream: UInt64) {
        self.init()
        self.session = session.value
        attachment = stream
        switch request {
        case .publish(let op, let message, let strategy):
            var body = Sotto_Exchange_Replication_V1_Publish()
            body.op = UInt32(clamping: op.value)
            body.message = Sotto_Exchange_Replication_V1_Attachment(message)
            body.strategy = Sotto_Exchange_Replication_V1_Strategy(strategy)
            kind = .publish(body)
        case .unpublish(let op): kind = .unpublish(UInt32(clamping: op.value))
        case .subscribe(let op, let filter, let strategy, let lostTimeout):
            var body = Sotto_Exchange_Replication_V1_Subscribe()
            body.op = UInt32(clamping: op.value)
            body.includes = filter.orderedIncludes.map(Sotto_Exchange_Replication_V1_Include.init)
            body.strategy = Sotto_Exchange_Replication_V1_Strategy(strategy)
            body.lostTimeout = lostTimeout
            kind = .subscribe(body)
        case .unsubscribe(let op): kind = .unsubscribe(UInt32(clamping: op.value))
        case .observe(let sightings):
            var body = Sotto_Exchange_Replication_V1_Observe()
            body.sightings = sightings.map { sighting in
                var wire = Sotto_Exchange_Replication_V1_Sighting()
                wire.frame = Data(sighting.payload.frameBytes)
                wire.snrDb = sighting.snr
                wire.levelDbfs = sighting.level
                return wire
            }
            kind = .observe(body)
        case .takeTurns(let frameAirtime, let aliasAirtime):
            var body = Sotto_Exchange_Replication_V1_TakeTurns()
            body.frameAirtime = frameAirtime
            body.aliasAirtime = aliasAirtime ?? 0
            kind = .takeTurns(body)
        }
    }

    /// The request as the edge checked it; nil for an entry that does not hold one (a damaged or newer entry:
    /// every replica drops it alike).
    var request: MatcherRequest? {
        func operation(_ raw: UInt32) -> OperationID? { raw == 0 ? nil : OperationID(Int(raw)) }
        switch kind {
        case .publish(let body):
            guard let op = operation(body.op), let strategy = body.strategy.strategy else { return nil }
            return .publish(op, Message(delivered: body.message.namespace, type: body.message.type, content: Array(body.message.content)),
                            strategy)
        case .unpublish(let raw): return operation(raw).map { .unpublish($0) }
        case .subscribe(let body):
            guard let op = operation(body.op), let strategy = body.strategy.strategy, body.lostTimeout.isFinite, body.lostTimeout >= 0,
                  let filter = try? MessageFilter(body.includes.compactMap(\.include)) else { return nil }
            return .subscribe(op, filter, strategy, lostTimeout: body.lostTimeout)
        case .unsubscribe(let raw): return operation(raw).map { .unsubscribe($0) }
        case .observe(let body):
            return .observe(body.sightings.compactMap { wire in
                Payload(frame: Array(wire.frame)).map { Sighting(payload: $0, snr: wire.snrDb, level: wire.levelDbfs) }
            })
        case .takeTurns(let body):
            guard body.frameAirtime.isFinite, body.aliasAirtime.isFinite else { return nil }
            return .takeTurns(frameAirtime: body.frameAirtime, aliasAirtime: body.aliasAirtime > 0 ? body.aliasAirtime : nil)
        case .none: return nil
        }
    }
}

extension Sotto_Exchange_Replication_V1_Attachment {
    init(_ message: SottoExchangeCore.Message) {
        self.init()
        namespace = message.namespace
        type = message.type
        content = Data(message.content)
    }
}

extension Sotto_Exchange_Replication_V1_Strategy {
    init(_ strategy: Strategy) {
        self.init()
        switch strategy.discoveryMode {
        case .both: mode = .both
        case .broadcast: mode = .broadcast
        case .scan: mode = .scan
        }
        earshot = strategy.distanceType == .earshot
        switch strategy.ttl {
        case .seconds(let seconds): ttlSeconds = UInt32(clamping: max(1, seconds))
        case .infinite: ttlSeconds = 0
        }
        lowPower = strategy.lowPower
    }

    /// The strategy, checked as any (nil if it breaks a limit).
    var strategy: Strategy? {
        let discovery: Strategy.DiscoveryMode
        switch mode {
        case .both: discovery = .both
        case .broadcast: discovery = .broadcast
        case .scan: discovery = .scan
        case .UNRECOGNIZED: return nil
        }
        return try? Strategy(discoveryMode: discovery, distanceType: earshot ? .earshot : .default,
                             ttl: ttlSeconds == 0 ? .infinite : .seconds(Int(ttlSeconds)), lowPower: lowPower)
    }
}

extension Sotto_Exchange_Replication_V1_Include {
    init(_ include: MessageFilter.Include) {
        self.init()
        switch include {
        case .allMyTypes: kind = .allMyTypes
        case .namespacedType(let namespace, let type):
            kind = .namespacedType
            self.namespace = namespace
            self.type = type
        case .audioBytes(let length):
            kind = .audioBytes
            audioBytes = UInt32(clamping: length)
        case .beaconIDs: kind = .beaconIds
        }
    }

    var include: MessageFilter.Include? {
        switch kind {
        case .allMyTypes: return .allMyTypes
        case .namespacedType: return .namespacedType(namespace: namespace, type: type)
        case .audioBytes: return .audioBytes(Int(audioBytes))
        case .beaconIds: return .beaconIDs
        case .UNRECOGNIZED: return nil
        }
    }
}
