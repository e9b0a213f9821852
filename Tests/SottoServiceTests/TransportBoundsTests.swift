import Synchronization
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GRPCCore
import SottoExchangeWire
import Testing
@testable import SottoExchangeService

/// The pure cores of the transport's bounds: who gets a connection, where gRPC messages start, how many
/// streams may wait for their Hello.
@Suite struct TransportCoreTests {
    @Test func aFullTableEvictsTheOldestIdleConnectionOrRefuses() {
        var table = ConnectionTable(maxConnections: 3, maxPerAddress: 2)
        #expect(table.arrive(address: "10.0.0.1") == .admit(1))
        #expect(table.arrive(address: "10.0.0.1") == .admit(2))
        // The address is full: its oldest idle connection (1) makes room.
        #expect(table.arrive(address: "10.0.0.1") == .admitEvicting(3, evict: 1))
        table.streamOpened(2)
        table.streamOpened(3)
        // Both of its connections are busy now: refused.
        #expect(table.arrive(address: "10.0.0.1") == .refuse(.addressFull(2)))
        #expect(table.arrive(address: "10.0.0.2") == .admit(4))
        // The node is full (3): the oldest idle one anywhere (4) goes.
        #expect(table.arrive(address: nil) == .admitEvicting(5, evict: 4))
        table.streamOpened(5)
        #expect(table.arrive(address: "10.0.0.3") == .refuse(.full(3)))
        table.streamClosed(2)
        #expect(table.arrive(address: "10.0.0.3") == .admitEvicting(6, evict: 2))
        // Closing twice (evicted, then its close seen) counts once.
        table.close(6)
        table.close(6)
        #expect(table.count == 2)
        #expect(table.perAddress == ["10.0.0.1": 1])
    }

    @Test func connectionsIdlePastTheDeadlineExpire() {
        var table = ConnectionTable(maxConnections: 10, maxPerAddress: 10)
        _ = table.arrive(address: "a", now: 0)   // 1: never a stream
        _ = table.arrive(address: "a", now: 1)   // 2: a stream, still open
        _ = table.arrive(address: "a", now: 2)   // 3: a stream, closed at 8
        table.streamOpened(2)
        table.streamOpened(3)
        table.streamClosed(3, now: 8)
        #expect(table.expireIdle(before: 5) == [1])
        #expect(table.expireIdle(before: 8) == [])
        #expect(table.expireIdle(before: 9) == [3])
        #expect(table.count == 1)
    }

    @Test func theDescriptorLimitLowersTheConnectionCap() {
        var limits = TransportLimits()
        limits.maxConnections = 4_096
        limits.reservedDescriptors = 64
        #expect(limits.effectiveMaxConnections(descriptorLimit: 1_024) == 960)
        #expect(limits.effectiveMaxConnections(descriptorLimit: 1 << 20) == 4_096)
        #expect(limits.effectiveMaxConnections(descriptorLimit: 10) == 1)
    }

