@testable import SottoExchangeService
import SottoExchange
import SottoExchangeCore
import SottoExchangeWire
import Testing

// A replica's snapshot of the hand-written format (1, before the protobuf format 2) is still read: the fixture
// was written by the old writer (ExchangeReplica.snapshot() of format 1, before it was removed) for `scenario()`.

@Suite struct LegacyReplicaSnapshotTests {
    /// A replica with sessions attached and detached, operations of both kinds, two nodes after a pause of the whole log.
    static func scenario() throws -> ExchangeReplica {
        var replica = ReplicaTests.replica()
        _ = replica.apply(ReplicaTests.entry("n1", seed: 1, [ReplicaTests.open("s_a", stream: 1, secret: [1]),
                                                           ReplicaTests.open("s_b", stream: 2, secret: [2])]), at: 0)
        _ = replica.apply(ReplicaTests.entry("n2", seed: 2, [ReplicaTests.open("s_c", stream: 7, secret: [3])]), at: 0.2)
        _ = replica.apply(ReplicaTests.entry("n1", [try ReplicaTests.request("s_a", stream: 1, Frames.publish(1, content: [1, 2, 3])),
                                                    try ReplicaTests.request("s_b", stream: 2, Frames.subscribe(1, lostTimeoutMs: 3_000))]), at: 0.5)
        _ = replica.apply(ReplicaTests.entry("n1", [.detach(SessionID("s_a"), stream: 1)]), at: 1)
        _ = replica.apply(ReplicaTests.entry("n1"), at: 7)
        return replica
    }

    /// The registry, independently of dictionary order, and what the core observably holds.
    static func registry(_ replica: ExchangeReplica) -> [String] {
        let sessions = replica.sessions.map { id, session in
            "\(id) \(session.project) \(session.keyID) \(session.secretHash) \(session.attachment.map { "\($0)" } ?? "detached") "
                + session.operations.sorted { $0.key.value < $1.key.value }.map { "\($0.key.value): \($0.value)" }.joined(separator: ", ")
        }
        let tokens = ["s_a", "s_b", "s_c"].map { "\($0) \(replica.core.token(of: SessionID($0)) ?? [])" }
        return (sessions + tokens + ["\(replica.sessionsPerProject)", "\(replica.detached)", "\(replica.nodes.sorted { $0.key < $1.key })",
                                     "\(replica.deadNodes)", "\(replica.time ?? -1)", "\(replica.core.sessionCount)"]).sorted()
    }

    @Test func aFormat1SnapshotIsReadAndWrittenAgainAsFormat2() throws {
        #expect(Self.fixture.first == 1)
        let restored = try ExchangeReplica(snapshot: Self.fixture, timings: ReplicaTests.timings)
        let expected = try Self.scenario()
        #expect(restored.sessions.count == 3 && restored.detached.keys.map(\.value) == ["s_a"] && restored.nodes.keys.sorted() == ["n1", "n2"])
        #expect(Self.registry(restored) == Self.registry(expected))
        let rewritten = restored.snapshot()
        #expect(rewritten.first == 0x08)
        #expect(Self.registry(try ExchangeReplica(snapshot: rewritten, timings: ReplicaTests.timings)) == Self.registry(expected))
        #expect(throws: MatcherSnapshotError.self) { try ExchangeReplica(snapshot: Array(Self.fixture.dropLast(2)), timings: ReplicaTests.timings) }
    }

    /// ExchangeReplica.snapshot() of format 1 for `scenario()`.
    static let fixture: [UInt8] = LegacyHex.bytes([
        "01ef02534d435304000000570100000000000074d40803fb690585100000000000208c4000000000000024400303735f6202703101010864",
        "35c6858f6d104c00000000000000000001020101066d757365756d0765786869626974020000d8040000000000000840010000000000c872",
        "4000000003735f61027031010108f43abfa4f23a46ac00000000000000000102066d757365756d076578686962697403010203020000d804",
        "010000000000c872400003735f63027031010108369c58f81991b8309a9999999999c93f0000000003086435c6858f6d104c03735f620008",
        "369c58f81991b83003735f630008f43abfa4f23a46ac03735f6100000000020000000000c87240040103735f61020000000000c872400000",
        "000000c87240050203735f62020000000000c8724003fdffffffff1f8c40010303735f610000000000000000fdffffffff1f8c4002030373",
        "5f6200000000000000009799999999218c40030303735f639a9999999999c93f05000303735f610270310a6d757365756d2d61707014026b",
        "31204bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a00010200066d757365756d0765786869626974030102",
        "03020000d80403735f630270310a6d757365756d2d61707014026b3120084fed08b978af4d7d196a7446a86b58009e636b611db16211b65a",
        "9aadff29c501026e32070003735f620270310a6d757365756d2d61707014026b3120dbc1b4c900ffe48d575b5da5c638040125f65db0fe3e",
        "24494b76ea986457d98601026e31020102010101066d757365756d0765786869626974020000d80400000000000008400102703106010373",
        "5f61000000000000f03f02026e32cdcccccccccc1840026e310000000000001c4000010000000000001c40",
    ])
}

enum LegacyHex {
    static func bytes(_ lines: [String]) -> [UInt8] {
        let digits = Array(lines.joined().utf8)
        return stride(from: 0, to: digits.count - 1, by: 2).map { UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16) ?? 0 }
    }
}
