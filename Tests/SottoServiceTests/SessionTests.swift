import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import Testing

/// Sessions: quotas, grace and resumption, silence, per-key rate limits, protocol errors.
@Suite(.timeLimit(.minutes(1))) struct SessionTests {
    @Test func sessionQuotaIsEnforced() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let small = try await service.store.createProject(name: "kiosk", maxSessions: 1)
        let key = try await service.store.createKey(project: small.id, label: "k", ratePerSecond: 100, burst: 100).key
        let first = try await service.manager(key: key)
        let link = try RemoteMatcher(options: .init(endpoint: service.address, apiKey: key))
        let second = MessageManager(link: link)
        await #expect(throws: ExchangeError.sessionQuotaExceeded(1)) { try await second.connect(timeout: 5) }
        await second.close(now: 0)
        // A clean end frees the slot at once.
        await first.close(now: 0)
        #expect(await eventually(3) { service.metric("sotto_sessions") == 0 })
        let third = try await service.manager(key: key)
        #expect(service.metric("sotto_sessions") == 1)
        await third.close(now: 0)
    }

    /// A publisher (raw session) whose message a manager subscriber has found.
    func foundByManager(_ service: TestServer) async throws -> (RawClient, RawSession, Sotto_Exchange_V1_Welcome, [UInt8], MessageManager, SubscriptionHandle, EventRecorder) {
        let client = try RawClient(service.address)
        let a = RawSession(client)
        guard let welcome = await a.hello(key: service.apiKey) else { throw TimedOut(what: "welcome") }
        a.send(Frames.publish(1, content: exhibit.content))
        #expect(await a.status(1)?.state == .active)
        guard let token = await a.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { throw TimedOut(what: "token") }
        let b = try await service.manager(lostTimeout: 30)
        let recorder = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: recorder.handler)
        await heard(b, token: token)
        #expect(await recorder.waitFound())
        return (client, a, welcome, token, b, subscription, recorder)
    }

    /// The grace runs on the host's clock, a manual one: the test moves it past the grace instead of waiting.
    @Test func droppedSessionResumesUnchangedWithinGrace() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.sessionGrace = 1.5
        let clock = ManualClock()
        let service = try await TestServer(configuration: configuration, clock: clock)
        defer { Task { await service.stop() } }
        let (client, a, welcome, token, b, subscription, recorder) = try await foundByManager(service)
        defer { Task { await client.close() } }
        #expect(welcome.sessionGraceMs == 1_500)
        #expect(!welcome.resumed)

        client.kill()  // the connection drops: no clean end (a cancelled RPC would half-close first)
        #expect(await eventually(5) { await service.server.host.streamCount == 1 }, "the host saw the stream end")
        #expect(await clock.tick(by: 0.5))
        #expect(service.metric("sotto_lost_total") == 0)
        #expect(recorder.pattern == "F", "a dropped session keeps its publications during the grace")

        // A wrong secret opens a new session instead.
        let fresh = try RawClient(service.address)
        defer { Task { await fresh.close() } }
        let intruder = RawSession(fresh)
        var wrong = Sotto_Exchange_V1_Hello()
        wrong.apiKey = service.apiKey
        wrong.resumeSessionID = welcome.sessionID
        wrong.resumeSecret = Data(repeating: 0, count: 32)
        var wrongFrame = ClientFrame()
        wrongFrame.kind = .hello(wrong)
        intruder.send(wrongFrame)
        let intruderWelcome = await intruder.frame { if case .welcome = $0.kind { return true } else { return false } }
        if case .welcome(let body)? = intruderWelcome?.kind {
            #expect(!body.resumed)
            #expect(body.sessionID != welcome.sessionID)
        } else { Issue.record("no welcome for a wrong secret") }
        intruder.cancel()

        let resumed = RawSession(fresh)
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = service.apiKey
        hello.broadcasts = true
        hello.resumeSessionID = welcome.sessionID
        hello.resumeSecret = welcome.resumeSecret
        var frame = ClientFrame()
        frame.kind = .hello(hello)
        resumed.send(frame)
        let again = await resumed.frame { if case .welcome = $0.kind { return true } else { return false } }
        if case .welcome(let body)? = again?.kind {
            #expect(body.resumed)
            #expect(body.sessionID == welcome.sessionID)
        } else { Issue.record("no welcome on resume") }
        #expect(await resumed.frame(where: { $0.tokenDirective != nil })?.tokenDirective == token, "the same token")
        // Past the grace: nothing was lost, and the operation is still the session's.
        #expect(await clock.tick(by: 1.5))
        #expect(service.metric("sotto_lost_total") == 0)
        #expect(recorder.pattern == "F", "\(recorder.all)")
        #expect(service.metric("sotto_sessions_resumed_total") == 1)
        resumed.send(Frames.publish(1, content: exhibit.content))
        #expect(await resumed.status(1)?.state == .active, "re-sending the same publication is a no-op")
        resumed.send(Frames.unpublish(1))
        #expect(await recorder.waitLost(1, 3))
        resumed.cancel()
        keep(subscription)
        await b.close(now: 0)
    }

    /// On the host's manual clock: the session ends at the first tick past the grace, not before.
    @Test func droppedSessionEndsAfterGrace() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.sessionGrace = 1.5
        let clock = ManualClock()
        let service = try await TestServer(configuration: configuration, clock: clock)
        defer { Task { await service.stop() } }
        let (client, a, _, _, b, subscription, recorder) = try await foundByManager(service)
        defer { Task { await client.close() } }
        client.kill()
        #expect(await eventually(5) { await service.server.host.streamCount == 1 }, "the host saw the stream end")
        #expect(await clock.tick(by: 1.4))
        #expect(service.metric("sotto_lost_total") == 0, "not lost within the grace")
        #expect(recorder.pattern == "F")
        #expect(await clock.tick(by: 0.2))
        #expect(service.metric("sotto_lost_total") == 1, "lost once the grace ended")
        #expect(await recorder.waitLost(1, 5))
        #expect(await clock.tick(by: 1))
        #expect(service.metric("sotto_lost_total") == 1, "lost once")
        #expect(recorder.pattern == "FL")
        #expect(await eventually(2) { service.metric("sotto_sessions") == 1 })
        _ = a
        keep(subscription)
        await b.close(now: 0)
    }

    @Test func silentSessionIsCutOff() async throws {
        var configuration = TestServer.fastConfiguration
        // A 2 s interval: silence is cut off after 6 s, so that the beating session's heartbeats (every 0.5 s)
        // survive a test runner starved for seconds (0.4 s, cut off after 1.2 s, failed on CI).
        configuration.heartbeatInterval = 2
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let silent = RawSession(client, heartbeats: false)
        let beating = RawSession(client, heartbeats: true)
        let welcome = await silent.hello(key: service.apiKey)
        #expect(welcome?.heartbeatIntervalMs == 2000)
        #expect(await beating.hello(key: service.apiKey) != nil)
        let end = await silent.end(15)
        guard case .some(.some(let error)) = end else { Issue.record("a silent session was not cut off"); return }
        #expect((error as? RPCError)?.code == .deadlineExceeded)
        #expect(service.metric("sotto_cut_off_total") == 1)
        #expect(beating.ended == nil, "a session that sends heartbeats stays")
        beating.cancel()
    }

    @Test func rateLimitIsPerKeyAcrossSessionsAndSparesHeartbeats() async throws {
        let service = try await TestServer(rate: 0.5, burst: 2)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let one = RawSession(client), two = RawSession(client)
        #expect(await one.hello(key: service.apiKey) != nil)
        #expect(await two.hello(key: service.apiKey) != nil)
        for _ in 0..<10 { one.send(RawSession.heartbeatFrame) }
        one.send(Frames.publish(1, content: [1]))
        #expect(await one.status(1)?.state == .active, "heartbeats do not spend the key's budget")
        two.send(Frames.publish(1, content: [2]))
        #expect(await two.status(1)?.state == .active)
        one.send(Frames.publish(2, content: [3]))
        let limited = await one.status(2)
        #expect(limited?.state == .rejected)
        #expect(limited?.error == .rateLimited)
        two.send(Frames.subscribe(2))
        #expect(await two.status(2)?.error == .rateLimited, "the budget is the key's, over its sessions")
        #expect(service.metric("sotto_rate_limited_total") == 2)
        one.cancel()
        two.cancel()
    }

    @Test
    func endingAnOperationIsNeverLostToTheRateLimit() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let slowKey = try await service.store.createKey(project: service.project.id, label: "slow", ratePerSecond: 0.2, burst: 2).key
        let a = try await service.manager(key: slowKey)
        let b = try await service.manager(lostTimeout: 30)
        let second = try Message(namespace: "museum", type: "exhibit", content: [2])
        let first = try await a.publish(exhibit, now: 0)
        let other = try await a.publish(second, now: 0)
        let recorder = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: recorder.handler)
        await heard(b, token: try await token(of: a))
        #expect(await recorder.waitFound(2))
        await first.cancel()  // the key's budget is spent
        #expect(await recorder.waitLost(1, 1.5), "the cancelled publication is withdrawn: \(recorder.all)")
        try await Task.sleep(for: .milliseconds(300))
        #expect(recorder.lost == [exhibit], "only the cancelled publication is lost")
        keep(other, subscription)
        await a.close(now: 0)
        await b.close(now: 0)
    }

    @Test func protocolErrorsKeepTheStream() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let session = greeted.session
        @Sendable func errors() -> [Sotto_Exchange_V1_Error] { session.frames.compactMap { if case .error(let e) = $0.kind { return e } else { return nil } } }

        var hello = ClientFrame()
        hello.kind = .hello(Sotto_Exchange_V1_Hello())
        session.send(hello)
        #expect(await eventually(3) { errors().count == 1 })
        #expect(errors().first?.code == .protocol)

        var observe = Sotto_Exchange_V1_Observe()
        observe.sightings = Array(repeating: Sotto_Exchange_V1_Sighting(), count: 65)
        var tooMany = ClientFrame()
        tooMany.kind = .observe(observe)
        session.send(tooMany)
        #expect(await eventually(3) { errors().count == 2 })
        #expect(errors().last?.code == .protocol)

        session.send(ClientFrame())  // no kind
        #expect(await eventually(3) { errors().count == 3 })

        session.send(Frames.unpublish(9))
        #expect(await session.status(9)?.error == .unknownOperation)
        session.send(Frames.publish(3, content: [1]))
        #expect(await session.status(3)?.state == .active)
        var unsubscribe = ClientFrame()
        var body = Sotto_Exchange_V1_Unsubscribe()
        body.opID = 3
        unsubscribe.kind = .unsubscribe(body)
        session.send(unsubscribe)
        let wrongKind = await session.frame { if case .opStatus(let s) = $0.kind { return s.opID == 3 && s.state == .rejected } else { return false } }
        if case .opStatus(let status)? = wrongKind?.kind { #expect(status.error == .unknownOperation) }
        else { Issue.record("unsubscribing a publication was not refused") }
        #expect(session.ended == nil)
        session.cancel()
    }

    @Test func operationQuotaPerSession() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let session = greeted.session
        for op in 1...100 { session.send(Frames.publish(UInt32(op), content: [UInt8(op)])) }
        #expect(await session.status(100)?.state == .active)
        session.send(Frames.publish(101, content: [0]))
        let status = await session.status(101)
        #expect(status?.state == .rejected)
        #expect(status?.error == .quotaExceeded)
        #expect(status?.limit == 100)
        // Replacing an existing operation is not a new one.
        session.send(Frames.publish(50, content: [0, 0]))
        #expect(await eventually(3) { session.frames.filter { if case .opStatus(let s) = $0.kind { return s.opID == 50 } else { return false } }.count == 2 })
        let replaced = session.frames.last { if case .opStatus(let s) = $0.kind { return s.opID == 50 } else { return false } }
        if case .opStatus(let s)? = replaced?.kind { #expect(s.state == .active) }
        session.cancel()
    }

    /// TTLs run on the host's clock, a manual one: the test moves it past each TTL instead of waiting.
    @Test func ttlExpiryEndsPublicationAndSubscription() async throws {
        let clock = ManualClock()
        let service = try await TestServer(clock: clock)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let a = RawSession(client), b = RawSession(client)
        #expect(await a.hello(key: service.apiKey) != nil)
        #expect(await b.hello(key: service.apiKey) != nil)
        // TTLs of 3 and 5 s on the host's manual clock.
        a.send(Frames.publish(1, content: exhibit.content, ttl: 3))
        #expect(await a.status(1)?.state == .active)
        guard let token = await a.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { Issue.record("no token"); return }
        var subscribe = Frames.subscribe(1, lostTimeoutMs: 30_000)
        if case .subscribe(var body) = subscribe.kind {
            body.strategy.ttlSeconds = 5
            subscribe.kind = .subscribe(body)
        }
        b.send(subscribe)
        #expect(await b.status(1)?.state == .active)
        b.send(Frames.observe(token: token))
        #expect(await b.frame { $0.isFound } != nil)
        #expect(await clock.tick(by: 2.9))
        #expect(!a.frames.contains { if case .expired = $0.kind { return true } else { return false } }, "not before its TTL")
        #expect(await clock.tick(by: 0.2))
        let expired = await a.frame(6) { if case .expired(let e) = $0.kind { return e.opID == 1 } else { return false } }
        #expect(expired != nil, "the publication expired")
        #expect(await b.frame(2) { $0.isLost } != nil, "its subscriber lost it")
        #expect(!b.frames.contains { if case .expired = $0.kind { return true } else { return false } }, "the subscription not yet")
        #expect(await clock.tick(by: 2))
        let subscriptionExpired = await b.frame(6) { if case .expired(let e) = $0.kind { return e.opID == 1 } else { return false } }
        #expect(subscriptionExpired != nil, "the subscription expired")
        a.cancel()
        b.cancel()
    }
}
