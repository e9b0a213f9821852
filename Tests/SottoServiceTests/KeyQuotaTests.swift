import Crypto
import Foundation
@testable import SottoExchangeService
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeWire
import Testing

/// A key's own session quota (issue 34): enforced by the replicated state, so over every node; carried by the log;
/// kept across a snapshot; set through the admin API and inherited by a rotated key.
@Suite struct KeyQuotaTests {
    static func open(_ session: String, stream: UInt64, key: String, quota: Int?) -> ReplicaCommand {
        .open(.init(stream: stream, session: SessionID(session), secretHash: Array(SHA256.hash(data: [1])), resume: nil,
                    project: ReplicaTests.project, keyID: key, broadcasts: false, keyMaxSessions: quota))
    }

    static func refused(_ outputs: [ReplicaOutput]) -> [ExchangeError] {
        ReplicaTests.opened(outputs).compactMap { if case .failure(let error) = $0.1 { return error } else { return nil } }
    }

    @Test func aKeyHoldsAtMostItsQuotaOfSessionsWhateverNodeOpensThem() throws {
        var replica = ReplicaTests.replica()
        // Two nodes open sessions with key k1 (quota 2) and k2 (none but the project's 10).
        var outputs = replica.apply(ReplicaTests.entry("n1", [Self.open("s_1", stream: 1, key: "k1", quota: 2)]), at: 0)
        outputs += replica.apply(ReplicaTests.entry("n2", [Self.open("s_2", stream: 1, key: "k1", quota: 2)]), at: 0.1)
        #expect(Self.refused(outputs).isEmpty)
        let third = replica.apply(ReplicaTests.entry("n1", [Self.open("s_3", stream: 2, key: "k1", quota: 2)]), at: 0.2)
        #expect(Self.refused(third) == [.sessionQuotaExceeded(2)])
        let other = replica.apply(ReplicaTests.entry("n1", [Self.open("s_4", stream: 3, key: "k2", quota: nil)]), at: 0.3)
        #expect(Self.refused(other).isEmpty, "another key of the project is not counted against k1")

        // The quota travels through the log, and the count through a snapshot.
        let wire = try Self.open("s_5", stream: 4, key: "k1", quota: 2).wire()
        guard case .open(let decoded)? = ReplicaCommand(wire: wire) else { Issue.record("no open"); return }
        #expect(decoded.keyMaxSessions == 2)
        guard case .open(let unlimited)? = ReplicaCommand(wire: try Self.open("s_6", stream: 5, key: "k1", quota: nil).wire()) else { return }
        #expect(unlimited.keyMaxSessions == nil)
        var restored = try ExchangeReplica(snapshot: replica.snapshot(), timings: ReplicaTests.timings)
        #expect(restored.sessionsPerKey == ["k1": 2, "k2": 1])
        #expect(Self.refused(restored.apply(ReplicaTests.entry("n1", [.open(decoded)]), at: 0.4)) == [.sessionQuotaExceeded(2)])

        // A session of k1 ends: one more opens.
        _ = replica.apply(ReplicaTests.entry("n1", [.end(SessionID("s_1"), stream: 1)]), at: 0.5)
        #expect(Self.refused(replica.apply(ReplicaTests.entry("n1", [Self.open("s_7", stream: 6, key: "k1", quota: 2)]), at: 0.6)).isEmpty)
        #expect(replica.sessionsPerKey["k1"] == 2)
    }

    /// Two nodes sharing PostgreSQL: the key's second session is refused on the other node; once the first ends,
    /// it opens there; another key of the project is not held back.
    @Test(.timeLimit(.minutes(1))) func overTwoNodesTheKeyHoldsItsQuotaOnce() async throws {
        let cluster = try await TestCluster(nodes: 2)
        defer { Task { await cluster.stop() } }
        let (record, key) = try await cluster.admin.createKey(project: cluster.project.id, label: "kiosk", ratePerSecond: 100, burst: 100)
        try await cluster.admin.setKeySessionQuota(id: record.id, maxSessions: 1)
        let first = try await cluster.manager(node: 0, key: key)
        let second = MessageManager(link: try RemoteMatcher(options: .init(endpoint: cluster.node(1).address, apiKey: key)))
        await #expect(throws: ExchangeError.sessionQuotaExceeded(1)) { try await second.connect(timeout: 5) }
        await second.close(now: 0)
        let other = try await cluster.manager(node: 1)
        await first.close(now: 0)
        let address = cluster.node(1).address
        let reopened = await eventually(10) {
            guard let link = try? RemoteMatcher(options: .init(endpoint: address, apiKey: key)) else { return false }
            let manager = MessageManager(link: link)  // a refused manager is done: a new one each time
            let connected = (try? await manager.connect(timeout: 2)) != nil
            await manager.close(now: 0)
            return connected
        }
        #expect(reopened, "the slot is free once the first session ended")
        await other.close(now: 0)
    }

    @Test func theQuotaIsSetThroughTheAPIAuditedAndInheritedByARotatedKey() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let secret = try await store.createOperator(name: "alice").secret
        _ = try await store.createProject(name: "museum", maxSessions: 10)
        let api = AdminAPI(store: store)
        let created = await AdminBeaconTests.call(api, secret, "POST", "/api/projects/museum/keys", ["label": "kiosk", "maxSessions": 3])
        #expect(created.status == 201)
        let key = try #require(created.json?["key"] as? [String: Any])
        #expect(key["maxSessions"] as? Int == 3)
        let id = try #require(key["id"] as? String)
        let text = try #require(created.json?["secret"] as? String)
        #expect(try await APIKeys.authenticate(text, in: store)?.maxSessions == 3)
        for bad in [0, -1, 10_000_001] {
            #expect(await AdminBeaconTests.call(api, secret, "POST", "/api/projects/museum/keys", ["maxSessions": bad]).status == 400)
            #expect(await AdminBeaconTests.call(api, secret, "POST", "/api/keys/\(id)/quota", ["maxSessions": bad]).status == 400)
        }
        #expect(try await store.keys(project: "museum").count == 1, "a refused quota makes no key")
        #expect(await AdminBeaconTests.call(api, secret, "POST", "/api/keys/\(id)/quota", ["maxSessions": 5]).status == 200)
        #expect(await AdminBeaconTests.call(api, secret, "POST", "/api/keys/nope/quota", ["maxSessions": 5]).status == 404)
        let (rotated, _) = try await store.rotateKey(id: id, overlap: 60)
        let stored = try await store.key(id: rotated.id)
        #expect(rotated.maxSessions == 5 && stored?.maxSessions == 5)
        #expect(await AdminBeaconTests.call(api, secret, "POST", "/api/keys/\(id)/quota", ["maxSessions": NSNull()]).status == 200)
        #expect(try await store.key(id: id)?.maxSessions == nil)
        let actions = try await store.auditEntries(limit: 20).filter { $0.actor == "operator:alice" }.map(\.action)
        #expect(actions.filter { $0 == "key.quota" }.count >= 3, "\(actions)")
    }
}
