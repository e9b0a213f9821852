import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import Testing

/// What the exchange does, written once against `MessageManager` and run on every backend: the embedded core
/// (one `LocalMatcher`), the service on SQLite, the service on PostgreSQL and three nodes sharing one
/// PostgreSQL (consecutive devices on different nodes). Each scenario checks the exact events; waits for
/// what takes time are bounded and generous, and "nothing more came" is checked after a `sync`, not a sleep.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ExchangeBehaviourTests {
    static let shopItem = try! Message(namespace: "museum", type: "shop", content: Array("Catalogue, 2nd edition".utf8))
    static let shopFilter = try! MessageFilter([.namespacedType(namespace: "museum", type: "shop")])
    static let cafeFilter = try! MessageFilter([.namespacedType(namespace: "museum", type: "cafe")])

    @Test(arguments: Backend.allCases)
    func publishAndSubscribeReturnAsSoonAsTheMatcherAnswers(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let device = try await exchange.device()
            let clock = ContinuousClock()
            for round in 0..<20 {
                let started = clock.now
                let publication = try await device.manager.publish(exhibit, now: 0)
                let subscription = try await device.manager.subscribe(filter: exhibitFilter, now: 0)
                let elapsed = clock.now - started
                #expect(await publication.status() == .active)
                #expect(await subscription.status() == .active)
                // Every backend answers within a fraction of the time a manager waits for an answer.
                #expect(elapsed < .seconds(MessageManager.acceptTimeout / 2), "round \(round) took \(elapsed)")
                await publication.cancel()
                await subscription.cancel()
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func aHeardPublisherIsFoundThenLostAfterTheLostTimeout(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device(), subscriber = try await exchange.device()
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 1.5, now: 0, handler: events.handler)
            let token = try await publisher.token()
            let heardAt = ContinuousClock.now
            await subscriber.hear(token: token)
            #expect(await events.waitFound(1, 10))
            #expect(await events.waitLost(1, 15), "lost once the lost timeout passed without a sighting")
            let lostAfter = (ContinuousClock.now - heardAt).inSeconds
            #expect(lostAfter >= 1.4, "lost \(lostAfter) s after the sighting, before the 1.5 s lost timeout")
            try await subscriber.sync()
            #expect(events.all == [.found(exhibit), .lost(exhibit)])
            if let found = exchange.metric("sotto_found_total"), let lost = exchange.metric("sotto_lost_total") {
                #expect(found == 1 && lost == 1, "found \(found), lost \(lost)")
            }
            keep(publication, subscription)
        }
    }

    @Test(arguments: Backend.allCases)
    func twoPublishersOfOneMessageAreFoundOnceAndLostOnlyWhenBothLeave(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let first = try await exchange.device(), second = try await exchange.device(), subscriber = try await exchange.device()
            let one = try await first.manager.publish(exhibit, now: 0)
            let other = try await second.manager.publish(exhibit, now: 0)
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
            try await subscriber.hear(first)
            try await subscriber.hear(second)
            #expect(await events.waitFound(1, 10))
            try await subscriber.sync()
            #expect(events.all == [.found(exhibit)], "one message is found once, however many publish it")

            await one.cancel()
            try await sync(first, subscriber)
            #expect(events.all == [.found(exhibit)], "still published by the second device")

            await other.cancel()
            #expect(await events.waitLost(1, 10))
            try await subscriber.sync()
            #expect(events.all == [.found(exhibit), .lost(exhibit)])
            keep(subscription)
        }
    }

    @Test(arguments: Backend.allCases)
    func unpublishingLosesTheMessageAtOnceAndPublishingAgainFindsItAgain(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device(), subscriber = try await exchange.device()
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
            try await subscriber.hear(publisher)
            #expect(await events.waitFound(1, 10))

            let unpublished = ContinuousClock.now
            await publication.cancel()
            #expect(await publication.status() == .inactive)
            #expect(await events.waitLost(1, 10), "lost at once, long before the 30 s lost timeout")
            #expect(ContinuousClock.now - unpublished < .seconds(10))

            // The subscriber heard the publisher a moment ago: the same message published again is found again.
            let again = try await publisher.manager.publish(exhibit, now: 0)
            #expect(await events.waitFound(2, 10))
            try await sync(publisher, subscriber)
            #expect(events.all == [.found(exhibit), .lost(exhibit), .found(exhibit)])
            keep(subscription, again)
        }
    }

    @Test(arguments: Backend.allCases)
    func aSubscriptionFindsOnlyTheTypesItsFilterAccepts(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device(), subscriber = try await exchange.device()
            let exhibitPublication = try await publisher.manager.publish(exhibit, now: 0)
            let shopPublication = try await publisher.manager.publish(Self.shopItem, now: 0)
            let exhibits = EventRecorder(), shop = EventRecorder(), cafe = EventRecorder()
            let subscriptions = [
                try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: exhibits.handler),
                try await subscriber.manager.subscribe(filter: Self.shopFilter, lostTimeout: 30, now: 0, handler: shop.handler),
                try await subscriber.manager.subscribe(filter: Self.cafeFilter, lostTimeout: 30, now: 0, handler: cafe.handler),
            ]
            try await subscriber.hear(publisher)
            #expect(await exhibits.waitFound(1, 10))
            #expect(await shop.waitFound(1, 10))
            try await sync(publisher, subscriber)
            #expect(exhibits.all == [.found(exhibit)])
            #expect(shop.all == [.found(Self.shopItem)])
            #expect(cafe.all.isEmpty, "nobody publishes museum/cafe")
            keep(subscriptions, exhibitPublication, shopPublication)
        }
    }

    @Test(arguments: Backend.allCases)
    func aSubscriptionsTTLEndsItOnceAfterLosingWhatItFound(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device(), subscriber = try await exchange.device()
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            // The subscriber hears the publisher while scanning for something else...
            let scanning = try await subscriber.manager.subscribe(filter: Self.cafeFilter, lostTimeout: 30, now: 0)
            try await subscriber.hear(publisher)
            try await subscriber.sync()
            // ...so its 2 s subscription finds the exhibit when it starts, and the TTL counts from there.
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, strategy: try Strategy(ttl: .seconds(2)),
                                                                      lostTimeout: 30, now: 0, handler: events.handler)
            #expect(await events.waitFound(1, 10))
            #expect(await events.wait(15) { $0.last == .expired }, "expired after its 2 s TTL: \(events.all)")
            try await subscriber.sync()
            #expect(events.all == [.found(exhibit), .lost(exhibit), .expired])
            #expect(await subscription.status() == .expired)
            #expect(subscriber.expired.count == 1, "one expiry: \(subscriber.expired)")
            if let lost = exchange.metric("sotto_lost_total") { #expect(lost == 1) }
            keep(publication, scanning)
        }
    }

    @Test(arguments: Backend.allCases)
    func aPublicationsTTLWithdrawsItOnceFromEverySubscriber(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device()
            let subscribers = [try await exchange.device(), try await exchange.device()]
            let recorders = [EventRecorder(), EventRecorder()]
            var subscriptions: [SubscriptionHandle] = []
            for (subscriber, events) in zip(subscribers, recorders) {
                subscriptions.append(try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler))
                try await subscriber.hear(publisher)
                try await subscriber.sync()
            }
            // Both heard the publisher before it published: they find the message as it appears, and lose it
            // when its 2 s TTL ends.
            let publication = try await publisher.manager.publish(exhibit, strategy: try Strategy(ttl: .seconds(2)), now: 0)
            for events in recorders {
                #expect(await events.waitFound(1, 10))
                #expect(await events.waitLost(1, 15), "lost when the publication expired")
            }
            #expect(await eventually(10) { await publication.status() == .expired })
            try await sync(publisher, subscribers[0], subscribers[1])
            for events in recorders { #expect(events.all == [.found(exhibit), .lost(exhibit)]) }
            #expect(publisher.expired.count == 1, "the publisher is told once: \(publisher.expired)")
            #expect(subscribers.allSatisfy { $0.expired.isEmpty })
            if let lost = exchange.metric("sotto_lost_total") { #expect(lost == 2) }
            keep(subscriptions)
        }
    }

    @Test(arguments: Backend.allCases)
    func aClosedSessionsMessagesAreLostAtOnceAndItsTokenStopsResolving(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device(), subscriber = try await exchange.device()
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let token = try await publisher.token()
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
            await subscriber.hear(token: token)
            #expect(await events.waitFound(1, 10))

            await publisher.close()
            #expect(await events.waitLost(1, 10), "lost at once, long before the 30 s lost timeout")
            try await subscriber.sync()
            #expect(events.all == [.found(exhibit), .lost(exhibit)])

            // A device that hears the closed session's token later is told it resolves to nothing.
            let latecomer = try await exchange.device()
            let late = EventRecorder()
            let lateSubscription = try await latecomer.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: late.handler)
            await latecomer.hear(token: token)
            try await latecomer.sync()
            #expect(latecomer.invalidTokens == [token])
            #expect(late.all.isEmpty)
            keep(publication, subscription, lateSubscription)
        }
    }

    @Test(arguments: Backend.allCases)
    func anotherProjectNeitherFindsTheMessageNorResolvesTheToken(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device()
            let outsider = try await exchange.device(otherProject: true)
            let insider = try await exchange.device()
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let token = try await publisher.token()
            let outside = EventRecorder(), inside = EventRecorder()
            let outsideSubscription = try await outsider.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: outside.handler)
            let insideSubscription = try await insider.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: inside.handler)
            await outsider.hear(token: token)
            await insider.hear(token: token)
            #expect(await inside.waitFound(1, 10), "the same project finds it")
            try await sync(outsider, insider)
            #expect(outside.all.isEmpty, "another project never finds it")
            #expect(outsider.invalidTokens == [token], "another project's token resolves to nothing")
            #expect(insider.invalidTokens.isEmpty)
            #expect(inside.all == [.found(exhibit)])
            keep(publication, outsideSubscription, insideSubscription)
        }
    }

    @Test(arguments: Backend.allCases)
    func aScanOnlyPublisherThatHearsTheSubscriberIsFound(_ backend: Backend) async throws {
        try await withDeployment(backend) { exchange in
            let publisher = try await exchange.device(), subscriber = try await exchange.device()
            let publication = try await publisher.manager.publish(exhibit, strategy: try Strategy(discoveryMode: .scan), now: 0)
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
            // The subscriber hears nothing; the publisher hears the subscriber.
            try await publisher.hear(subscriber)
            #expect(await events.waitFound(1, 10))
            try await sync(publisher, subscriber)
            #expect(events.all == [.found(exhibit)])
            #expect(await publisher.manager.transmitPlan.isEmpty, "a scan-only publisher plays no token")
            keep(publication, subscription)
        }
    }
}