    @Test func messagePrefixesAreFoundAcrossPieces() {
        func prefix(_ length: Int) -> [UInt8] { [0, UInt8(length >> 24 & 0xff), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)] }
        var scanner = MessageLengthScanner(limit: 100)
        let body = prefix(3) + [1, 2, 3] + prefix(100) + [UInt8](repeating: 7, count: 100) + prefix(0) + prefix(101) + [9]
        // Fed one byte at a time, and all at once: the same answer, at the same place.
        var found: Int?
        var at = -1
        for (index, byte) in body.enumerated() where found == nil {
            found = scanner.scan([byte])
            at = index
        }
        #expect(found == 101)
        #expect(at == body.count - 2, "found at the last byte of its prefix")
        var whole = MessageLengthScanner(limit: 100)
        #expect(whole.scan(body) == 101)
        var fine = MessageLengthScanner(limit: 100)
        #expect(fine.scan(prefix(100) + [UInt8](repeating: 0, count: 60)) == nil)
        #expect(fine.scan([UInt8](repeating: 0, count: 40) + prefix(1 << 30).prefix(3)) == nil)
        #expect(fine.scan(prefix(1 << 30).suffix(2)) == 1 << 30)
    }

    @Test func streamsWithoutHelloAreCountedPerConnectionAndNode() throws {
        let gate = HelloGate(perConnection: 2, total: 3, timeout: 5)
        let a1 = try gate.enter(connection: "ipv4:127.0.0.1:1000")
        let a2 = try gate.enter(connection: "ipv4:127.0.0.1:1000")
        #expect(throws: HelloGate.Refusal.connection(2)) { _ = try gate.enter(connection: "ipv4:127.0.0.1:1000") }
        var b1: HelloGate.Pass? = try gate.enter(connection: "ipv4:127.0.0.1:2000")
        #expect(throws: HelloGate.Refusal.node(3)) { _ = try gate.enter(connection: "ipv4:127.0.0.1:3000") }
        a1.release()
        a1.release()  // once only
        #expect(gate.count == 2)
        b1 = nil  // a pass dropped is given back
        #expect(gate.count == 1)
        _ = try gate.enter(connection: "ipv4:127.0.0.1:1000")
        #expect(b1 == nil)
        _ = a2
    }

    /// One task ends every stream that did not say Hello in time: a place still held at its deadline runs what its
    /// stream gave to end it (at once when given after the deadline), and a place given back in time runs nothing.
    @Test func theGateEndsTheStreamsWhoseHelloDidNotComeInTime() async throws {
        let gate = HelloGate(perConnection: 10, total: 10, timeout: 0.2)
        let expired = Mutex<[String]>([])
        let silent = try gate.enter(connection: "ipv4:127.0.0.1:1000")
        silent.onExpiry { expired.withLock { $0.append("silent") } }
        let polite = try gate.enter(connection: "ipv4:127.0.0.1:1000")
        polite.onExpiry { expired.withLock { $0.append("polite") } }
        let late = try gate.enter(connection: "ipv4:127.0.0.1:2000")
        polite.release()  // its Hello came
        let sweeper = Task { await gate.enforceDeadlines() }
        defer { sweeper.cancel() }
        #expect(await eventually(5) { expired.withLock { $0 } == ["silent"] })
        #expect(gate.count == 2, "an expired place is held until its stream ends")
        late.onExpiry { expired.withLock { $0.append("late") } }  // past its deadline already
        #expect(expired.withLock { $0 } == ["silent", "late"])
        silent.release()
        late.release()
        #expect(gate.count == 0)
        try await Task.sleep(for: .milliseconds(300))
        #expect(expired.withLock { $0 } == ["silent", "late"], "each stream is ended once")
    }

    @Test func everyMetricHasItsHelpLine() async throws {
        let metrics = ServiceMetrics()
        _ = metrics.transport.project("p1")
        let text = metrics.exposition()
        let types = text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }
        #expect(types.count >= 25)
        for type in types {
            let name = type.split(separator: " ")[2]
            #expect(text.contains("# HELP \(name) "), "no HELP for \(name)")
            #expect(TransportMetrics.help[String(name)] != nil, "no help text written for \(name)")
        }
        #expect(text.contains(#"sotto_project_sightings_total{project="p1"} 0"#))
        #expect(text.contains("# TYPE sotto_found_latency_seconds histogram"))
    }
}

