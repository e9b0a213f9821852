import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import Synchronization
import Testing

/// Managers over the network service: publish, subscribe, hear, find, lose.
@Suite(.timeLimit(.minutes(1))) struct MatchingOverServiceTests {
    @Test func publishedMessageIsFoundThenLostOverTheService() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let a = try await service.manager()
        let b = try await service.manager()
        let c = try await service.manager()
        #expect(exhibit.content.count == 37)

        let publication = try await a.publish(exhibit, now: 0)
        let tokenA = try await token(of: a)
        let recorderB = EventRecorder(), recorderC = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, now: 0, handler: recorderB.handler)
        let otherType = try MessageFilter([.namespacedType(namespace: "museum", type: "shop")])
        let subscriptionC = try await c.subscribe(filter: otherType, now: 0, handler: recorderC.handler)

        await heard(b, token: tokenA)
        await heard(c, token: tokenA)
        #expect(await recorderB.waitFound())
        #expect(recorderB.found == [exhibit])
        #expect(recorderB.found.first?.content.count == 37)

        await publication.cancel()
        #expect(await recorderB.waitLost())
        #expect(recorderB.pattern == "FL")
        #expect(recorderB.lost == [exhibit])
        #expect(recorderC.all.isEmpty, "a subscriber of another type finds nothing")
        #expect(service.metric("sotto_found_total") == 1)
        #expect(service.metric("sotto_lost_total") == 1)
        keep(subscription, subscriptionC, publication)
        for m in [a, b, c] { await m.close(now: 0) }
    }

    @Test func anotherProjectNeverFindsTheMessage() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let a = try await service.manager()
        let d = try await service.manager(key: try await service.otherProjectKey())
        let publication1 = try await a.publish(exhibit, now: 0)
        let tokenA = try await token(of: a)
        let recorder = EventRecorder()
        let subscription = try await d.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        await heard(d, token: tokenA)
        try await Task.sleep(for: .milliseconds(800))
        #expect(recorder.all.isEmpty, "another project's subscriber finds nothing")
        #expect((service.metric("sotto_sightings_total") ?? 0) >= 1, "the sighting reached the service")
        keep(subscription, publication1)
        await a.close(now: 0)
        await d.close(now: 0)
    }

    @Test
    func anotherProjectsTokenIsCountedInvalid() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let a = try await service.manager()
        let raw = try RawClient(service.address)
        defer { Task { await raw.close() } }
        let d = RawSession(raw)
        #expect(await d.hello(key: try await service.otherProjectKey()) != nil)
        let publication2 = try await a.publish(exhibit, now: 0)
        let tokenA = try await token(of: a)
        d.send(Frames.subscribe(1))
        d.send(Frames.observe(token: tokenA))
        let status = await d.frame(3) { if case .tokenStatus = $0.kind { return true } else { return false } }
        #expect(status != nil, "the other project is told the token resolves to nothing")
        #expect(await eventually(2) { service.metric("sotto_invalid_tokens_total") ?? 0 >= 1 })
        d.cancel()
        keep(publication2)
        await a.close(now: 0)
    }

    @Test func scanOnlyPublisherHearingTheSubscriberMakesItFind() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let publisher = try await service.manager()
        let subscriber = try await service.manager()
        let publication3 = try await publisher.publish(exhibit, strategy: try Strategy(discoveryMode: .scan), now: 0)
        let recorder = EventRecorder()
        let subscription = try await subscriber.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        let tokenS = try await token(of: subscriber)
        // The subscriber heard nothing; the publisher heard the subscriber.
        await heard(publisher, token: tokenS)
        #expect(await recorder.waitFound())
        #expect(recorder.found == [exhibit])
        #expect(await publisher.transmitPlan.isEmpty, "a scan-only publisher plays no token")
        keep(subscription, publication3)
        await publisher.close(now: 0)
        await subscriber.close(now: 0)
    }

    @Test func wrongAndRevokedKeysAreRefused() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let a = try await service.manager()
        let publication4 = try await a.publish(exhibit, now: 0)
        let tokenA = try await token(of: a)

        // A key of the right shape with a wrong secret, and garbage.
        let parts = service.apiKey.split(separator: "_")
        let wrongSecret = "sotto_\(parts[1])_" + String(repeating: "0", count: 64)
        for key in [wrongSecret, "not-a-key"] {
            let link = try RemoteMatcher(options: .init(endpoint: service.address, apiKey: key))
            let manager = MessageManager(link: link)
            await #expect(throws: ExchangeError.unauthenticated) { try await manager.connect(timeout: 5) }
            await manager.close(now: 0)
        }

        // A key that worked, revoked.
        let (record, revokedKey) = try await service.store.createKey(project: service.project.id, label: "gone", ratePerSecond: 100, burst: 100)
        let before = try await service.manager(key: revokedKey)
        await before.close(now: 0)
        try await service.store.revokeKey(id: record.id)
        let link = try RemoteMatcher(options: .init(endpoint: service.address, apiKey: revokedKey))
        let revoked = MessageManager(link: link)
        await #expect(throws: ExchangeError.unauthenticated) { try await revoked.connect(timeout: 5) }
        let recorder = EventRecorder()
        let subscription = try? await revoked.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        await heard(revoked, token: tokenA)
        try await Task.sleep(for: .milliseconds(500))
        #expect(recorder.all.isEmpty)
        #expect(service.metric("sotto_authentication_failures_total") == 3)
        #expect(service.metric("sotto_found_total") ?? 0 == 0)
        keep(subscription, publication4)
        await revoked.close(now: 0)
        await a.close(now: 0)
    }
}

