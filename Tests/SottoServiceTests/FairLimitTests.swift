import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// Limits in the unit of work: sightings (not frames), session opens, per key and per project; and a byte
/// quota on what a project's publications hold.
@Suite(.timeLimit(.minutes(1))) struct FairLimitTests {
    /// An Observe frame of `count` distinct beacon IDs (from `first`).
    static func report(_ count: Int, from first: Int) -> ClientFrame {
        var body = Sotto_Exchange_V1_Observe()
        for n in first..<(first + count) {
            var sighting = Sotto_Exchange_V1_Sighting()
            sighting.frame = Data(Payload.beacon([0xB1, UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]).frameBytes)
            sighting.snrDb = 10
            body.sightings.append(sighting)
        }
        var frame = ClientFrame()
        frame.kind = .observe(body)
        return frame
    }

    /// The noisy neighbour: a default key (50/s, burst 200) sending 64 sightings per frame is held to its
    /// rate in sightings, not in frames.
    @Test func aKeysRateCountsSightings() async throws {
        let service = try await TestServer(rate: 50, burst: 200)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let noisy = RawSession(client)
        #expect(await noisy.hello(key: service.apiKey) != nil)
        let start = ContinuousClock.now
        for n in 0..<40 { noisy.send(Self.report(64, from: n * 64)) }  // 2 560 sightings in 40 frames
        #expect(await eventually(5) { (service.metric("sotto_rate_limited_total") ?? 0) >= 1 })
        try await Task.sleep(for: .milliseconds(300))
        let elapsed = (ContinuousClock.now - start).inSeconds
        let admitted = service.metric("sotto_sightings_total") ?? 0
        // The burst (200) plus the rate over the time it took, plus one frame's rounding.
        #expect(admitted <= 200 + 50 * elapsed + 64, "\(admitted) sightings admitted in \(elapsed) s")
        #expect((service.metric("sotto_rate_limited_total") ?? 0) >= 30, "most frames were refused")
        let refusal = await noisy.frame { if case .error(let e) = $0.kind { return e.code == .rateLimited } else { return false } }
        #expect(refusal != nil, "the client is told (RATE_LIMITED)")
        #expect(noisy.ended == nil, "rate limiting does not end the stream")
        noisy.cancel()
    }

    @Test func sessionOpensAreRateLimitedPerKey() async throws {
        // A default key: 50/s, burst 200; opens are a tenth: 5/s, burst 20.
        let service = try await TestServer(rate: 50, burst: 200)
        defer { Task { await service.stop() } }
        // Five connections of eight sessions: a connection may hold only eight streams waiting for their Hello
        // (the transport's own bound), and this test is about the key's rate of opens.
        let clients = try (0..<5).map { _ in try RawClient(service.address) }
        defer { Task { for client in clients { await client.close() } } }
        let start = ContinuousClock.now
        let sessions = (0..<40).map { i in RawSession(clients[i % clients.count]) }
        for session in sessions {
            var hello = Sotto_Exchange_V1_Hello()
            hello.apiKey = service.apiKey
            var frame = ClientFrame()
            frame.kind = .hello(hello)
            session.send(frame)
        }
        let settled = await eventually(10) { sessions.allSatisfy { session in session.ended != nil || session.frames.contains { if case .welcome = $0.kind { return true } else { return false } } } }
        #expect(settled)
        let elapsed = (ContinuousClock.now - start).inSeconds
        let opened = sessions.filter { session in session.frames.contains { if case .welcome = $0.kind { return true } else { return false } } }.count
        let refused = sessions.filter { session in
            if case .some(.some(let error)) = session.ended { return (error as? RPCError)?.code == .resourceExhausted }
            return false
        }.count
        #expect(opened >= 20 && Double(opened) <= 20 + 5 * elapsed + 1, "\(opened) sessions opened in \(elapsed) s")
        #expect(opened + refused == 40, "the others were refused with RESOURCE_EXHAUSTED (\(refused))")
        for session in sessions { session.cancel() }
    }

    @Test func oneProjectsKeysShareItsRate() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.projectRate = 100
        configuration.projectBurst = 100
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let second = try await service.store.createKey(project: service.project.id, label: "second", ratePerSecond: 10_000, burst: 10_000).key
        let otherProject = try await service.otherProjectKey()
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let a = RawSession(client), b = RawSession(client), other = RawSession(client)
        #expect(await a.hello(key: service.apiKey) != nil)
        #expect(await b.hello(key: second) != nil)
        #expect(await other.hello(key: otherProject) != nil)
        let start = ContinuousClock.now
        for n in 0..<10 {
            a.send(Self.report(32, from: n * 64))
            b.send(Self.report(32, from: n * 64 + 32))
        }
        #expect(await eventually(5) { (service.metric("sotto_rate_limited_total") ?? 0) >= 1 })
        try await Task.sleep(for: .milliseconds(300))
        let elapsed = (ContinuousClock.now - start).inSeconds
        let admitted = service.metric("sotto_sightings_total") ?? 0
        #expect(admitted <= 100 + 100 * elapsed + 32, "two keys of one project: \(admitted) sightings in \(elapsed) s")
        // Another project is not held back by the first one's bucket.
        let before = service.metric("sotto_rate_limited_total") ?? 0
        for n in 0..<3 { other.send(Self.report(32, from: 10_000 + n * 32)) }
        #expect(await eventually(5) { (service.metric("sotto_sightings_total") ?? 0) >= admitted + 96 })
        #expect(service.metric("sotto_rate_limited_total") == before)
        for session in [a, b, other] { session.cancel() }
    }

    @Test func publicationsOfAProjectHaveAByteQuota() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.projectPublicationBytes = 250_000
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let one = RawSession(client), two = RawSession(client)
        #expect(await one.hello(key: service.apiKey) != nil)
        #expect(await two.hello(key: service.apiKey) != nil)
        let big = [UInt8](repeating: 7, count: 100_000)
        one.send(Frames.publish(1, content: big))
        #expect(await one.status(1)?.state == .active)
        two.send(Frames.publish(1, content: big))
        #expect(await two.status(1)?.state == .active)
        // A third 100 kB publication, from either session, is over the project's 250 000 bytes.
        two.send(Frames.publish(2, content: big))
        let over = await two.status(2)
        #expect(over?.state == .rejected && over?.error == .quotaExceeded && over?.detail == "publication-bytes" && over?.limit == 250_000,
                "\(String(describing: over))")
        // Replacing a publication by one of the same size fits; unpublishing makes room.
        one.send(Frames.publish(1, content: [UInt8](repeating: 8, count: 100_000)))
        let replaced = await eventually(5) {
            one.frames.filter { if case .opStatus(let s) = $0.kind { return s.opID == 1 && s.state == .active } else { return false } }.count == 2
        }
        #expect(replaced, "a same-size replacement is accepted")
        one.send(Frames.unpublish(1))
        #expect(await one.frame { if case .opStatus(let s) = $0.kind { return s.opID == 1 && s.state == .ended } else { return false } } != nil)
        two.send(Frames.publish(3, content: big))
        #expect(await two.status(3)?.state == .active)
        // A session that ends gives its bytes back.
        two.finish()
        #expect(await eventually(3) { await service.server.host.sessionCount == 1 })
        one.send(Frames.publish(4, content: big))
        one.send(Frames.publish(5, content: big))
        #expect(await one.status(4)?.state == .active)
        #expect(await one.status(5)?.state == .active)
        one.cancel()
    }
}

