import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// Revoking a key bites on the sessions it opened, on every node, within a second; a session resumes only
/// with the key that opened it.
@Suite(.serialized, .timeLimit(.minutes(1))) struct RevocationTests {
    /// How long after the revocation's write a stream may take to end (the service polls every 0.25 s; the
    /// rest is room for a loaded machine).
    static let bound = 1.0

    /// Waits until the session's stream ended; returns the seconds since `start`, or nil.
    static func endTime(of session: RawSession, since start: ContinuousClock.Instant) async -> Double? {
        guard await eventually(5, { session.ended != nil }) else { return nil }
        return (ContinuousClock.now - start).inSeconds
    }

    static func isUnauthenticated(_ session: RawSession) -> Bool {
        guard case .some(.some(let error)) = session.ended else { return false }
        return (error as? RPCError)?.code == .unauthenticated
    }

    static func keyID(_ key: String) -> String { String(key.split(separator: "_")[1]) }

    @Test func revokingAKeyEndsItsSessionsAndWithdrawsTheirPublications() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let revokedKey = try await service.store.createKey(project: service.project.id, label: "to revoke", ratePerSecond: 1_000, burst: 1_000).key
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let publisher = RawSession(client)
        #expect(await publisher.hello(key: revokedKey) != nil)
        guard let token = await publisher.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { Issue.record("no token"); return }
        publisher.send(Frames.publish(1, content: Array("revoked soon".utf8)))
        #expect(await publisher.status(1)?.state == .active)

        let subscriber = RawSession(client)
        #expect(await subscriber.hello(key: service.apiKey) != nil)
        subscriber.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
        subscriber.send(Frames.observe(token: token))
        #expect(await subscriber.frame { $0.isFound } != nil)

        try await service.store.revokeKey(id: Self.keyID(revokedKey))
        let start = ContinuousClock.now
        let ended = await Self.endTime(of: publisher, since: start)
        #expect(ended.map { $0 < Self.bound } == true, "the revoked key's stream ended after \(ended.map { "\($0) s" } ?? "never")")
        #expect(Self.isUnauthenticated(publisher), "\(String(describing: publisher.ended))")
        // Its publication went with its session: lost at once (the lost timeout is 30 s).
        #expect(await subscriber.frame(2) { $0.isLost } != nil, "the revoked session's publication is withdrawn")
        #expect(subscriber.ended == nil, "the other key's session goes on")
        // And the key opens nothing any more.
        let again = RawSession(client)
        #expect(await again.hello(key: revokedKey) == nil)
        #expect(Self.isUnauthenticated(again))
        subscriber.cancel()
    }

    /// Resumes `welcome`'s session with `key` on a fresh connection to `address`: the Welcome answered, or
    /// the error that ended the stream.
    static func resume(_ welcome: Sotto_Exchange_V1_Welcome, with key: String, at address: MatcherAddress) async
        -> Result<Sotto_Exchange_V1_Welcome, RPCError>? {
        guard let client = try? RawClient(address) else { return nil }
        let session = RawSession(client)
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = key
        hello.resumeSessionID = welcome.sessionID
        hello.resumeSecret = welcome.resumeSecret
        var frame = ClientFrame()
        frame.kind = .hello(hello)
        session.send(frame)
        let answer = await session.frame { if case .welcome = $0.kind { return true } else { return false } }
        let ended = answer == nil ? await session.end() : nil
        session.cancel()
        await client.close()
        if case .welcome(let body)? = answer?.kind { return .success(body) }
        if case .some(.some(let error)) = ended, let rpc = error as? RPCError { return .failure(rpc) }
        return nil
    }

    /// A session whose stream had already gone (its client disconnected; the session waits in its grace
    /// period to be resumed) when its key is revoked: it ends at once as well. Its publication is withdrawn
    /// within the bound (not at the end of the 60 s grace) and it is resumed by no key.
    @Test func revokingAKeyEndsItsDetachedSessionsAtOnce() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.sessionGrace = 60
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let revokedKey = try await service.store.createKey(project: service.project.id, label: "to revoke", ratePerSecond: 1_000, burst: 1_000).key
        let otherKey = try await service.store.createKey(project: service.project.id, label: "same project", ratePerSecond: 1_000, burst: 1_000).key
        let publisherClient = try RawClient(service.address)
        let publisher = RawSession(publisherClient)
        guard let welcome = await publisher.hello(key: revokedKey),
              let token = await publisher.frame(where: { $0.tokenDirective != nil })?.tokenDirective else {
            Issue.record("no welcome or token")
            return
        }
        publisher.send(Frames.publish(1, content: Array("left behind".utf8)))
        #expect(await publisher.status(1)?.state == .active)
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let subscriber = RawSession(client)
        #expect(await subscriber.hello(key: service.apiKey) != nil)
        subscriber.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
        subscriber.send(Frames.observe(token: token))
        #expect(await subscriber.frame { $0.isFound } != nil)

        // The publisher's connection goes: its session waits for its grace period, publication and all.
        publisherClient.kill()
        #expect(await eventually(5) { await service.server.host.streamCount == 1 }, "the publisher's stream went")
        #expect(await service.server.host.sessionCount == 2, "its session waits to be resumed")

        try await service.store.revokeKey(id: Self.keyID(revokedKey))
        let start = ContinuousClock.now
        let lost = await subscriber.frame(5) { $0.isLost }
        let elapsed = (ContinuousClock.now - start).inSeconds
        #expect(lost != nil && elapsed < Self.bound, "the detached session's publication withdrawn after \(elapsed) s")
        #expect(await eventually(2) { await service.server.host.sessionCount == 1 }, "the detached session ended")
        #expect(subscriber.ended == nil, "the other key's session goes on")
        // Resumed by no key: the revoked one no longer authenticates, another opens a new session.
        let withRevoked = await Self.resume(welcome, with: revokedKey, at: service.address)
        if case .failure(let error)? = withRevoked { #expect(error.code == .unauthenticated, "\(error)") } else {
            Issue.record("resumed with the revoked key: \(String(describing: withRevoked))")
        }
        let withOther = await Self.resume(welcome, with: otherKey, at: service.address)
        if case .success(let body)? = withOther {
            #expect(!body.resumed && body.sessionID != welcome.sessionID, "\(body)")
        } else {
            Issue.record("another key of the project opens a session: \(String(describing: withOther))")
        }
        subscriber.cancel()
    }

    @Test func aSessionResumesOnlyWithTheKeyThatOpenedIt() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let otherKey = try await service.store.createKey(project: service.project.id, label: "same project", ratePerSecond: 1_000, burst: 1_000).key
        let first = try RawClient(service.address)
        let original = RawSession(first)
        guard let welcome = await original.hello(key: service.apiKey) else { Issue.record("no welcome"); return }
        first.kill()  // the session waits for its grace period (3 s)
        #expect(await eventually(3) { await service.server.host.streamCount == 0 })

        func resume(with key: String) async -> Sotto_Exchange_V1_Welcome? {
            let client = try? RawClient(service.address)
            guard let client else { return nil }
            let session = RawSession(client)
            var hello = Sotto_Exchange_V1_Hello()
            hello.apiKey = key
            hello.resumeSessionID = welcome.sessionID
            hello.resumeSecret = welcome.resumeSecret
            var frame = ClientFrame()
            frame.kind = .hello(hello)
            session.send(frame)
            let answer = await session.frame { if case .welcome = $0.kind { return true } else { return false } }
            session.cancel()
            await client.close()
            if case .welcome(let body)? = answer?.kind { return body }
            return nil
        }
        let withOther = await resume(with: otherKey)
        #expect(withOther != nil && withOther?.resumed == false && withOther?.sessionID != welcome.sessionID,
                "another key of the same project gets a new session, not this one")
        let withOwn = await resume(with: service.apiKey)
        #expect(withOwn?.resumed == true && withOwn?.sessionID == welcome.sessionID, "its own key resumes it")
    }

    /// In a cluster: a session detached on node 0 (its client gone) is ended by the revocation on every node:
    /// its publication is withdrawn for a subscriber on node 1, and the session is gone from both replicas.
    @Test func revocationEndsADetachedSessionOnEveryNode() async throws {
        var configuration = TestCluster.fastConfiguration
        configuration.sessionGrace = 60
        configuration.nodeTimeout = 30  // the nodes of a loaded test machine stay alive: only the revocation ends sessions
        try await withCluster(nodes: 2, configuration: configuration) { cluster in
            let revokedKey = try await cluster.admin.createKey(project: cluster.project.id, label: "to revoke", ratePerSecond: 1_000, burst: 1_000).key
            let publisherClient = try RawClient(cluster.node(0).address)
            let publisher = RawSession(publisherClient)
            guard await publisher.hello(key: revokedKey) != nil,
                  let token = await publisher.frame(10, where: { $0.tokenDirective != nil })?.tokenDirective else {
                Issue.record("no welcome or token")
                return
            }
            publisher.send(Frames.publish(1, content: Array("left behind".utf8)))
            #expect(await publisher.status(1, 10)?.state == .active)
            let client = try RawClient(cluster.node(1).address)
            let subscriber = RawSession(client)
            #expect(await subscriber.hello(key: cluster.apiKey) != nil)
            subscriber.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
            subscriber.send(Frames.observe(token: token))
            #expect(await subscriber.frame(10) { $0.isFound } != nil)
            publisherClient.kill()
            #expect(await eventually(5) { await cluster.node(0).server.host.streamCount == 0 }, "the publisher's stream went")

            try await cluster.admin.revokeKey(id: Self.keyID(revokedKey))
            let start = ContinuousClock.now
            let lost = await subscriber.frame(5) { $0.isLost }
            let elapsed = (ContinuousClock.now - start).inSeconds
            #expect(lost != nil && elapsed < Self.bound, "withdrawn on node 1 after \(elapsed) s")
            for node in 0..<2 {
                #expect(await eventually(2) { await cluster.node(node).server.host.sessionCount == 1 }, "node \(node) holds the subscriber's only")
            }
            #expect(subscriber.ended == nil)
            subscriber.cancel()
            await client.close()
        }
    }

    @Test func revocationBitesOnEveryNodeWithinASecond() async throws {
        try await withCluster(nodes: 2) { cluster in
            let revokedKey = try await cluster.admin.createKey(project: cluster.project.id, label: "to revoke", ratePerSecond: 1_000, burst: 1_000).key
            var clients: [RawClient] = []
            var sessions: [RawSession] = []
            for node in 0..<2 {
                let client = try RawClient(cluster.node(node).address)
                clients.append(client)
                let session = RawSession(client)
                #expect(await session.hello(key: revokedKey) != nil, "node \(node) opens a session")
                sessions.append(session)
            }
            let survivor = RawSession(clients[1])
            #expect(await survivor.hello(key: cluster.apiKey) != nil)
            try await cluster.admin.revokeKey(id: Self.keyID(revokedKey))
            let start = ContinuousClock.now
            for (node, session) in sessions.enumerated() {
                let ended = await Self.endTime(of: session, since: start)
                #expect(ended.map { $0 < Self.bound } == true, "node \(node): ended after \(ended.map { "\($0) s" } ?? "never")")
                #expect(Self.isUnauthenticated(session))
            }
            #expect(survivor.ended == nil)
            survivor.cancel()
            for client in clients { await client.close() }
        }
    }

    /// Issue 34: disabling a project, and a rotated key's overlap running out, bite on every node as a
    /// revocation does (the other nodes' revocation poll).
    @Test func aDisabledProjectAndARotatedKeyPastItsOverlapAreCutOffOnEveryNode() async throws {
        try await withCluster(nodes: 2) { cluster in
            let other = try await cluster.admin.createProject(name: "to disable", maxSessions: 10)
            let otherKey = try await cluster.admin.createKey(project: other.id, label: "", ratePerSecond: 1_000, burst: 1_000).key
            let (rotating, rotatingKey) = try await cluster.admin.createKey(project: cluster.project.id, label: "to rotate", ratePerSecond: 1_000, burst: 1_000)
            var clients: [RawClient] = []
            var disabled: [RawSession] = [], rotated: [RawSession] = []
            for node in 0..<2 {
                let client = try RawClient(cluster.node(node).address)
                clients.append(client)
                let first = RawSession(client), second = RawSession(client)
                #expect(await first.hello(key: otherKey) != nil)
                #expect(await second.hello(key: rotatingKey) != nil)
                disabled.append(first)
                rotated.append(second)
            }
            _ = try await cluster.admin.setProjectDisabled(other.id, true)
            let start = ContinuousClock.now
            for (node, session) in disabled.enumerated() {
                let ended = await Self.endTime(of: session, since: start)
                #expect(ended.map { $0 < Self.bound } == true, "node \(node): ended after \(ended.map { "\($0) s" } ?? "never")")
                #expect(Self.isUnauthenticated(session))
            }
            _ = try await cluster.admin.rotateKey(id: rotating.id, overlap: 0.5)
            #expect(rotated.allSatisfy { $0.ended == nil }, "the old key works during the overlap")
            for (node, session) in rotated.enumerated() {
                #expect(await session.end(5) != nil, "node \(node): the old key's session ends after the overlap")
                #expect(Self.isUnauthenticated(session))
            }
            for client in clients { await client.close() }
        }
    }
}