/// Tokens stop resolving when their session ends, and after a rotation's grace period.
@Suite(.timeLimit(.minutes(1))) struct TokenLifetimeTests {
    @Test func closedSessionTokenIsInvalidAtOnce() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let a = try await service.manager()
        let publication5 = try await a.publish(exhibit, now: 0)
        let recorded = try await token(of: a)
        let raw = try RawClient(service.address)
        defer { Task { await raw.close() } }
        let b = RawSession(raw)
        #expect(await b.hello(key: service.apiKey) != nil)
        b.send(Frames.subscribe(1, lostTimeoutMs: 5_000))
        #expect(await b.status(1)?.state == .active)
        b.send(Frames.observe(token: recorded))
        #expect(await b.frame { $0.isFound } != nil, "the live token resolves")

        await a.close(now: 0)
        #expect(await b.frame { $0.isLost } != nil, "the closed session's message is lost at once")
        let foundBefore = b.frames.filter(\.isFound).count
        b.send(Frames.observe(token: recorded))
        let status = await b.frame { if case .tokenStatus = $0.kind { return true } else { return false } }
        if case .tokenStatus(let body)? = status?.kind {
            #expect(body.valid == false)
            #expect(Array(body.token) == recorded)
        } else {
            Issue.record("no TokenStatus for a replayed token")
        }
        #expect(await b.settled())
        #expect(b.frames.filter(\.isFound).count == foundBefore, "a replay finds nothing")
        #expect(service.metric("sotto_invalid_tokens_total") == 1)
        b.cancel()
        keep(publication5)
    }

    /// Rotation and its grace run on the host's clock, a manual one: the test moves it instead of waiting.
    @Test func rotatedTokenResolvesDuringGraceOnly() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.rotationInterval = 1.5
        configuration.rotationGrace = 1.0
        let clock = ManualClock()
        let service = try await TestServer(configuration: configuration, clock: clock)
        defer { Task { await service.stop() } }
        let raw = try RawClient(service.address)
        defer { Task { await raw.close() } }
        let a = RawSession(raw)
        #expect(await a.hello(key: service.apiKey) != nil)
        a.send(Frames.publish(1, content: exhibit.content))
        #expect(await a.status(1)?.state == .active)
        guard let first = await a.frame(where: { $0.tokenDirective != nil })?.tokenDirective else {
            Issue.record("no token"); return
        }
        let b = RawSession(raw)
        #expect(await b.hello(key: service.apiKey, broadcasts: false) != nil)
        b.send(Frames.subscribe(1, lostTimeoutMs: 1_000))
        #expect(await b.status(1)?.state == .active)
        // Rotation: a second token directive.
        #expect(await clock.tick(by: 1.4))
        #expect(a.frames.compactMap(\.tokenDirective).count == 1, "not rotated before its interval")
        #expect(await clock.tick(by: 0.2))
        let rotated = await eventually(4) { a.frames.compactMap(\.tokenDirective).count >= 2 }
        #expect(rotated)
        b.send(Frames.observe(token: first))
        #expect(await b.frame(3) { $0.isFound } != nil, "the old token still resolves within its grace")
        #expect(await clock.tick(by: 1.1))
        b.send(Frames.observe(token: first))
        let status = await b.frame(3) { if case .tokenStatus = $0.kind { return true } else { return false } }
        if case .tokenStatus(let body)? = status?.kind { #expect(!body.valid && Array(body.token) == first) }
        else { Issue.record("the old token still resolves after its grace") }
        a.cancel()
        b.cancel()
    }
}