/// The service's own bounds seen by a real gRPC client on loopback.
@Suite(.timeLimit(.minutes(1))) struct TransportBoundsTests {
    @Test func aFrameOverTheLimitIsAnsweredWithResourceExhaustedNamingIt() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let big = RawSession(client)
        #expect(await big.hello(key: service.apiKey) != nil)
        big.send(Frames.publish(1, content: [UInt8](repeating: 9, count: 140_000)))
        let end = await big.end()
        guard case .some(.some(let error)) = end, let rpc = error as? RPCError else {
            Issue.record("a frame over 128 KiB did not end the stream with a status: \(String(describing: end))")
            return
        }
        #expect(rpc.code == .resourceExhausted, "\(rpc)")
        #expect(rpc.message.contains("over the limit of 131072 bytes"), "\(rpc.message)")
        #expect(Array(rpc.metadata[stringValues: "sotto-limit"]) == ["131072"], "\(rpc.metadata)")
        #expect(service.metric("sotto_frames_too_large_total") == 1)
        // Before the session: the same answer, without response headers sent yet.
        let early = RawSession(client, heartbeats: false)
        early.send(Frames.publish(1, content: [UInt8](repeating: 9, count: 200_000)))
        let earlyEnd = await early.end()
        guard case .some(.some(let earlyError)) = earlyEnd else { Issue.record("no end: \(String(describing: earlyEnd))"); return }
        #expect((earlyError as? RPCError)?.code == .resourceExhausted, "\(earlyError)")
    }

    @Test func streamsWithoutHelloBeyondTheCountAreRefusedAtOnce() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let waiting = (0..<8).map { _ in RawSession(client, heartbeats: false) }
        #expect(await eventually(10) { service.metric("sotto_streams_without_hello") == 8 }, "eight streams wait for their Hello")
        #expect(service.metric("sotto_streams_without_hello_refused_total") == 0)
        #expect(waiting.allSatisfy { $0.ended == nil })
        let ninth = RawSession(client, heartbeats: false)
        let end = await ninth.end(ExchangeService.helloTimeout - 1)
        guard case .some(.some(let error)) = end else { Issue.record("a ninth stream without Hello was held: \(String(describing: end))"); return }
        #expect((error as? RPCError)?.code == .resourceExhausted, "\(error)")
        #expect((error as? RPCError)?.message.contains("8 streams that have not said Hello") == true, "\(error)")
        #expect(service.metric("sotto_streams_without_hello_refused_total") == 1)
        #expect(waiting.allSatisfy { $0.ended == nil }, "the eight waiting are untouched")
        // One of them says Hello: its place is free again.
        #expect(await waiting[0].hello(key: service.apiKey) != nil)
        let another = RawSession(client)
        #expect(await another.hello(key: service.apiKey) != nil)
        for session in waiting + [another] { session.cancel() }
    }

    @Test func failedAuthenticationIsRejectedAndCounted() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let before = service.metric("sotto_rejected_total") ?? 0
        for key in ["sotto_nosuchid_secret", "not-a-key"] {
            let session = RawSession(client, heartbeats: false)
            session.send({ var hello = Sotto_Exchange_V1_Hello(); hello.apiKey = key; var frame = ClientFrame(); frame.kind = .hello(hello); return frame }())
            let end = await session.end()
            guard case .some(.some(let error)) = end else { Issue.record("a wrong key was accepted"); return }
            #expect((error as? RPCError)?.code == .unauthenticated)
        }
        #expect(service.metric("sotto_authentication_failures_total") == 2)
        #expect(service.metric("sotto_rejected_total") == before + 2)
    }

    @Test func theMetricsListenerClosesAnIncompleteRequest() async throws {
        let service = try await TestServer(metricsEndpoint: .tcp(host: "127.0.0.1", port: 0))
        defer { Task { await service.stop() } }
        guard let http = service.httpAddress, let port = Int(http.split(separator: ":").last ?? "") else { Issue.record("no HTTP address"); return }
        let started = ContinuousClock.now
        let closed = try await withDeadline(TransportLimits().httpRequestTimeout + 5, "the incomplete request to be closed") {
            try RawTCP.sendThenAwaitClose(port: port, bytes: Array("GET /metrics HTTP/1.1\r\nHost: x\r\n".utf8))
        }
        let elapsed = ContinuousClock.now - started
        #expect(closed)
        #expect(elapsed >= .seconds(TransportLimits().httpRequestTimeout - 0.5) && elapsed < .seconds(TransportLimits().httpRequestTimeout + 3), "\(elapsed)")
        #expect(service.metric("sotto_http_timeouts_total") == 1)
        // A complete request is still answered, with HELP lines.
        var request = URLRequest(url: URL(string: "http://\(http)/metrics")!)
        request.timeoutInterval = 5
        let (data, _) = try await URLSession(configuration: .ephemeral).data(for: request)
        #expect(String(decoding: data, as: UTF8.self).contains("# HELP sotto_sessions "))
    }
}

/// A blocking TCP client for raw probes.
enum RawTCP {
    /// Connects to 127.0.0.1:`port`, sends `bytes`, then reads until the peer closes (true) or 30 s pass.
    static func sendThenAwaitClose(port: Int, bytes: [UInt8]) throws -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }
}
