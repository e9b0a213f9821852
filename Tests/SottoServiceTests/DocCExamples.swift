import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeLoad
import SottoExchangeService
import SottoExchangeWire
import Testing

/// The worked examples of the SottoExchangeService, SottoExchangeLoad, SottoExchangeClient and
/// SottoExchangeWire catalogs, compiled (and the service, load and wire ones run) here; `DocCExampleTests`
/// (SottoCLITests) checks that each catalog shows its example exactly as written here.
@Suite(.timeLimit(.minutes(2))) struct DocCExamples {
    /// SottoExchangeService.md, then SottoExchangeLoad.md against it.
    @Test func serviceAndLoad() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A service on loopback with its store in SQLite: a project, and an API key for it (shown once).
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let project = try await store.createProject(name: "museum", maxSessions: 1_000)
        let key = try await store.createKey(project: project.id, label: "guide app", ratePerSecond: 5_000, burst: 5_000).key
        let (listening, announce) = AsyncStream.makeStream(of: String.self)
        let server = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store) { service, _ in
            announce.yield(service)  // "127.0.0.1:PORT": port 0 takes a free one
        }
        let running = Task { try await server.run() }  // until cancelled: then it drains and ends
        var iterator = listening.makeAsyncIterator()
        let address = try MatcherAddress(parsing: try #require(await iterator.next()))

        // 10 simulated devices in clusters of 5 report 100 sightings a second for 1 s.
        var configuration = ServiceLoad.Configuration(address: address, apiKey: key)
        configuration.sessions = 10
        configuration.sightingsPerSecond = 100
        configuration.duration = 1
        let report = try await ServiceLoad.run(configuration)
        print(report)  // sessions held, sightings per second, found latency (median, 99th percentile)
        running.cancel()
        _ = try? await running.value
        #expect(report.sessionsOpen == 10 && report.found > 0, "\(report)")
    }

    /// SottoExchangeClient.md (compiled: it needs a service at matcher.example.org).
    func client(key: String) async throws {
        // TLS (the system's roots): plaintext beyond loopback is refused unless `options.insecure` is set.
        let options = RemoteMatcher.Options(endpoints: [try MatcherAddress(parsing: "sottos://matcher.example.org:7457")],
                                            apiKey: key, tls: .init())
        let manager = MessageManager(link: try RemoteMatcher(options: options), appID: "museum-guide")
        try await manager.connect(timeout: 10)
        let filter = try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])
        // With a link the service keeps the time: `now` is ignored (give 0).
        let subscription = try await manager.subscribe(filter: filter, now: 0) { event in print(event) }
        try await Task.sleep(for: .seconds(600))
        await subscription.cancel()
        await manager.close(now: 0)
    }

    /// SottoExchangeWire.md: addresses, and the first contact `sotto` makes before its client connects.
    @Test func wire() async throws {
        let tls = try MatcherAddress(parsing: "sottos://matcher.example.org:7457")
        let local = try MatcherAddress(parsing: "unix:/run/sotto/exchange.sock")
        print(tls, tls.isLocal, local.isLocal)  // matcher.example.org:7457 false true
        // Port 9 (discard) on loopback: nobody listens there on a usual machine.
        let outcome = await EndpointProbe.probe(try MatcherAddress(parsing: "127.0.0.1:9"), greeting: .grpc(tls: false), connectTimeout: 2)
        print(outcome)  // 127.0.0.1:9 refused the connection: nothing listens there
        #expect(!tls.isLocal && local.isLocal && !outcome.isReachable)
    }
}
