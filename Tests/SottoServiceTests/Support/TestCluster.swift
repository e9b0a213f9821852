import Foundation
import NIOCore
import NIOPosix
import PostgresNIO
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import SottoTestSupport
import Synchronization

/// Several `sotto serve` nodes on loopback sharing one fresh database of the shared test PostgreSQL: each
/// node has a store (a connection pool) of its own, as separate processes would, and replicates the matcher
/// through the database's log. One project and key for every node; a second project on demand.
final class TestCluster: Sendable {
    /// The database's URL.
    let url: String
    let configuration: ServiceConfiguration
    /// The harness's own store: projects, keys, and queries on the log.
    let admin: PostgresStore
    let project: Project
    let apiKey: String
    private let servers = Mutex<[TestServer]>([])
    private let stopped = Mutex<Set<Int>>([])
    private let otherKey = Mutex<Task<String, any Error>?>(nil)
    /// The devices made by ``device(node:key:broadcasts:lostTimeout:)``, closed by ``stop()``.
    private let devices = Mutex<[Device]>([])

    /// Timings for a cluster under test: short ticks, grace and timeouts (a stopped node is declared dead
    /// after 1.5 s; its sessions wait 3 s to be resumed).
    static var fastConfiguration: ServiceConfiguration {
        var configuration = TestServer.fastConfiguration
        configuration.tickInterval = 0.05
        configuration.sessionGrace = 3
        configuration.nodeTimeout = 1.5
        configuration.outageGap = 1
        configuration.databaseGrace = 3
        return configuration
    }

    /// Makes a fresh database and starts `count` nodes on it (each waits until it listens).
    init(nodes count: Int = 3, configuration: ServiceConfiguration = TestCluster.fastConfiguration) async throws {
        url = try await PostgresServer.shared().createDatabase()
        self.configuration = configuration
        admin = try await PostgresStore(url: url)
        do {
            project = try await admin.createProject(name: "museum-app", maxSessions: 100)
            apiKey = try await admin.createKey(project: project.id, label: "test", ratePerSecond: 10_000, burst: 10_000).key
        } catch {
            await admin.shutdown()
            throw error
        }
        do {
            for _ in 0..<count { try await startNode() }
        } catch {
            await stop()
            throw error
        }
    }

    /// Every node started, stopped ones included, by index.
    var nodes: [TestServer] { servers.withLock { $0 } }
    func node(_ index: Int) -> TestServer { servers.withLock { $0[index] } }
    /// Indices of the nodes still running.
    var running: [Int] {
        let stopped = self.stopped.withLock { $0 }
        return nodes.indices.filter { !stopped.contains($0) }
    }

    /// Starts one more node (a late one catches up from the newest snapshot and the log after it); its index.
    @discardableResult
    func startNode() async throws -> Int {
        let store = try await PostgresStore(url: url)
        let server: TestServer
        do {
            server = try await TestServer(store: store, project: project, apiKey: apiKey, configuration: configuration,
                                          onStop: { await store.shutdown() })
        } catch {
            await store.shutdown()
            throw error
        }
        return servers.withLock { servers in
            servers.append(server)
            return servers.count - 1
        }
    }

    /// Stops a node as its process would stop: its streams end, its sessions stay (for their grace) to be
    /// resumed on another node.
    func stop(node index: Int) async {
        guard stopped.withLock({ $0.insert(index).inserted }) else { return }
        await node(index).stop()
    }

    /// Closes the devices it made, stops every node, then the harness's store.
    func stop() async {
        let devices = self.devices.withLock { $0 }
        await withTaskGroup(of: Void.self) { group in
            for device in devices { group.addTask { await device.close() } }
        }
        for index in nodes.indices { await stop(node: index) }
        await admin.shutdown()
    }

    /// A connected manager of node `index`.
    func manager(node index: Int, key: String? = nil, broadcasts: Bool = true, lostTimeout: Double = 2,
                 connections: ConnectionLog? = nil) async throws -> MessageManager {
        try await node(index).manager(key: key, broadcasts: broadcasts, lostTimeout: lostTimeout, connections: connections)
    }

    /// A connected device (a manager whose notices are recorded) of node `index`.
    func device(node index: Int, key: String? = nil, broadcasts: Bool = true, lostTimeout: Double = 2) async throws -> Device {
        let number = devices.withLock { $0.count }
        let device = try await Device.remote(node(index).address, key: key ?? apiKey, broadcasts: broadcasts, lostTimeout: lostTimeout,
                                             name: "node \(index) #\(number)")
        devices.withLock { $0.append(device) }
        return device
    }

    /// A key of a second project (made once).
    func otherProjectKey() async throws -> String {
        let admin = self.admin
        let task = otherKey.withLock { task in
            if let task { return task }
            let made = Task {
                let other = try await admin.createProject(name: "other-app", maxSessions: 100)
                return try await admin.createKey(project: other.id, label: "other", ratePerSecond: 10_000, burst: 10_000).key
            }
            task = made
            return made
        }
        return try await task.value
    }

