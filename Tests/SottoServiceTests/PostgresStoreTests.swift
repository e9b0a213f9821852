import Foundation
import PostgresNIO
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoTestSupport
import Testing

/// What only the PostgreSQL store does: nodes migrating together, URLs, an unreachable database.
@Suite(.timeLimit(.minutes(2))) struct PostgresStoreTests {
    @Test func threeNodesMigratingOneFreshDatabaseAtOnceAllSucceed() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let nodes = try await withThrowingTaskGroup(of: PostgresStore.self) { group in
            for _ in 0..<3 { group.addTask { try await PostgresStore(url: url) } }
            var nodes: [PostgresStore] = []
            for try await node in group { nodes.append(node) }
            return nodes
        }
        #expect(nodes.count == 3)
        let first = try #require(nodes.first)
        // Each migration applied once; the replication log's tables are there.
        var versions: [Int] = []
        for try await version in try await first.client.query("SELECT version::bigint FROM schema_version ORDER BY version").decode(Int.self) {
            versions.append(version)
        }
        #expect(versions == [1, 2, 3, 4, 5, 6, 7])  // 3: the web origins of API keys; 4: operators and the audit log; 5: disabled projects, key rotation and last use; 6: decommissioned beacons, keys' session quotas; 7: nodes' shared live counters
        var heads: [(Int64, Double)] = []
        for try await head in try await first.client.query("SELECT seq, origin FROM exchange_head").decode((Int64, Double).self) {
            heads.append(head)
        }
        #expect(heads.count == 1 && heads.first?.0 == 0)
        for table in ["exchange_log", "exchange_snapshot"] {
            var count: [Int] = []
            for try await n in try await first.client.query("SELECT count(*) FROM \(unescaped: table)").decode(Int.self) { count.append(n) }
            #expect(count == [0], "\(table)")
        }

        // One database: what a node writes, the others see (and a name taken on one is taken on all).
        let project = try await nodes[0].createProject(name: "shared", maxSessions: 3)
        #expect(try await nodes[1].project(id: "shared") == project)
        await #expect(throws: StoreError.duplicateProject("shared")) { _ = try await nodes[2].createProject(name: "shared", maxSessions: 3) }
        // A fourth node, later, finds the schema up to date.
        let late = try await PostgresStore(url: url)
        #expect(try await late.projects() == [project])
        for node in nodes + [late] { await node.shutdown() }
    }

    /// A rotating beacon stored before identity keys (a 64-bit SplitMix64 key, issue 29) fails closed until
    /// registered again: it stays rotating, under a key no beacon has, so it is never resolved on a key anyone
    /// could invert (nor is its stable ID).
    @Test func aRotationStoredWithTheOldSplitMixKeyFailsClosed() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let store = try await PostgresStore(url: url)
        let project = try await store.createProject(name: "museum", maxSessions: 3)
        try await store.registerBeacon(BeaconRecord(id: [4, 2], projectID: project.id, isPublic: false, rotation: nil))
        try await store.client.query("""
            INSERT INTO beacon (id, project_id, public, rotation_key, rotation_period) VALUES ('\\x0102030405060708'::bytea, \(project.id), false, 77, 5)
            """)
        let stored = try await store.beacons()
        #expect(stored.map(\.id) == [[1, 2, 3, 4, 5, 6, 7, 8], [4, 2]])
        #expect(stored.map(\.rotation) == [BeaconRecord.unresolvable, nil])
        let rotation = try BeaconRotation(key: .generate(), period: 5)
        try await store.registerBeacon(BeaconRecord(id: [1, 2, 3, 4, 5, 6, 7, 8], projectID: project.id, isPublic: false, rotation: rotation))
        #expect(try await store.beacons().map(\.rotation) == [rotation, nil])
        await store.shutdown()
    }

    @Test func concurrentAttachmentsEachGetTheirOwnPosition() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let nodes = [try await PostgresStore(url: url), try await PostgresStore(url: url)]
        let project = try await nodes[0].createProject(name: "museum", maxSessions: 3)
        try await nodes[0].registerBeacon(BeaconRecord(id: [4, 2], projectID: project.id, isPublic: false, rotation: nil))
        let start = try await nodes[1].registryVersion()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<20 {
                let node = nodes[i % 2]
                group.addTask {
                    try await node.addAttachment(beacon: [4, 2], BeaconAttachment.message(namespace: "museum", type: "n", data: [UInt8(i)]))
                }
            }
            try await group.waitForAll()
        }
        let attachments = try #require(try await nodes[1].beacons().first).attachments
        #expect(Set(attachments.map(\.content)) == Set((0..<20).map { [UInt8($0)] }))
        #expect(try await nodes[0].registryVersion() == start + 20)
        for node in nodes { await node.shutdown() }
    }

    @Test func unixSocketURL() async throws {
        let server = try await PostgresServer.shared()
        let tcp = try await server.createDatabase()
        let name = try #require(tcp.split(separator: "/").last.map(String.init))
        let store = try await PostgresStore(url: server.unixURL(database: name))
        #expect(store.endpoint.hasPrefix("unix:\(server.directory)/.s.PGSQL."))
        let project = try await store.createProject(name: "over-a-socket", maxSessions: 1)
        #expect(try await store.projects() == [project])
        await store.shutdown()
        await #expect(throws: StoreError.unavailable("the PostgreSQL store at \(store.endpoint) is shut down")) { _ = try await store.projects() }
    }

    @Test func malformedOrPlaintextRemoteURLsAreRefusedBeforeConnecting() async throws {
        let refusals: [(String, String)] = [
            ("postgres://sotto@db.example.com:5432/exchange", "sslmode=require"),
            ("postgres://sotto@10.0.0.7/exchange?sslmode=disable", "sslmode=require"),
            ("postgres://sotto@db.example.com/exchange?sslmode=prefer", "sslmode=prefer is not supported"),
            ("postgres://sotto@127.0.0.1/exchange?sslmod=require", "unknown query item 'sslmod'"),
            ("postgres://sotto@127.0.0.1:99999/exchange", "not 1 to 65535"),
            ("postgres:///exchange", "no host"),
            ("mysql://sotto@127.0.0.1/exchange", "postgres://"),
        ]
        for (url, reason) in refusals {
            do {
                _ = try await PostgresStore(url: url, timeout: .seconds(2))
                Issue.record("\(url) was accepted")
            } catch {
                guard case .invalid(let message) = error else { Issue.record("\(url): \(error)"); continue }
                #expect(message.contains(reason), "\(url): \(message)")
            }
        }
    }

    @Test func aServerThatRefusesTheConnectionSaysWhy() async throws {
        let server = try await PostgresServer.shared()
        let missing = server.url(database: "no_such_database")
        await #expect {
            _ = try await PostgresStore(url: missing, timeout: .seconds(3))
        } throws: { error in
            guard case .unavailable(let reason)? = error as? StoreError else { return false }
            return reason.contains("PostgreSQL at 127.0.0.1:\(server.port)") && reason.contains("\"no_such_database\" does not exist")
        }
    }

    @Test func aNewerSchemaIsRefused() async throws {
        let url = try await PostgresServer.shared().createDatabase()
        let store = try await PostgresStore(url: url)
        try await store.client.query("INSERT INTO schema_version (version) VALUES (99)")
        await store.shutdown()
        await #expect(throws: StoreError.unavailable("the database's schema is version 99 but this sotto knows up to 7: upgrade sotto")) {
            _ = try await PostgresStore(url: url)
        }
    }

    @Test func aStoppedDatabaseAnswersUnavailableInBoundedTimeAndRecoversAfterRestart() async throws {
        let server = try await PostgresServer()
        do {
            let url = try await server.createDatabase()
            let store = try await PostgresStore(url: url, timeout: .seconds(3))
            let project = try await store.createProject(name: "before", maxSessions: 1)

            try await server.stop()
            for attempt in 0..<2 {
                let clock = ContinuousClock()
                let started = clock.now
                var failure: StoreError?
                do { _ = try await store.projects() } catch { failure = error }
                let elapsed = clock.now - started
                guard case .unavailable(let reason)? = failure else {
                    Issue.record("attempt \(attempt): expected unavailable, got \(String(describing: failure))")
                    continue
                }
                #expect(reason == "cannot reach PostgreSQL at 127.0.0.1:\(server.port): connection refused", "attempt \(attempt)")
                #expect(elapsed < .seconds(8), "attempt \(attempt) took \(elapsed)")
            }
            await #expect(throws: StoreError.self) { _ = try await store.createProject(name: "during", maxSessions: 1) }

            // A store opened while the database is down fails the same way, as quickly.
            await #expect(throws: StoreError.unavailable("cannot reach PostgreSQL at 127.0.0.1:\(server.port): connection refused")) {
                _ = try await PostgresStore(url: url, timeout: .seconds(2))
            }

            try await server.restart()
            let recovered = await eventually(30) { (try? await store.projects()) == [project] }
            #expect(recovered, "the store did not recover within 30 s of the restart")
            _ = try await store.createProject(name: "after", maxSessions: 1)
            #expect(try await store.projects().map(\.name) == ["after", "before"])
            await store.shutdown()
        } catch {
            await server.destroy()
            throw error
        }
        await server.destroy()
    }
}
