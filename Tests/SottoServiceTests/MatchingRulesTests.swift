import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// Matching rules as seen through the service: supporters, replacement, scan-only sessions, expiry.
@Suite(.timeLimit(.minutes(1))) struct MatchingRulesOverServiceTests {
    func tokenOf(_ session: RawSession) async -> [UInt8]? { await session.frame(where: { $0.tokenDirective != nil })?.tokenDirective }

    @Test func identicalMessagesFromTwoPublishersAreOneUntilBothLeave() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let p1 = RawSession(client), p2 = RawSession(client), s = RawSession(client)
        for session in [p1, p2] {
            #expect(await session.hello(key: service.apiKey) != nil)
            session.send(Frames.publish(1, content: exhibit.content))
            #expect(await session.status(1)?.state == .active)
        }
        #expect(await s.hello(key: service.apiKey, broadcasts: false) != nil)
        s.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
        #expect(await s.status(1)?.state == .active)
        guard let t1 = await tokenOf(p1), let t2 = await tokenOf(p2) else { Issue.record("no tokens"); return }
        s.send(Frames.observe(token: t1))
        s.send(Frames.observe(token: t2))
        #expect(await s.frame { $0.isFound } != nil)
        #expect(await s.settled())
        #expect(s.frames.filter(\.isFound).count == 1, "one message, two supporters: found once")
        p1.send(Frames.unpublish(1))
        #expect(await p1.settled())
        #expect(await s.settled())
        let lostEarly = s.frames.contains { $0.isLost }
        #expect(!lostEarly, "still supported by the other publisher")
        p2.send(Frames.unpublish(1))
        #expect(await s.frame { $0.isLost } != nil)
        #expect(s.frames.filter(\.isLost).count == 1)
        for session in [p1, p2, s] { session.cancel() }
    }

    @Test func replacedPublicationLosesTheOldAndFindsTheNew() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let p = RawSession(client), s = RawSession(client)
        #expect(await p.hello(key: service.apiKey) != nil)
        p.send(Frames.publish(1, content: [1]))
        #expect(await p.status(1)?.state == .active)
        #expect(await s.hello(key: service.apiKey) != nil)
        s.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
        #expect(await s.status(1)?.state == .active)
        guard let t = await tokenOf(p) else { Issue.record("no token"); return }
        s.send(Frames.observe(token: t))
        #expect(await s.frame { $0.isFound } != nil)
        p.send(Frames.publish(1, content: [2]))  // same operation, new content
        #expect(await eventually(3) { s.frames.filter(\.isFound).count == 2 })
        let events: [(String, [UInt8])] = s.frames.compactMap { frame in
            switch frame.kind {
            case .found(let body): return ("F", Array(body.message.content))
            case .lost(let body): return ("L", Array(body.message.content))
            default: return nil
            }
        }
        #expect(events.map(\.0) == ["F", "L", "F"], "\(events)")
        #expect(events.map(\.1) == [[1], [1], [2]])
        p.cancel()
        s.cancel()
    }

    @Test func scanOnlySessionsGetNoToken() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let scanner = RawSession(client)
        #expect(await scanner.hello(key: service.apiKey, broadcasts: false) != nil)
        scanner.send(Frames.publish(1, content: [1]))
        #expect(await scanner.status(1)?.state == .active)
        #expect(await scanner.settled())
        let hasToken = scanner.frames.contains { $0.tokenDirective != nil }
        #expect(!hasToken, "a scan-only session plays no token")
        scanner.cancel()
    }

    @Test func managerSubscriptionExpiresOverTheService() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let a = try await service.manager()
        let b = try await service.manager(lostTimeout: 30)
        let publication = try await a.publish(exhibit, strategy: try Strategy(ttl: .seconds(60)), now: 0)
        let recorder = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, strategy: try Strategy(ttl: .seconds(1)), now: 0,
                                                 handler: recorder.handler)
        await heard(b, token: try await token(of: a))
        #expect(await recorder.waitFound())
        #expect(await recorder.wait(4) { $0.last == .expired }, "expired: \(recorder.all)")
        #expect(recorder.all == [.found(exhibit), .lost(exhibit), .expired])
        #expect(await subscription.status() == .expired)
        #expect(await publication.status() == .active)
        let events = await collect(subscription.events, for: 0.2)
        #expect(events.isEmpty || events.last == .expired, "the event sequence ends with the expiry")
        keep(publication, subscription)
        await a.close(now: 0)
        await b.close(now: 0)
    }
}
