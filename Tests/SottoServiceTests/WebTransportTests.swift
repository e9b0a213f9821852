import Foundation
import GRPCCore
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Synchronization
import SwiftProtobuf
import ServiceLifecycle
import Logging
import Testing

/// The browser transport (`sotto serve --web`): the exchange's frames on WebSockets, behind the gRPC path's
/// session logic, for keys bound to the page's origin. Real sockets on loopback; the client is NIOWebSocket's.
@Suite(.timeLimit(.minutes(1))) struct WebTransportTests {
    static let page = "https://museum.example"

    @Test func publishOverTheWebIsFoundOverGRPC() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        let subscriber = try await service.server.manager()
        let recorder = EventRecorder()
        let subscription = try await subscriber.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        try await withDeadline(20, "the web session") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                let welcome = try await web.hello(key: webKey)
                #expect(!welcome.sessionID.isEmpty)
                try await web.send(Frames.publish(1, content: exhibit.content))
                let token = try await web.token()
                let status = try await web.next { if case .opStatus(let s) = $0.kind { return s.opID == 1 } else { return false } }
                if case .opStatus(let s) = status.kind { #expect(s.state == .active) }
                await heard(subscriber, token: token)
                #expect(await recorder.waitFound())
                #expect(recorder.found == [exhibit])
            }
        }
        #expect(service.server.metric("sotto_web_connections") != nil)
        let exposition = service.server.metrics.exposition()
        #expect(exposition.contains("sotto_transport_sessions_total{transport=\"web\"} 1"), "the web session counted under its transport")
        #expect(exposition.contains("sotto_transport_sessions_total{transport=\"grpc\"} 1"))
        keep(subscription)
        await subscriber.close(now: 0)
    }

    @Test func publishOverGRPCIsFoundOverTheWeb() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page, "http://127.0.0.1:8080"])
        let publisher = try await service.server.manager()
        let publication = try await publisher.publish(exhibit, now: 0)
        let token = try await token(of: publisher)
        try await withDeadline(20, "the web session") {
            try await WebClient.session(port: service.webPort, origin: "http://127.0.0.1:8080") { web in
                try await web.hello(key: webKey)
                try await web.send(Frames.subscribe(7))
                try await web.send(Frames.observe(token: token))
                let found = try await web.next { if case .found = $0.kind { return true } else { return false } }
                guard case .found(let body) = found.kind else { Issue.record("no Found"); return }
                #expect(body.opID == 7)
                #expect(body.message.namespace == "museum" && body.message.type == "exhibit")
                #expect(Array(body.message.content) == exhibit.content)
                // The page ends its session: the service answers with a normal close.
                try await web.close()
                #expect(try await web.closed().code == .normalClosure)
            }
        }
        keep(publication)
        await publisher.close(now: 0)
    }

    @Test func aKeyOfAnotherOriginOrOfNoneIsRefused() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        for (origin, key, words) in [("https://evil.example", webKey, "may not be used from the origin https://evil.example"),
                                     (nil, webKey, "sent no Origin header"),
                                     (Self.page, service.server.apiKey, "not bound to any web origin")] as [(String?, String, String)] {
            try await withDeadline(20, "the refusal") {
                try await WebClient.session(port: service.webPort, origin: origin) { web in
                    try await web.send(.hello(key: key, clientVersion: "web-test"))
                    let refusal = try await web.next { if case .error = $0.kind { return true } else { return false } }
                    guard case .error(let error) = refusal.kind else { return }
                    #expect(error.fatal)
                    #expect(error.detail == "origin")
                    #expect(error.message.contains(words), "\(error.message)")
                    #expect(try await web.closed().code == .policyViolation)
                }
            }
        }
        #expect(service.server.metric("sotto_web_origin_refused_total") == 3)
        #expect(service.server.metrics.exposition().contains("sotto_transport_sessions_total{transport=\"web\"} 0"), "no web session opened")
        // The same key over gRPC (a native client) is not bound by origins; the service still serves.
        let manager = try await service.server.manager(key: webKey)
        await manager.close(now: 0)
    }

    /// A Hello without a key, or with one the store does not know: one fatal Error, the close (1008), counted as
    /// an authentication failure; the service still serves a page with a good key.
    @Test func aMissingOrUnknownKeyIsRefused() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        for key in ["", "sk_live_not_a_key_of_this_store"] {
            try await withDeadline(20, "the refusal of \(key.isEmpty ? "no key" : "an unknown key")") {
                try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                    try await web.send(.hello(key: key, clientVersion: "web-test"))
                    var errors: [Sotto_Exchange_V1_Error] = []
                    var close: WebSocketErrorCode?
                    while close == nil {
                        switch try await web.event() {
                        case .frame(let frame): if case .error(let error) = frame.kind { errors.append(error) }
                        case .closed(let code, _): close = code
                        }
                    }
                    #expect(errors.count == 1 && errors.first?.fatal == true, "\(errors)")
                    #expect(errors.first?.message.isEmpty == false)
                    #expect(close == .policyViolation)
                }
            }
        }
        #expect(service.server.metric("sotto_authentication_failures_total") == 2)
        let webKey = try await service.key(origins: [Self.page])
        try await withDeadline(20, "a later session") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in try await web.hello(key: webKey) }
        }
    }

    @Test func anOversizedOrMalformedMessageEndsTheSessionWithAClearClose() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        // One message over the limit (sent whole: NIO's decoder refuses its header).
        try await withDeadline(20, "the oversized message") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                try await web.hello(key: webKey)
                try await web.sendRaw(.binary, [UInt8](repeating: 0x0A, count: WebFrames.maxMessageSize + 1))
                #expect(try await web.closed().code == .messageTooLarge)
            }
        }
        // The same in fragments under the limit each.
        try await withDeadline(20, "the fragmented message") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                try await web.hello(key: webKey)
                let fragment = [UInt8](repeating: 0x0A, count: 48 * 1024)
                try await web.sendRaw(.binary, fragment, fin: false)
                try await web.sendRaw(.continuation, fragment, fin: false)
                try await web.sendRaw(.continuation, fragment, fin: true)
                #expect(try await web.closed().code == .messageTooLarge)
            }
        }
        // Bytes that are not a ClientFrame, and text.
        for (opcode, bytes, code) in [(WebSocketOpcode.binary, [0xFF, 0xFF, 0xFF], WebSocketErrorCode.dataInconsistentWithMessage),
                                      (.text, Array("hello".utf8), .unacceptableData)] as [(WebSocketOpcode, [UInt8], WebSocketErrorCode)] {
            try await withDeadline(20, "the malformed message") {
                try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                    try await web.hello(key: webKey)
                    try await web.sendRaw(opcode, bytes)
                    let error = try await web.next { if case .error = $0.kind { return true } else { return false } }
                    if case .error(let body) = error.kind { #expect(body.fatal && body.code == .protocol) }
                    #expect(try await web.closed().code == code)
                }
            }
        }
        #expect((service.server.metric("sotto_frames_too_large_total") ?? 0) >= 2)
        // The service still serves others.
        try await withDeadline(20, "a later session") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in try await web.hello(key: webKey) }
        }
    }

    @Test func aPageThatNeverReadsIsCutOffAndOthersGoOn() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.outbox = Outbox.Limits(frames: 4, bytes: 300_000)
        let service = try await WebTestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        let big = try Message(namespace: "museum", type: "exhibit", content: [UInt8](repeating: 0x5A, count: 102_400))
        let publisherClient = try RawClient(service.server.address)
        defer { Task { await publisherClient.close() } }
        let publisher = RawSession(publisherClient)
        #expect(await publisher.hello(key: service.server.apiKey) != nil)
        guard let token = await publisher.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { Issue.record("no token"); return }
        publisher.send(Frames.publish(1, content: big.content))
        #expect(await publisher.status(1)?.state == .active)
        // A reader that keeps up paces the found/lost toggles.
        let reader = try await service.server.manager(lostTimeout: 30)
        let recorder = EventRecorder()
        let subscription = try await reader.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: recorder.handler)
        await heard(reader, token: token)
        #expect(await recorder.waitFound())
        let steps = try await withDeadline(40, "the cut-off") {
            var steps = 0
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                try await web.hello(key: webKey)
                try await web.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
                try await web.send(Frames.observe(token: token))
                // The page reads nothing from here on: 100 KiB found/lost events pile up until it is cut off.
                while service.server.metric("sotto_cut_off_total") ?? 0 < 1 && steps < 300 {
                    let before = recorder.all.count
                    publisher.send(steps % 2 == 0 ? Frames.unpublish(1) : Frames.publish(1, content: big.content))
                    steps += 1
                    guard await recorder.wait(5, until: { $0.count > before }) else { Issue.record("the reader stopped at step \(steps)"); break }
                }
                #expect(service.server.metric("sotto_cut_off_total") == 1, "the page that never read was cut off after \(steps) events")
                // What it finds when it reads at last: what was sent before, then the end of the socket.
                _ = try? await web.closed()
            }
            return steps
        }
        // The reader keeps receiving.
        let before = recorder.all.count
        publisher.send(steps % 2 == 0 ? Frames.unpublish(1) : Frames.publish(1, content: big.content))
        #expect(await recorder.wait(5, until: { $0.count > before }))
        publisher.cancel()
        keep(subscription)
        await reader.close(now: 0)
    }

    @Test func aSocketThatNeverSaysHelloIsClosed() async throws {
        var limits = TransportLimits()
        limits.helloTimeout = 0.5
        let service = try await WebTestServer(limits: limits)
        defer { Task { await service.stop() } }
        try await withDeadline(20, "the Hello time-out") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                // The Hello timeout (0.5 s here) passes without a frame.
                let (code, reason) = try await web.closed()
                #expect(code != .normalClosure && reason.contains("Hello"), "\(code) \(reason)")
            }
        }
        #expect(service.server.metric("sotto_hello_timeouts_total") == 1)
    }

    @Test func overTLSAndOnlyOverTLSBeyondLoopback() async throws {
        let directory = try temporaryDirectory()
        let (certificate, privateKey) = try selfSignedCertificate(in: directory)
        let store = try SQLiteStore(path: directory + "/refused.sqlite")
        #expect {
            _ = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store,
                                  web: WebOptions(endpoint: .tcp(host: "0.0.0.0", port: 0)))
        } throws: { error in
            guard case MatcherServerError.tlsRequired(let address)? = error as? MatcherServerError else { return false }
            return address == "0.0.0.0:0"
        }
        let service = try await WebTestServer(tls: MatcherServer.TLS(certificateChain: certificate, privateKey: privateKey))
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        try await withDeadline(20, "a session over TLS") {
            try await WebClient.session(port: service.webPort, origin: Self.page, trusting: certificate) { web in
                let welcome = try await web.hello(key: webKey)
                #expect(!welcome.sessionID.isEmpty)
            }
        }
        // Plaintext to the TLS listener gets no WebSocket.
        await #expect(throws: (any Error).self) {
            try await withDeadline(20, "a plaintext upgrade") {
                try await WebClient.session(port: service.webPort, origin: Self.page) { _ in }
            }
        }
    }

    @Test func theKeysRateLimitAppliesOnTheWeb() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        let slowKey = try await service.key(origins: [Self.page], rate: 0.2, burst: 2)
        try await withDeadline(20, "the rate limit") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { web in
                try await web.hello(key: slowKey)
                for op in 1...6 { try await web.send(Frames.subscribe(UInt32(op))) }
                let limited = try await web.next { frame in
                    if case .opStatus(let s) = frame.kind { return s.state == .rejected && s.error == .rateLimited }
                    if case .error(let e) = frame.kind { return e.code == .rateLimited }
                    return false
                }
                #expect(limited.kind != nil)
            }
        }
        #expect((service.server.metric("sotto_rate_limited_total") ?? 0) >= 1)
    }

    /// Runs a service with a web listener in a service group as `sotto serve` does (no signals: the test triggers the
    /// shutdown) and returns once the web listener is up (the gRPC listener may not be bound yet), with its port.
    static func serveWithWebListener(store: SQLiteStore) async throws -> (ServiceGroup, Task<Void, any Error>, Int) {
        let (bound, continuation) = AsyncStream.makeStream(of: String.self)
        let web = WebOptions(endpoint: .tcp(host: "127.0.0.1", port: 0)) { address in
            continuation.yield(address)
            continuation.finish()
        }
        let server = try MatcherServer(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store,
                                       configuration: TestServer.fastConfiguration, web: web) { _, _ in }
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        let address = try await withDeadline(10, "the web listener") { () -> String? in
            for await address in bound { return address }
            return nil
        }
        return (group, running, try #require(address?.split(separator: ":").last.flatMap { Int($0) }))
    }

    /// A graceful shutdown (SIGINT or SIGTERM, through the service group as `sotto serve` runs it) with the web
    /// listener up and a page's session open ends the service without an error, whichever of the gRPC server
    /// and the web listener ends first. (The end-to-end page test once saw `sotto serve` exit 2 there: the gRPC
    /// server ended first and the web listener's cancelled accept loop threw CancellationError.)
    @Test func aGracefulShutdownWithPagesConnectedEndsWithoutAnError() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let project = try await store.createProject(name: "museum-app", maxSessions: 100)
        let webKey = try await store.createKey(project: project.id, label: "page", ratePerSecond: 10_000, burst: 10_000, origins: [Self.page]).key
        for round in 0..<6 {
            let (group, running, port) = try await Self.serveWithWebListener(store: store)
            // Round by round, the page's session is told of the shutdown at a different point of it.
            try await withDeadline(20, "the page's session through the shutdown") {
                try await WebClient.session(port: port, origin: Self.page) { page in
                    try await page.hello(key: webKey)
                    if round % 2 == 1 { try await Task.sleep(for: .milliseconds(20 * round)) }
                    await group.triggerGracefulShutdown()
                    let end = try await page.next { if case .error = $0.kind { return true } else { return false } }
                    if case .error(let body) = end.kind { #expect(body.code == .unavailable, "round \(round): \(body)") }
                }
            }
            await #expect(throws: Never.self, "round \(round): the service ends without an error") {
                try await withDeadline(20, "the service to end") { try await running.value; return true }
            }
        }
    }

    /// A graceful shutdown as soon as the web listener is up, when the gRPC listener may not be bound yet (a
    /// signal right at the start of `sotto serve`), also ends the service without an error. (CI once saw
    /// "the listener closed before it was bound" from the round above that shuts down at once.)
    @Test func aShutdownBeforeTheGRPCListenerIsBoundEndsWithoutAnError() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        for round in 0..<20 {
            let (group, running, _) = try await Self.serveWithWebListener(store: store)
            await group.triggerGracefulShutdown()
            await #expect(throws: Never.self, "round \(round): the service ends without an error") {
                try await withDeadline(20, "the service to end") { try await running.value; return true }
            }
        }
    }

    /// `--max-connections-per-address` holds on the web listener as on the gRPC one: a third connection from
    /// 127.0.0.1 under a cap of two is closed at once (and counted), and gets in once one has gone; a connection
    /// that never sends its request is closed after the request time-out (it no longer holds its place).
    @Test func theConnectionCapPerAddressAppliesOnTheWeb() async throws {
        var limits = TransportLimits()
        limits.maxConnectionsPerAddress = 2
        limits.httpRequestTimeout = 1
        let service = try await WebTestServer(limits: limits)
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        try await withDeadline(20, "the capped sessions") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { first in
                try await first.hello(key: webKey)
                try await WebClient.session(port: service.webPort, origin: Self.page) { second in
                    try await second.hello(key: webKey)
                    await #expect(throws: (any Error).self, "a third connection from the address is refused") {
                        try await WebClient.session(port: service.webPort, origin: Self.page) { third in try await third.hello(key: webKey) }
                    }
                }
                // The second has gone: there is room again (the listener sees the close soon after).
                var admitted = false
                for _ in 0..<50 where !admitted {
                    admitted = (try? await WebClient.session(port: service.webPort, origin: Self.page) { again in try await again.hello(key: webKey) }) != nil
                    if !admitted { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(admitted)
            }
        }
        #expect((service.server.metric("sotto_connections_refused_total") ?? 0) >= 1)
        // A connection that says nothing is closed after httpRequestTimeout (1 s here). The listener may not have
        // seen the last session's close yet, and the cap of two would refuse this one at once (the clean-clone run
        // of 2026-11-28 did: closed after 0.087 s): opened again until the cap is not what ends it.
        try await withDeadline(20, "the silent connection's end") {
            while true {
                let refused = service.server.metric("sotto_connections_refused_total") ?? 0
                let silent = try await ClientBootstrap(group: .singletonMultiThreadedEventLoopGroup).connect(host: "127.0.0.1", port: service.webPort) { channel in
                    channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
                }
                try await silent.executeThenClose { inbound, _ in
                    for try await _ in inbound {}
                }
                if (service.server.metric("sotto_connections_refused_total") ?? 0) == refused { break }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(await eventually(5) { service.server.metric("sotto_http_timeouts_total") == 1 })
    }

    /// The gRPC and web listeners share one connection budget (the process's descriptors): under a cap of two per
    /// address, a gRPC session and a page's session fill it, a second page is refused, and gets in once the gRPC
    /// client has gone.
    @Test func gRPCAndWebConnectionsCountAgainstOneCap() async throws {
        var limits = TransportLimits()
        limits.maxConnectionsPerAddress = 2
        let service = try await WebTestServer(limits: limits)
        defer { Task { await service.stop() } }
        let webKey = try await service.key(origins: [Self.page])
        let manager = try await service.server.manager()
        try await withDeadline(20, "the shared cap") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { first in
                try await first.hello(key: webKey)
                await #expect(throws: (any Error).self, "a page beyond the gRPC connection and the first page is refused") {
                    try await WebClient.session(port: service.webPort, origin: Self.page) { second in try await second.hello(key: webKey) }
                }
                await manager.close(now: 0)
                var admitted = false
                for _ in 0..<50 where !admitted {
                    admitted = (try? await WebClient.session(port: service.webPort, origin: Self.page) { again in try await again.hello(key: webKey) }) != nil
                    if !admitted { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(admitted, "room again once the gRPC client has gone")
            }
        }
        #expect((service.server.metric("sotto_connections_refused_total") ?? 0) >= 1)
    }

    /// A session refused for its project's session quota gets one fatal Error frame (quota exceeded), then the
    /// close: not a second Error for the same end.
    @Test func aRefusedSessionQuotaEndsWithOneFatalError() async throws {
        let service = try await WebTestServer()
        defer { Task { await service.stop() } }
        let kiosk = try await service.server.store.createProject(name: "kiosk", maxSessions: 1)
        let key = try await service.server.store.createKey(project: kiosk.id, label: "page", ratePerSecond: 100, burst: 100, origins: [Self.page]).key
        try await withDeadline(20, "the refused session") {
            try await WebClient.session(port: service.webPort, origin: Self.page) { first in
                try await first.hello(key: key)
                try await WebClient.session(port: service.webPort, origin: Self.page) { second in
                    try await second.send(.hello(key: key, clientVersion: "web-test"))
                    var errors: [Sotto_Exchange_V1_Error] = []
                    var close: WebSocketErrorCode?
                    while close == nil {
                        switch try await second.event() {
                        case .frame(let frame): if case .error(let error) = frame.kind { errors.append(error) }
                        case .closed(let code, _): close = code
                        }
                    }
                    #expect(errors.count == 1, "\(errors)")
                    #expect(errors.first?.fatal == true && errors.first?.code == .quotaExceeded, "\(errors)")
                    #expect(close == .policyViolation)
                }
            }
        }
    }

    @Test func thePageAndTheModemAreServedAndNothingElse() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let page = try WebPage(directory: root.appendingPathComponent("bindings/web").path, modem: root.appendingPathComponent("bindings/js").path)
        let service = try await WebTestServer(page: page)
        defer { Task { await service.stop() } }
        let (status, headers, body) = try await WebClient.get(port: service.webPort, path: "/")
        #expect(status == 200)
        #expect(headers.first(name: "content-type")?.hasPrefix("text/html") == true)
        #expect(headers.first(name: "content-security-policy")?.contains("script-src 'self'") == true)
        #expect(String(decoding: body, as: UTF8.self).contains("<script type=\"module\" src=\"app.js\">"))
        let wasm = try await WebClient.get(port: service.webPort, path: "/sotto/sotto.wasm")
        #expect(wasm.0 == 200 && wasm.1.first(name: "content-type") == "application/wasm")
        #expect(Array(wasm.2.prefix(4)) == [0x00, 0x61, 0x73, 0x6D], "a WebAssembly module")
        for path in ["/../Package.swift", "/sotto/../../Package.swift", "/sotto/package.json", "/nothing"] {
            #expect(try await WebClient.get(port: service.webPort, path: path).0 == 404, "\(path)")
        }
        #expect(try await WebClient.get(port: service.webPort, path: "/session").0 == 400, "the WebSocket's path without an upgrade")
    }

    @Test func originsAreNormalisedAndCheckedWhenAKeyIsMade() async throws {
        #expect(try WebOrigin.normalize("HTTPS://Museum.Example:443/") == "https://museum.example")
        #expect(try WebOrigin.normalize("http://127.0.0.1:8080") == "http://127.0.0.1:8080")
        #expect(try WebOrigin.normalize("http://[::1]:8080") == "http://[::1]:8080")
        #expect(try WebOrigin.normalize("https://xn--bcher-kva.example") == "https://xn--bcher-kva.example")
        for bad in ["museum.example", "ftp://a.example", "https://a.example/path", "https://user@a.example", "https://a.example?q", "https://a .example", "https://",
                    // percent escapes in the host: decoded, one made an origin with a space that normalised to another
                    // (found by FuzzWebFrames), one names another host
                    "http://a%20b", "https://museum%2Eexample", "http://a%2Fb", "http://[zz]", "http://[]"] {
            #expect(throws: StoreError.self, "\(bad)") { try WebOrigin.normalize(bad) }
        }
        #expect(WebOrigin.allows("https://MUSEUM.example", ["https://museum.example"]))
        #expect(!WebOrigin.allows("https://museum.example.evil", ["https://museum.example"]))
        #expect(!WebOrigin.allows("null", ["https://museum.example"]))
        let directory = try temporaryDirectory()
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let project = try await store.createProject(name: "p", maxSessions: 10)
        let (record, _) = try await store.createKey(project: project.id, label: "page", ratePerSecond: 1, burst: 1,
                                                    origins: ["https://A.example", "https://a.example:443"])
        #expect(record.origins == ["https://a.example"])
        #expect(try await store.key(id: record.id)?.origins == ["https://a.example"], "kept by the store")
        await #expect(throws: StoreError.self) {
            _ = try await store.createKey(project: project.id, label: "x", ratePerSecond: 1, burst: 1, origins: ["javascript:alert(1)"])
        }
    }
}