    // MARK: Metrics

    /// A metric of one node (0 when absent).
    func metric(_ name: String, node index: Int) -> Double { node(index).metric(name) ?? 0 }

    /// A metric summed over every node, stopped ones included.
    func total(_ name: String) -> Double { nodes.reduce(0) { $0 + ($1.metric(name) ?? 0) } }

    /// Waits (at most `seconds`) until every running node has applied `count` more log entries than now:
    /// whatever was due meanwhile (timers included) has happened everywhere.
    @discardableResult
    func waitForLogProgress(_ count: Double = 20, within seconds: Double = 15) async -> Bool {
        let indices = running
        let start = indices.map { metric("sotto_log_entries_applied_total", node: $0) }
        return await eventually(seconds) {
            zip(indices, start).allSatisfy { index, applied in self.metric("sotto_log_entries_applied_total", node: index) >= applied + count }
        }
    }

    // MARK: The log in the database

    /// What the database holds of the replication log.
    struct LogState: Sendable, CustomStringConvertible {
        /// The sequence number of the last entry appended.
        var head: Int64
        /// The first entry still in `exchange_log` (nil when empty) and how many there are.
        var firstEntry: Int64?
        var entries: Int64
        /// The sequence numbers the snapshots were taken after, oldest first.
        var snapshots: [Int64]
        var description: String { "head \(head), entries \(firstEntry.map(String.init) ?? "none")… (\(entries)), snapshots \(snapshots)" }
    }

    /// How long (s, the log's clock) node `id` has appended nothing while others did: beyond the node
    /// timeout, the next entry applied declares it dead.
    func silence(of id: String) async throws -> Double {
        let rows = try await admin.client.query("""
            SELECT (SELECT max(at) FROM exchange_log) - (SELECT max(at) FROM exchange_log WHERE node = \(id))
            """)
        for try await silence in rows.decode(Double?.self) { return silence ?? 0 }
        return 0
    }

    /// The log's state, read in one statement (one consistent view).
    func logState() async throws -> LogState {
        let rows = try await admin.client.query("""
            SELECT (SELECT seq FROM exchange_head WHERE id = 1),
                   (SELECT min(seq) FROM exchange_log),
                   (SELECT count(*) FROM exchange_log),
                   (SELECT coalesce(array_agg(seq ORDER BY seq), '{}'::bigint[]) FROM exchange_snapshot)
            """)
        for try await (head, first, count, snapshots) in rows.decode((Int64, Int64?, Int64, [Int64]).self) {
            return LogState(head: head, firstEntry: first, entries: count, snapshots: snapshots)
        }
        throw TimedOut(what: "a row of the log's state")
    }
}

/// Runs `body` on a fresh cluster and stops the cluster afterwards, whatever happens.
func withCluster(nodes count: Int = 3, configuration: ServiceConfiguration = TestCluster.fastConfiguration,
                 _ body: (TestCluster) async throws -> Void) async throws {
    let cluster = try await TestCluster(nodes: count, configuration: configuration)
    do { try await body(cluster) } catch {
        await cluster.stop()
        throw error
    }
    await cluster.stop()
}

/// A TCP relay on 127.0.0.1 whose target can change, as a load balancer in front of the nodes: a client with
/// one endpoint (RemoteMatcher) reaches another node once its own has gone. Connections already relayed
/// keep their node; new ones go to the current target.
final class SwitchingProxy: Sendable {
    private let listener: any Channel
    private final class State: Sendable {
        let target: Mutex<Int>
        let channels = Mutex<[any Channel]>([])
        init(target: Int) { self.target = Mutex(target) }
    }
    private let state: State
    let port: Int
    var address: MatcherAddress { .tcp(host: "127.0.0.1", port: port) }

    init(to targetPort: Int) async throws {
        let state = State(target: targetPort)
        self.state = state
        listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                state.channels.withLock { $0.append(inbound) }
                let relay = DroppingProxy.Relay()
                let target = state.target.withLock { $0 }
                return inbound.pipeline.addHandler(relay).flatMap {
                    ClientBootstrap(group: inbound.eventLoop)
                        .channelInitializer { outbound in outbound.pipeline.addHandler(DroppingProxy.Relay(peer: inbound)) }
                        .connect(host: "127.0.0.1", port: target)
                        .map { outbound in
                            relay.peer = outbound
                            state.channels.withLock { $0.append(outbound) }
                        }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = listener.localAddress?.port ?? 0
    }

    /// New connections go to `port` from now on.
    func switchTarget(to port: Int) { state.target.withLock { $0 = port } }

    func close() async {
        let channels = state.channels.withLock { channels in
            defer { channels = [] }
            return channels
        }
        for channel in channels { channel.close(promise: nil) }
        try? await listener.close()
    }
}