/// Rate limits over a cluster: two nodes on one PostgreSQL share a key's budget through the log, so a client
/// that spreads its sessions over both gets the key's rate once, not twice.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterRateLimitTests {
    @Test func aKeySpreadOverTwoNodesGetsItsRateOnce() async throws {
        var configuration = TestCluster.fastConfiguration
        configuration.nodeTimeout = 30  // a loaded test machine must not have a node declared dead meanwhile
        try await withCluster(nodes: 2, configuration: configuration) { cluster in
            let rate = 40.0
            let key = try await cluster.admin.createKey(project: cluster.project.id, label: "limited", ratePerSecond: rate, burst: rate).key
            var clients: [RawClient] = []
            var sessions: [RawSession] = []
            for node in 0..<2 {
                let client = try RawClient(cluster.node(node).address)
                clients.append(client)
                let session = RawSession(client)
                #expect(await session.hello(key: key) != nil, "node \(node) opens a session")
                sessions.append(session)
            }
            // Each session offers about 200 one-sighting reports a second (5 times the key's rate).
            func offer(for seconds: Double, from first: Int) async -> Int {
                let end = ContinuousClock.now + .seconds(seconds)
                var n = first
                while ContinuousClock.now < end {
                    for session in sessions { for i in 0..<10 { session.send(FairLimitTests.report(1, from: n + i)) } }
                    n += 10
                    try? await Task.sleep(for: .milliseconds(50))
                }
                return n
            }
            // The first two seconds spend the bursts (one per node) and let the usage reports go round.
            let next = await offer(for: 2, from: 0)
            let before = cluster.total("sotto_sightings_total"), start = ContinuousClock.now
            _ = await offer(for: 4, from: next)
            try await Task.sleep(for: .milliseconds(300))
            let elapsed = (ContinuousClock.now - start).inSeconds
            let admitted = cluster.total("sotto_sightings_total") - before
            let perNode = (0..<2).map { cluster.metric("sotto_sightings_total", node: $0) }
            print(String(format: "two nodes, a key of %.0f/s: %.0f sightings admitted in %.2f s (%.1f/s); per node since the start %@",
                         rate, admitted, elapsed, admitted / elapsed, perNode.description))
            // Shared: about the rate once. Each node on its own would admit the rate twice over (2 x 40/s).
            #expect(admitted <= 1.4 * rate * elapsed, "\(admitted) sightings admitted in \(elapsed) s: the key's rate is not shared")
            #expect(admitted >= 0.5 * rate * elapsed, "\(admitted) sightings admitted in \(elapsed) s: starved")
            #expect(perNode.allSatisfy { $0 > 0 }, "both nodes serve the key: \(perNode)")
            #expect(cluster.total("sotto_rate_limited_total") > 0)
            for session in sessions { session.cancel() }
            for client in clients { await client.close() }
        }
    }
}