/// A service with the web transport on loopback (and its gRPC listener), keys made on demand.
final class WebTestServer: Sendable {
    let server: TestServer
    let webPort: Int

    init(page: WebPage? = nil, configuration: ServiceConfiguration = TestServer.fastConfiguration, tls: MatcherServer.TLS? = nil,
         limits: TransportLimits = TransportLimits()) async throws {
        let (bound, continuation) = AsyncStream.makeStream(of: String.self)
        server = try await TestServer(tls: tls, configuration: configuration, web: WebOptions(endpoint: .tcp(host: "127.0.0.1", port: 0), page: page) { address in
            continuation.yield(address)
            continuation.finish()
        }, limits: limits)
        let address = try await withDeadline(10, "the web listener") { () -> String? in
            for await address in bound { return address }
            return nil
        }
        guard let address, let port = address.split(separator: ":").last.flatMap({ Int($0) }) else { throw TimedOut(what: "the web address") }
        webPort = port
    }

    /// A key of the server's project bound to `origins`.
    func key(origins: [String], rate: Double = 10_000, burst: Double = 10_000) async throws -> String {
        try await server.store.createKey(project: server.project.id, label: "page", ratePerSecond: rate, burst: burst, origins: origins).key
    }

    func stop() async { await server.stop() }
}

