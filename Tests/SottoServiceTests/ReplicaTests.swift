import Crypto
import Foundation
@testable import SottoExchangeService
import SottoExchange
import SottoExchangeCore
import SottoExchangeWire
import SwiftProtobuf
import Testing

/// The replicated state of the service, driven entry by entry as nodes sharing a log would drive it: node
/// liveness, resuming on another node, database outages, identical tokens on every replica, snapshots.
@Suite struct ReplicaTests {
    static let timings = ReplicaTimings(sessionGrace: 15, heartbeatInterval: 5, defaultLostTimeout: 10, nodeTimeout: 5, outageGap: 2)
    static let project = SessionProject(id: "p1", name: "museum-app", maxSessions: 10)

    static func replica() -> ExchangeReplica { ExchangeReplica(core: MatcherCore(), timings: timings) }

    static func open(_ session: String, stream: UInt64, secret: [UInt8], resume: (String, [UInt8])? = nil) -> ReplicaCommand {
        .open(.init(stream: stream, session: SessionID(session), secretHash: Array(SHA256.hash(data: secret)),
                    resume: resume.map { (SessionID($0.0), Array(SHA256.hash(data: $0.1))) },
                    project: project, keyID: "k1", broadcasts: true))
    }

    /// The request a client frame carries, as the edge checks it.
    static func request(_ session: String, stream: UInt64, _ frame: ClientFrame) throws -> ReplicaCommand {
        .request(SessionID(session), stream: stream, try #require(try frame.validatedRequest()))
    }

    static func entry(_ node: String, seed: UInt8 = 0, _ commands: [ReplicaCommand] = []) -> ReplicaEntry {
        ReplicaEntry(node: node, seed: [UInt8](repeating: seed, count: 32), commands: commands)
    }

    static func opened(_ outputs: [ReplicaOutput]) -> [(NodeStream, Result<MatcherHost.Opened, ExchangeError>)] {
        outputs.compactMap { if case .opened(let a, let r) = $0 { return (a, r) } else { return nil } }
    }

    static func declaredDead(_ outputs: [ReplicaOutput]) -> [String] {
        outputs.compactMap { if case .nodeDeclaredDead(let node) = $0 { return node } else { return nil } }
    }

    static func tokens(_ outputs: [ReplicaOutput]) -> [[UInt8]] {
        outputs.compactMap { if case .deliver(_, .matcher(.token(let token))) = $0 { return token } else { return nil } }
    }

    /// The log holds the matcher's requests, not a client protocol's frames: every kind of request comes back
    /// from its log encoding as it went in, and an entry of an older build (a client frame as sent) is read as
    /// the edge would check it, what it would refuse dropped.
    @Test func requestsSurviveTheLogAndOlderFrameEntriesAreCheckedAsAtTheEdge() throws {
        let message = try Message(namespace: "museum", type: "exhibit", content: [1, 2, 3])
        let requests: [MatcherRequest] = [
            .publish(OperationID(1), message, try Strategy(discoveryMode: .broadcast, distanceType: .earshot, ttl: .seconds(90), lowPower: true)),
            .unpublish(OperationID(1)),
            .subscribe(OperationID(2), try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit"), .audioBytes(4), .beaconIDs]),
                       try Strategy(ttl: .infinite), lostTimeout: 3.5),
            .subscribe(OperationID(3), try MessageFilter([.allMyTypes]), try Strategy(), lostTimeout: 0),
            .unsubscribe(OperationID(2)),
            .observe([Sighting(payload: .token([1, 2, 3, 4, 5, 6, 7, 8]), snr: 12.5, level: -31),
                      Sighting(payload: .roomAlias(0x5A5), snr: 3, level: -60)]),
            .takeTurns(frameAirtime: 0.54, aliasAirtime: 0.29),
            .takeTurns(frameAirtime: 0, aliasAirtime: nil),
        ]
        for request in requests {
            let wire = try ReplicaCommand.request(SessionID("s_a"), stream: 7, request).wire()
            let decoded = try #require(ReplicaCommand(wire: try Sotto_Exchange_Replication_V1_Command(serializedBytes: try wire.serializedBytes() as [UInt8])))
            guard case .request(let session, let stream, let back) = decoded else { Issue.record("not a request: \(decoded)"); continue }
            #expect(session == SessionID("s_a") && stream == 7)
            #expect(back == request)
        }
        func older(_ frame: ClientFrame) throws -> ReplicaCommand? {
            var body = Sotto_Exchange_Replication_V1_Frame()
            body.session = "s_a"
            body.attachment = 7
            body.clientFrame = try frame.serializedBytes()
            var command = Sotto_Exchange_Replication_V1_Command()
            command.kind = .frame(body)
            return ReplicaCommand(wire: command)
        }
        guard case .request(_, _, let published)? = try older(Frames.publish(4, content: [9])) else { Issue.record("an older entry was dropped"); return }
        if case .publish(let op, let message, _) = published { #expect(op == OperationID(4) && message.content == [9]) }
        else { Issue.record("an older publish entry read as \(published)") }
        #expect(try older(Frames.publish(0, content: [9])) == nil, "what the edge refuses is dropped")
    }

    @Test func aDeadNodesSessionsWaitAndResumeOnAnotherNode() throws {
        var replica = Self.replica()
        let secret: [UInt8] = Array(repeating: 7, count: 32)
        let first = replica.apply(Self.entry("n1", [Self.open("s_a", stream: 1, secret: secret)]), at: 0)
        guard case .success(let opened)? = Self.opened(first).first?.1 else { Issue.record("not opened"); return }
        #expect(opened.session == SessionID("s_a") && !opened.resumed)
        #expect(replica.sessions[SessionID("s_a")]?.attachment == NodeStream(node: "n1", stream: 1))
        // n2 keeps appending (more often than the outage gap); n1 is silent for more than the node timeout.
        for time in stride(from: 1.0, through: 5.0, by: 1) { #expect(Self.declaredDead(replica.apply(Self.entry("n2"), at: time)).isEmpty) }
        let later = replica.apply(Self.entry("n2"), at: 6.5)
        #expect(Self.declaredDead(later) == ["n1"])
        #expect(replica.sessions[SessionID("s_a")]?.attachment == nil, "the dead node's session waits to be resumed")
        // A wrong secret does not resume: a new session opens instead.
        let wrong = replica.apply(Self.entry("n2", [Self.open("s_b", stream: 1, secret: secret, resume: ("s_a", [1, 2, 3]))]), at: 7)
        if case .success(let other)? = Self.opened(wrong).first?.1 { #expect(other.session == SessionID("s_b") && !other.resumed) }
        else { Issue.record("no session for a wrong secret") }
        let resumed = replica.apply(Self.entry("n2", [Self.open("s_c", stream: 2, secret: secret, resume: ("s_a", secret))]), at: 8)
        if case .success(let again)? = Self.opened(resumed).first?.1 { #expect(again.session == SessionID("s_a") && again.resumed) }
        else { Issue.record("not resumed") }
        #expect(replica.sessions[SessionID("s_a")]?.attachment == NodeStream(node: "n2", stream: 2))
        // The dead node comes back: its entries are ignored and it is told so.
        _ = replica.apply(Self.entry("n2"), at: 8.5)
        let zombie = replica.apply(Self.entry("n1", [.end(SessionID("s_a"), stream: 1)]), at: 9)
        #expect(Self.declaredDead(zombie) == ["n1"])
        #expect(replica.sessions[SessionID("s_a")] != nil)
    }

    @Test func anOutageOfTheWholeLogKillsNoNode() {
        var replica = Self.replica()
        _ = replica.apply(Self.entry("n1", [Self.open("s_a", stream: 1, secret: [1])]), at: 0)
        _ = replica.apply(Self.entry("n2"), at: 0.1)
        // The database was away for 30 s: n2 comes back first, n1 a moment later.
        let back = replica.apply(Self.entry("n2"), at: 30)
        #expect(Self.declaredDead(back).isEmpty)
        let n1 = replica.apply(Self.entry("n1"), at: 31)
        #expect(Self.declaredDead(n1).isEmpty)
        #expect(replica.sessions[SessionID("s_a")]?.attachment?.node == "n1")
    }

    @Test func aDetachedSessionEndsAfterItsGrace() {
        var replica = Self.replica()
        _ = replica.apply(Self.entry("n1", [Self.open("s_a", stream: 1, secret: [1])]), at: 0)
        _ = replica.apply(Self.entry("n1", [.detach(SessionID("s_a"), stream: 1)]), at: 1)
        _ = replica.apply(Self.entry("n1"), at: 15.5)
        #expect(replica.sessions[SessionID("s_a")] != nil, "within the grace")
        let after = replica.apply(Self.entry("n1"), at: 16.5)
        #expect(after.contains { if case .sessionClosed(SessionID("s_a")) = $0 { return true } else { return false } })
        #expect(replica.sessions.isEmpty)
    }

    @Test func everyReplicaIssuesTheSameTokensAndTheQuotaHolds() {
        var a = Self.replica(), b = Self.replica()
        var tokensA: [[UInt8]] = [], tokensB: [[UInt8]] = []
        var refused = 0
        for i in 0..<12 {
            let entry = Self.entry("n1", seed: UInt8(i), [Self.open("s_\(i)", stream: UInt64(i + 1), secret: [UInt8(i)])])
            let outA = a.apply(entry, at: Double(i))
            tokensA += Self.tokens(outA)
            tokensB += Self.tokens(b.apply(entry, at: Double(i)))
            refused += Self.opened(outA).filter { if case .failure(.sessionQuotaExceeded(10)) = $0.1 { return true } else { return false } }.count
        }
        #expect(tokensA.count == 10 && tokensA == tokensB)
        #expect(Set(tokensA).count == 10)
        #expect(refused == 2)
    }

    @Test func aReplicaRestoredFromASnapshotGoesOnAsTheOriginal() throws {
        var original = Self.replica()
        _ = original.apply(Self.entry("n1", seed: 1, [Self.open("s_a", stream: 1, secret: [1]), Self.open("s_b", stream: 2, secret: [2])]), at: 0)
        _ = original.apply(Self.entry("n1", [try Self.request("s_a", stream: 1, Frames.publish(1, content: [1, 2, 3])),
                                             try Self.request("s_b", stream: 2, Frames.subscribe(1, lostTimeoutMs: 3_000))]), at: 0.5)
        guard let token = original.core.token(of: SessionID("s_a")) else { Issue.record("no token"); return }
        _ = original.apply(Self.entry("n1", [.detach(SessionID("s_a"), stream: 1)]), at: 1)
        var restored = try ExchangeReplica(snapshot: original.snapshot(), timings: Self.timings)
        #expect(restored.sessions.count == 2 && restored.time == 1 && restored.nodes == original.nodes)
        // The same entries from here on: the same found, the same lost (by the lost timeout), the same grace end.
        let steps: [(Double, ReplicaEntry)] = [
            (1.5, Self.entry("n1", seed: 3, [try Self.request("s_b", stream: 2, Frames.observe(token: token))])),
            (2, Self.entry("n1", seed: 4, [Self.open("s_c", stream: 3, secret: [3])])),
            (5, Self.entry("n1")),
            (17, Self.entry("n1")),
        ]
        for (time, entry) in steps {
            let a = original.apply(entry, at: time).map { "\($0)" }.sorted()
            let b = restored.apply(entry, at: time).map { "\($0)" }.sorted()
            #expect(a == b, "at \(time) s")
        }
        #expect(original.sessions.keys.sorted { $0.value < $1.value } == restored.sessions.keys.sorted { $0.value < $1.value })
        #expect(throws: MatcherSnapshotError.self) { try ExchangeReplica(snapshot: Array(original.snapshot().dropLast(3)), timings: Self.timings) }
    }
}