/// The service's turns end to end: sessions that say they take turns and hear each other get their slots
/// over the wire, in their own time (offsets from the frame), and the slots of one room do not overlap.
@Suite(.timeLimit(.minutes(1))) struct BroadcastTurnsOverServiceTests {
    /// Records each manager's turns with the instant they arrived.
    final class TurnsLog: Sendable {
        private let turns = Mutex<[(at: ContinuousClock.Instant, offsets: [Double], follow: Double)]>([])
        var handler: @Sendable ([Double], Double, UInt16?) -> Void { { offsets, follow, _ in self.turns.withLock { $0.append((.now, offsets, follow)) } } }
        /// The absolute starts of the slots received.
        var slots: [ContinuousClock.Instant] { turns.withLock { $0.flatMap { t in t.offsets.map { t.at + .seconds($0) } } } }
        /// Every slot offset received (s).
        var offsets: [Double] { turns.withLock { $0.flatMap(\.offsets) } }
        var count: Int { turns.withLock { $0.count } }
    }

    /// The room alias each manager's turns named last, by manager.
    final class AliasLog: Sendable {
        let values = Mutex<[Int: UInt16]>([:])
    }

    @Test func sessionsThatHearEachOtherGetSlotsThatDoNotOverlap() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let managers = [try await service.manager(), try await service.manager(), try await service.manager()]
        let logs = managers.map { _ in TurnsLog() }
        var subscriptions: [SubscriptionHandle] = []
        for (manager, log) in zip(managers, logs) {
            await manager.setTurnsHandler(log.handler)
            await manager.takeTurns(frameAirtime: 0.5)
            subscriptions.append(try await manager.subscribe(filter: exhibitFilter, now: 0, handler: { _ in }))
        }
        let tokens = [try await token(of: managers[0]), try await token(of: managers[1]), try await token(of: managers[2])]
        // Each hears the next one: one room of three.
        for i in 0..<3 { await heard(managers[i], token: tokens[(i + 1) % 3]) }
        #expect(await eventually(5) { logs.allSatisfy { $0.count > 0 } && logs.flatMap(\.slots).count >= 3 }, "every member got its turns")
        // The first slot starts the service's lead (0.3 s) after it was planned, as the offsets say.
        let first = logs.flatMap(\.offsets).min() ?? 0
        #expect(abs(first - 0.3) < 0.002, "\(first)")
        let slots = logs.flatMap(\.slots).sorted()
        #expect(slots.count >= 3)
        // 0.5 s of airtime plus the 0.08 s guard apart, give or take the frames' delivery on loopback (which
        // the guard is for: a loaded test machine may take more of it).
        let gaps = zip(slots.dropFirst(), slots).map { ($0 - $1).inSeconds }
        #expect(gaps.allSatisfy { $0 >= 0.45 }, "\(gaps)")
        // The first round's three slots follow one another (later rounds come after its open gap).
        #expect(gaps.prefix(2).allSatisfy { $0 <= 0.58 + 0.3 }, "\(gaps)")
        keep(subscriptions)
        for m in managers { await m.close(now: 0) }
    }

    /// A crowded room over the service: four sessions that can play room aliases get one each with their turns;
    /// an alias heard by a member of the room finds its holder's message, heard by a session outside the room it
    /// finds nothing.
    @Test func roomAliasesComeWithTheTurnsAndResolveInTheRoomOnly() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        var managers: [MessageManager] = []
        for _ in 0..<5 { managers.append(try await service.manager()) }
        let aliases = AliasLog()
        var handles: [Any] = [try await managers[0].publish(exhibit, now: 0)]
        let recorders = (0..<5).map { _ in EventRecorder() }
        for (i, manager) in managers.enumerated() {
            if i < 4 {
                await manager.setTurnsHandler { offsets, _, alias in
                    if let alias, !offsets.isEmpty { aliases.values.withLock { $0[i] = alias } }
                }
                await manager.takeTurns(frameAirtime: 0.54, aliasAirtime: 0.29)
            }
            handles.append(try await manager.subscribe(filter: exhibitFilter, now: 0, handler: recorders[i].handler))
        }
        var tokens: [[UInt8]] = []
        for manager in managers { tokens.append(try await token(of: manager)) }
        // 2 and 3 heard the publisher 0, 1 heard 2: one room of four, where 1 has not heard 0; 4 is in none. So 0
        // keeps getting slots, and (once the room's token slot went round) one that names its alias.
        for i in 2...3 { await heard(managers[i], token: tokens[0]) }
        await heard(managers[1], token: tokens[2])
        #expect(await eventually(15) { aliases.values.withLock { $0[0] } != nil }, "the publisher's turns name its alias")
        let alias = try #require(aliases.values.withLock { $0[0] })
        let given = Array(aliases.values.withLock { $0 }.values)
        #expect(Set(given).count == given.count && given.allSatisfy { $0 <= Payload.maxRoomAlias }, "\(given)")
        // Heard by 4, outside the room, the alias names nobody; as a token frame's bytes (not the modem's alias
        // frame, which is how aliases are played) it names nobody for 1 either.
        await managers[4].heard(frame: [], alias: alias, snr: 20, level: -30, now: 0)
        await managers[1].heard(frame: Payload.roomAlias(alias).frameBytes, snr: 20, level: -30, now: 0)
        try await Task.sleep(for: .milliseconds(500))
        #expect(recorders[4].all.isEmpty, "a session outside the room finds nothing from an alias")
        #expect(recorders[1].found.isEmpty, "a token frame that claims to be an alias names nobody")
        // Heard by 1, in the room, as the alias frame: it is the publisher.
        await managers[1].heard(frame: [], alias: alias, snr: 20, level: -30, now: 0)
        #expect(await eventually(5) { recorders[1].found == [exhibit] }, "1 found the publisher's message by its alias")
        keep(handles)
        for m in managers { await m.close(now: 0) }
    }

    @Test func anAirtimeNoFrameHasIsAProtocolError() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        let session = RawSession(client)
        #expect(await session.hello(key: service.apiKey) != nil)
        var frame = ClientFrame()
        var body = Sotto_Exchange_V1_TakeTurns()
        body.frameAirtimeMs = 60_000
        frame.kind = .takeTurns(body)
        session.send(frame)
        let error = await session.frame { if case .error = $0.kind { return true } else { return false } }
        if case .error(let body) = error?.kind { #expect(body.message.contains("5000 ms")) } else { Issue.record("no error frame") }
        session.cancel()
        await client.close()
    }
}