/// A WebSocket client of the web transport (NIOWebSocket), for one task.
final class WebClient {
    enum Event { case frame(ServerFrame), closed(WebSocketErrorCode, String) }
    private var inbound: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator
    private let outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>
    private var closeFrame: (code: WebSocketErrorCode, reason: String)?

    private init(inbound: NIOAsyncChannelInboundStream<WebSocketFrame>, outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>) {
        self.inbound = inbound.makeAsyncIterator()
        self.outbound = outbound
    }

    private enum Upgrade: Sendable { case webSocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>), refused }

    /// Opens a WebSocket at /session with this `Origin` header, runs `body` on it, closes it.
    /// With `trusting` (a PEM certificate), over TLS to `localhost` verified against it.
    static func session(port: Int, origin: String?, trusting: String? = nil, _ body: (WebClient) async throws -> Void) async throws {
        let sslContext = try trusting.map { file -> NIOSSLContext in
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(file))
            configuration.applicationProtocols = ["http/1.1"]
            return try NIOSSLContext(configuration: configuration)
        }
        let upgrade: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: .singletonMultiThreadedEventLoopGroup)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: sslContext, serverHostname: "localhost"))
                    }
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(maxFrameSize: 1 << 20, upgradePipelineHandler: { channel, _ in
                        channel.eventLoop.makeCompletedFuture { .webSocket(try NIOAsyncChannel(wrappingChannelSynchronously: channel)) }
                    })
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: "127.0.0.1:\(port)")
                    if let origin { headers.add(name: "Origin", value: origin) }
                    let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/session", headers: headers)
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration(upgradeRequestHead: head, upgraders: [upgrader],
                                                                               notUpgradingCompletionHandler: { $0.eventLoop.makeSucceededFuture(.refused) })
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: .init(upgradeConfiguration: configuration))
                }
            }
        guard case .webSocket(let socket) = try await upgrade.get() else { throw TimedOut(what: "a WebSocket upgrade (refused)") }
        try await socket.executeThenClose { inbound, outbound in
            try await body(WebClient(inbound: inbound, outbound: outbound))
        }
    }

    func send(_ frame: ClientFrame) async throws { try await sendRaw(.binary, try frame.serializedBytes()) }

    func sendRaw(_ opcode: WebSocketOpcode, _ bytes: [UInt8], fin: Bool = true) async throws {
        try await outbound.write(WebSocketFrame(fin: fin, opcode: opcode, maskKey: .random(), data: ByteBuffer(bytes: bytes)))
    }

    /// Sends a close message (normal closure).
    func close() async throws {
        var data = ByteBuffer()
        data.write(webSocketErrorCode: .normalClosure)
        try await outbound.write(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: data))
    }

    /// The next server frame or the close.
    func event() async throws -> Event {
        while let message = try await inbound.next(isolation: #isolation) {
            switch message.opcode {
            case .binary: return .frame(try ServerFrame(serializedBytes: Array(message.unmaskedData.readableBytesView)))
            case .connectionClose:
                var data = message.unmaskedData
                let code = data.readWebSocketErrorCode() ?? .unknown(1005)
                return .closed(code, data.readString(length: data.readableBytes) ?? "")
            default: continue
            }
        }
        return .closed(.unknown(1006), "the connection ended")
    }

    /// The first frame matching `predicate` (earlier ones skipped); throws if the socket closes first.
    func next(where predicate: (ServerFrame) -> Bool) async throws -> ServerFrame {
        while true {
            switch try await event() {
            case .frame(let frame): if predicate(frame) { return frame }
            case .closed(let code, let reason):
                closeFrame = (code, reason)
                throw WebClosed(code: code, reason: reason)
            }
        }
    }

    /// How the service closed the socket (frames before it skipped).
    func closed() async throws -> (code: WebSocketErrorCode, reason: String) {
        if let closeFrame { return closeFrame }
        while true {
            if case .closed(let code, let reason) = try await event() { return (code, reason) }
        }
    }

    @discardableResult
    func hello(key: String) async throws -> Sotto_Exchange_V1_Welcome {
        try await send(.hello(key: key, clientVersion: "web-test"))
        let frame = try await next { if case .welcome = $0.kind { return true } else { return false } }
        guard case .welcome(let welcome) = frame.kind else { throw TimedOut(what: "a Welcome") }
        return welcome
    }

    /// The session's token (its first TokenDirective).
    func token() async throws -> [UInt8] {
        let frame = try await next { if case .token = $0.kind { return true } else { return false } }
        guard case .token(let body) = frame.kind else { throw TimedOut(what: "a token") }
        return Array(body.token)
    }

    /// One HTTP GET on the web listener: status, headers, body.
    static func get(port: Int, path: String) async throws -> (Int, HTTPHeaders, [UInt8]) {
        let channel = try await ClientBootstrap(group: .singletonMultiThreadedEventLoopGroup).connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHTTPClientHandlers()
                return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
            }
        }
        return try await channel.executeThenClose { inbound, outbound in
            var headers = HTTPHeaders()
            headers.add(name: "Host", value: "127.0.0.1:\(port)")
            try await outbound.write(.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)))
            try await outbound.write(.end(nil))
            var status = 0, responseHeaders = HTTPHeaders(), body: [UInt8] = []
            for try await part in inbound {
                switch part {
                case .head(let head): status = Int(head.status.code); responseHeaders = head.headers
                case .body(let buffer): body += Array(buffer.readableBytesView)
                case .end: return (status, responseHeaders, body)
                }
            }
            return (status, responseHeaders, body)
        }
    }
}

/// The service closed the WebSocket before the frame a test waited for.
struct WebClosed: Error, CustomStringConvertible {
    let code: WebSocketErrorCode
    let reason: String
    var description: String { "the service closed the WebSocket (\(code)): \(reason)" }
}
