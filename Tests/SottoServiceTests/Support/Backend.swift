import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import Synchronization
import Testing

/// Where the behavioural suite runs. The scenarios are written once against `MessageManager`; each backend
/// provides the managers (devices) and, for the services, their metrics.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// Managers sharing one in-process `LocalMatcher` (the embedded core); the two projects are two app ids.
    case embedded
    /// `sotto serve` alone on SQLite.
    case sqlite
    /// `sotto serve` alone on PostgreSQL: a node replicating through the database's log on its own.
    case postgres
    /// Three nodes sharing one PostgreSQL; consecutive devices connect to different nodes.
    case postgresCluster

    var testDescription: String { rawValue }

    /// Starts a fresh exchange of this backend.
    func start() async throws -> Deployment {
        switch self {
        case .embedded: return Deployment(self, .embedded(LocalMatcher()))
        case .sqlite: return Deployment(self, .server(try await TestServer()))
        case .postgres: return Deployment(self, .server(try await TestServer.postgres()))
        case .postgresCluster: return Deployment(self, .cluster(try await TestCluster(nodes: 3)))
        }
    }
}

/// A running exchange of one backend and the devices made on it.
final class Deployment: Sendable {
    enum Kind: Sendable {
        case embedded(LocalMatcher)
        case server(TestServer)
        case cluster(TestCluster)
    }

    let backend: Backend
    let kind: Kind
    private let devices = Mutex<[Device]>([])
    private let otherKey = Mutex<Task<String, any Error>?>(nil)

    init(_ backend: Backend, _ kind: Kind) {
        self.backend = backend
        self.kind = kind
    }

    /// A connected device of the main project, or of a second one (embedded: a second app id). In a
    /// cluster the devices go round the nodes: the first to node 0, the next to node 1, and so on.
    func device(otherProject: Bool = false, broadcasts: Bool = true, lostTimeout: Double = 2) async throws -> Device {
        let number = devices.withLock { $0.count }
        let device: Device
        switch kind {
        case .embedded(let matcher):
            let link = RecordingLink(await matcher.link(appID: otherProject ? "other-app" : "museum-app", broadcasts: broadcasts))
            let manager = MessageManager(link: link, appID: "test", lostTimeout: lostTimeout)
            device = Device(manager: manager, link: link, name: "embedded #\(number)")
            try await manager.connect(timeout: 10)
        case .server(let server):
            let key = otherProject ? try await otherProjectKey(server) : server.apiKey
            device = try await Device.remote(server.address, key: key, broadcasts: broadcasts, lostTimeout: lostTimeout,
                                             name: "\(backend) #\(number)")
        case .cluster(let cluster):
            let key = otherProject ? try await cluster.otherProjectKey() : cluster.apiKey
            device = try await cluster.device(node: number % cluster.nodes.count, key: key, broadcasts: broadcasts, lostTimeout: lostTimeout)
        }
        devices.withLock { $0.append(device) }
        return device
    }

    private func otherProjectKey(_ server: TestServer) async throws -> String {
        let task = otherKey.withLock { task in
            if let task { return task }
            let made = Task { try await server.otherProjectKey() }
            task = made
            return made
        }
        return try await task.value
    }

    /// A metric of the service summed over its nodes; nil for the embedded core, which has none.
    func metric(_ name: String) -> Double? {
        switch kind {
        case .embedded: return nil
        case .server(let server): return server.metric(name) ?? 0
        case .cluster(let cluster): return cluster.total(name)
        }
    }

    /// Closes every device, then stops the service.
    func stop() async {
        let devices = self.devices.withLock { $0 }
        await withTaskGroup(of: Void.self) { group in
            for device in devices { group.addTask { await device.close() } }
        }
        switch kind {
        case .embedded: break
        case .server(let server): await server.stop()
        case .cluster(let cluster): await cluster.stop()
        }
    }
}

/// Runs `body` on a fresh exchange of `backend` and stops it afterwards, whatever happens.
func withDeployment(_ backend: Backend, _ body: (Deployment) async throws -> Void) async throws {
    let deployment = try await backend.start()
    do { try await body(deployment) } catch {
        await deployment.stop()
        throw error
    }
    await deployment.stop()
}
