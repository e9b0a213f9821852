import Foundation
import GRPCCore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import Testing

/// A self-signed certificate for localhost and 127.0.0.1 (PEM files in `directory`).
func selfSignedCertificate(in directory: String) throws -> (certificate: String, key: String) {
    let certificate = directory + "/cert.pem", key = directory + "/key.pem"
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
    process.arguments = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out", certificate]
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw TimedOut(what: "openssl (exit \(process.terminationStatus))") }
    return (certificate, key)
}

@Suite(.timeLimit(.minutes(1))) struct TransportTests {
    @Test func tlsEndToEndAndPlaintextRefused() async throws {
        let directory = try temporaryDirectory()
        let (certificate, key) = try selfSignedCertificate(in: directory)
        let service = try await TestServer(tls: MatcherServer.TLS(certificateChain: certificate, privateKey: key))
        defer { Task { await service.stop() } }

        func secureManager() async throws -> MessageManager {
            let link = try RemoteMatcher(options: .init(endpoint: .tcp(host: "localhost", port: service.port), apiKey: service.apiKey,
                                                         tls: .init(trustRoots: certificate)))
            let manager = MessageManager(link: link, lostTimeout: 2)
            try await manager.connect(timeout: 5)
            return manager
        }
        let a = try await secureManager()
        let b = try await secureManager()
        let publication = try await a.publish(exhibit, now: 0)
        let recorder = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        await heard(b, token: try await token(of: a))
        #expect(await recorder.waitFound())
        #expect(recorder.found == [exhibit])

        // Plaintext to the TLS port does not connect.
        let plain = MessageManager(link: try RemoteMatcher(options: .init(endpoint: .tcp(host: "127.0.0.1", port: service.port), apiKey: service.apiKey)))
        await #expect(throws: ExchangeError.self) { try await plain.connect(timeout: 3) }
        await plain.close(now: 0)
        keep(publication, subscription)
        await a.close(now: 0)
        await b.close(now: 0)
    }

    @Test func tlsIsRequiredBeyondLoopback() throws {
        let directory = try temporaryDirectory()
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        #expect {
            _ = try MatcherServer(endpoint: .tcp(host: "0.0.0.0", port: 0), tls: nil, store: store)
        } throws: { error in
            guard case MatcherServerError.tlsRequired(let address)? = error as? MatcherServerError else { return false }
            return address == "0.0.0.0:0"
        }
        #expect(throws: MatcherServerError.self) {
            _ = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store,
                                  metricsEndpoint: .tcp(host: "0.0.0.0", port: 0))
        }
        #expect(throws: Never.self) { _ = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store) }
        #expect(throws: Never.self) { _ = try MatcherServer(endpoint: .unix(path: directory + "/s.sock"), tls: nil, store: store) }
    }

    @Test func httpStatusEndpoint() async throws {
        let service = try await TestServer(metricsEndpoint: .tcp(host: "127.0.0.1", port: 0))
        defer { Task { await service.stop() } }
        let manager = try await service.manager()
        guard let http = service.httpAddress else { Issue.record("no HTTP address"); return }
        let session = URLSession(configuration: .ephemeral)
        func get(_ path: String) async throws -> (Int, String) {
            var request = URLRequest(url: URL(string: "http://\(http)\(path)")!)
            request.timeoutInterval = 5
            let (data, response) = try await session.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? -1, String(decoding: data, as: UTF8.self))
        }
        let ready = try await get("/ready")
        #expect(ready.0 == 200)
        let health = try await get("/health")
        #expect(health.0 == 200)
        let metrics = try await get("/metrics")
        #expect(metrics.0 == 200)
        #expect(metrics.1.contains("sotto_sessions"))
        #expect(metric("sotto_sessions", in: metrics.1) == 1, "one session open: \(metrics.1)")
        let missing = try await get("/nothing")
        #expect(missing.0 == 404)
        await manager.close(now: 0)
    }
}

/// What a cancelled server leaves behind, and streams that never say Hello.
@Suite(.timeLimit(.minutes(1))) struct LifecycleTests {
    @Test
    func cancelledServerClosesItsHTTPEndpoint() async throws {
        let service = try await TestServer(metricsEndpoint: .tcp(host: "127.0.0.1", port: 0))
        guard let http = service.httpAddress else { Issue.record("no HTTP address"); return }
        let session = URLSession(configuration: .ephemeral)
        var request = URLRequest(url: URL(string: "http://\(http)/health")!)
        request.timeoutInterval = 2
        let (_, response) = try await session.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        await service.stop()
        try await Task.sleep(for: .milliseconds(200))
        await #expect(throws: (any Error).self, "the HTTP endpoint is closed with the server") {
            _ = try await session.data(for: request)
        }
    }

    /// A Hello timer of 0.5 s (`TransportLimits.helloTimeout`, 5 s by default).
    static var shortHelloTimeout: TransportLimits {
        var limits = TransportLimits()
        limits.helloTimeout = 0.5
        return limits
    }

    @Test func streamWithoutHelloIsClosedAfterTheHelloTimeout() async throws {
        let service = try await TestServer(limits: Self.shortHelloTimeout)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let mute = RawSession(client, heartbeats: false)
        let end = await mute.end(10)
        guard case .some(.some(let error)) = end else { Issue.record("a stream without Hello stayed open: \(String(describing: end))"); return }
        #expect((error as? RPCError)?.code == .deadlineExceeded)
        #expect(mute.frames.isEmpty)
        #expect(service.metric("sotto_hello_timeouts_total") == 1)
    }

    /// The Hello timer stops at the Hello: a session that said Hello in time is not closed at the deadline, and the
    /// timer counts nothing.
    @Test func aStreamThatSaidHelloOutlivesTheHelloTimeout() async throws {
        let service = try await TestServer(limits: Self.shortHelloTimeout)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let session = RawSession(client)
        #expect(await session.hello(key: service.apiKey) != nil)
        try await Task.sleep(for: .seconds(1.5))  // three deadlines
        #expect(session.ended == nil)
        #expect(await session.settled())
        #expect(service.metric("sotto_hello_timeouts_total") == 0)
    }
}

@Suite struct StoreTests {
    @Test func fullDiskFailsWritesNotReads() async throws {
        let directory = try temporaryDirectory()
        let store = try SQLiteStore(path: directory + "/exchange.sqlite", maxPages: 24)
        let project = try await store.createProject(name: "first", maxSessions: 10)
        let (_, key) = try await store.createKey(project: project.id, label: "k", ratePerSecond: 5, burst: 5)
        var failure: StoreError?
        var failedName = ""
        for i in 0..<2_000 {
            let name = "project-\(i)-" + String(repeating: "x", count: 80)
            do {
                _ = try await store.createProject(name: name, maxSessions: 10)
            } catch {
                failure = error
                failedName = name
                break
            }
        }
        guard case .unavailable? = failure else { Issue.record("writes never failed, or failed otherwise: \(String(describing: failure))"); return }
        let authenticated = try await APIKeys.authenticate(key, in: store)
        #expect(authenticated?.project == project)
        #expect(authenticated?.ratePerSecond == 5)
        // Still full, still typed; the failed write left nothing behind.
        await #expect(throws: StoreError.self) { _ = try await store.createProject(name: failedName, maxSessions: 1) }
        #expect(try await store.project(id: failedName) == nil)
        #expect(try await store.projects().count > 1)
    }
}
