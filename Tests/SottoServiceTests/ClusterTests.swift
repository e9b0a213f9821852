import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import Testing

/// What only a cluster does: nodes sharing one PostgreSQL find each other's devices, fire each timer once
/// (the log's time drives them, not the nodes'), let a client whose node stops resume on another, and let a
/// late node start from a snapshot once the log before it is gone.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ClusterTests {
    static let sunflowers = try! Message(namespace: "museum", type: "exhibit", content: Array("Sunflowers, Van Gogh, 1888.".utf8))
    static let onLoan = try! Message(namespace: "museum", type: "exhibit", content: Array("on loan".utf8))

    @Test func aSubscriberOnOneNodeFindsAPublisherOnAnotherAndBothFindAThirdNodesDevice() async throws {
        try await withCluster(nodes: 3) { cluster in
            let publisher = try await cluster.device(node: 0)
            let subscriber = try await cluster.device(node: 1)
            let third = try await cluster.device(node: 2)
            let publications = [try await publisher.manager.publish(exhibit, now: 0),
                                try await third.manager.publish(Self.sunflowers, now: 0)]
            let atSubscriber = EventRecorder(), atPublisher = EventRecorder()
            let subscriptions = [
                try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: atSubscriber.handler),
                try await publisher.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: atPublisher.handler),
            ]
            try await subscriber.hear(publisher)
            #expect(await atSubscriber.waitFound(1, 10), "node 1's subscriber finds node 0's publisher")
            try await subscriber.hear(third)
            try await publisher.hear(third)
            #expect(await atSubscriber.waitFound(2, 10))
            #expect(await atPublisher.waitFound(1, 10))
            try await sync(third, subscriber, publisher)
            #expect(atSubscriber.all == [.found(exhibit), .found(Self.sunflowers)])
            #expect(atPublisher.all == [.found(Self.sunflowers)])
            // Each found went out through the node holding the subscriber's stream, once.
            #expect([0, 1, 2].map { cluster.metric("sotto_found_total", node: $0) } == [1, 2, 0])
            keep(publications, subscriptions)
        }
    }

    /// The turns of a room whose sessions are held by different nodes: every node plans the same rounds from the
    /// log and delivers its own sessions' slots, which do not overlap across nodes. (Each node delivers when it
    /// reads the entry: here within about 15 ms of the others; a node reading much later shifts its sessions'
    /// slots by that much, which the 80 ms guard must absorb.)
    @Test func theTurnsOfARoomSpreadOverNodesDoNotOverlap() async throws {
        try await withCluster(nodes: 3) { cluster in
            var managers: [MessageManager] = []
            for node in 0..<3 { managers.append(try await cluster.manager(node: node)) }
            let logs = managers.map { _ in BroadcastTurnsOverServiceTests.TurnsLog() }
            var subscriptions: [SubscriptionHandle] = []
            for (manager, log) in zip(managers, logs) {
                await manager.setTurnsHandler(log.handler)
                await manager.takeTurns(frameAirtime: 0.5)
                subscriptions.append(try await manager.subscribe(filter: exhibitFilter, now: 0, handler: { _ in }))
            }
            var tokens: [[UInt8]] = []
            for manager in managers { tokens.append(try await token(of: manager)) }
            for i in 0..<3 { await heard(managers[i], token: tokens[(i + 1) % 3]) }
            #expect(await eventually(10) { logs.allSatisfy { $0.count > 0 } && logs.flatMap(\.slots).count >= 3 }, "every member got its turns")
            let slots = logs.flatMap(\.slots).sorted()
            #expect(slots.count >= 3)
            let gaps = zip(slots.dropFirst(), slots).map { ($0 - $1).inSeconds }
            #expect(gaps.allSatisfy { $0 >= 0.45 }, "\(gaps)")
            keep(subscriptions)
            for m in managers { await m.close(now: 0) }
        }
    }

    @Test func everyNodeAppendsToTheLogAndAppliesEveryEntry() async throws {
        try await withCluster(nodes: 3) { cluster in
            let publisher = try await cluster.device(node: 0)
            let subscriber = try await cluster.device(node: 1)
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
            try await subscriber.hear(publisher)
            #expect(await events.waitFound(1, 10))

            for node in 0..<3 {
                // A node without clients appends its heartbeats once its log connection is up (slow on busy cores).
                #expect(await eventually(10) { cluster.metric("sotto_log_appends_total", node: node) > 0 },
                        "node \(node) appends (its heartbeats at least)")
            }
            // Hello, publish; Hello, subscribe, observe; and the syncs' probes: commands from both devices' nodes.
            #expect(cluster.metric("sotto_log_commands_total", node: 0) >= 2)
            #expect(cluster.metric("sotto_log_commands_total", node: 1) >= 3)
            // Every node applies every entry, its own and the others' (no snapshot has cut the log yet).
            let state = try await cluster.logState()
            #expect(state.firstEntry == 1 && state.snapshots.isEmpty, "\(state)")
            let appliedEverywhere = await eventually(15) {
                (0..<3).allSatisfy { cluster.metric("sotto_log_entries_applied_total", node: $0) >= Double(state.head) }
            }
            #expect(appliedEverywhere, "applied: \((0..<3).map { cluster.metric("sotto_log_entries_applied_total", node: $0) }), head \(state.head)")
            #expect(cluster.total("sotto_log_appends_total") <= Double(try await cluster.logState().head))
            #expect(await cluster.waitForLogProgress(20), "the log keeps growing on every node (their heartbeats)")
            keep(publication, subscription)
        }
    }

    @Test func aLostTimeoutFiresOnceInTheWholeCluster() async throws {
        try await withCluster(nodes: 3) { cluster in
            let publisher = try await cluster.device(node: 0)
            let subscriber = try await cluster.device(node: 1)
            let bystander = try await cluster.device(node: 2)
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let events = EventRecorder(), elsewhere = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 1.5, now: 0, handler: events.handler)
            let other = try await bystander.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: elsewhere.handler)
            try await subscriber.hear(publisher)
            #expect(await events.waitFound(1, 10))
            #expect(await events.waitLost(1, 15), "lost after the 1.5 s lost timeout")
            // Two more seconds of log on every node: a timer firing on each node would have fired by now.
            #expect(await cluster.waitForLogProgress(40))
            try await sync(subscriber, bystander)
            #expect(events.all == [.found(exhibit), .lost(exhibit)])
            #expect(elsewhere.all.isEmpty, "the bystander heard nothing")
            #expect(cluster.total("sotto_found_total") == 1)
            #expect(cluster.total("sotto_lost_total") == 1, "lost per node: \((0..<3).map { cluster.metric("sotto_lost_total", node: $0) })")
            keep(publication, subscription, other)
        }
    }

    @Test func aTTLExpiryFiresOnceInTheWholeCluster() async throws {
        try await withCluster(nodes: 3) { cluster in
            let publisher = try await cluster.device(node: 0)
            let subscribers = [try await cluster.device(node: 1), try await cluster.device(node: 2)]
            let recorders = [EventRecorder(), EventRecorder()]
            var subscriptions: [SubscriptionHandle] = []
            for (subscriber, events) in zip(subscribers, recorders) {
                subscriptions.append(try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler))
                try await subscriber.hear(publisher)
                try await subscriber.sync()
            }
            let publication = try await publisher.manager.publish(exhibit, strategy: try Strategy(ttl: .seconds(2)), now: 0)
            for events in recorders {
                #expect(await events.waitFound(1, 10))
                #expect(await events.waitLost(1, 15), "lost when the publication expired")
            }
            #expect(await eventually(10) { await publication.status() == .expired })
            #expect(await cluster.waitForLogProgress(40))
            try await sync(publisher, subscribers[0], subscribers[1])
            for events in recorders { #expect(events.all == [.found(exhibit), .lost(exhibit)]) }
            let expiries = ([publisher] + subscribers).map(\.expired.count)
            #expect(expiries == [1, 0, 0], "one expiry, told to the publisher only")
            #expect([0, 1, 2].map { cluster.metric("sotto_lost_total", node: $0) } == [0, 1, 1])
            keep(subscriptions)
        }
    }

    /// Either at once, or only once the others have declared its node dead (its sessions detached, waiting).
    @Test(arguments: [false, true])
    func aClientWhoseNodeStopsResumesItsSessionOnAnotherNode(afterItsNodeIsDeclaredDead: Bool) async throws {
        var configuration = TestCluster.fastConfiguration
        configuration.sessionGrace = 10  // the client's back-off may reach a few seconds before it is let through
        try await withCluster(nodes: 3, configuration: configuration) { cluster in
            let publisher = try await cluster.device(node: 1)
            let kept = try await publisher.manager.publish(exhibit, now: 0)
            let leaving = try await publisher.manager.publish(Self.onLoan, now: 0)

            // The roaming device reaches node 0 through a relay, as through a load balancer.
            let proxy = try await SwitchingProxy(to: cluster.node(0).port)
            let connections = ConnectionLog()
            let link = RecordingLink(try RemoteMatcher(options: .init(endpoint: proxy.address, apiKey: cluster.apiKey)))
            let manager = MessageManager(link: link, lostTimeout: 30, onConnection: { connections.append($0) })
            let roaming = Device(manager: manager, link: link, name: "roaming")
            do {
                try await manager.connect(timeout: 10)
                let events = EventRecorder()
                let subscription = try await manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
                try await roaming.hear(publisher)
                #expect(await events.waitFound(2, 10))
                let token = await manager.token

                // Node 0 stops; the relay sends new connections to node 2 (at once, or once node 0 was silent in
                // the log for longer than the node timeout); one message goes away meanwhile.
                let stoppedNode = await cluster.node(0).server.host.nodeID
                if !afterItsNodeIsDeclaredDead { proxy.switchTarget(to: cluster.node(2).port) }
                await cluster.stop(node: 0)
                await leaving.cancel()
                if afterItsNodeIsDeclaredDead {
                    let timeout = cluster.configuration.nodeTimeout
                    let dead = await eventually(15) { (try? await cluster.silence(of: stoppedNode)).map { $0 > timeout } ?? false }
                    #expect(dead, "node 0 silent in the log for \(timeout) s")
                    #expect(!connections.all.contains(.connected(resumed: true)), "no node to resume on yet")
                    proxy.switchTarget(to: cluster.node(2).port)
                }
                #expect(await eventually(15) { connections.all.contains(.connected(resumed: true)) }, "\(connections.all)")
                let connects = connections.all.filter { if case .connected = $0 { return true } else { return false } }
                #expect(connects == [.connected(resumed: false), .connected(resumed: true)], "one session, resumed on node 2")
                #expect(await events.waitLost(1, 10), "the message that left is lost")
                try await sync(publisher, roaming)
                #expect(Set(events.found) == [exhibit, Self.onLoan] && events.found.count == 2, "found neither lost nor repeated: \(events.all)")
                #expect(events.lost == [Self.onLoan])
                #expect(await manager.token == token, "a resumed session keeps its token")
                #expect(cluster.metric("sotto_sessions_resumed_total", node: 2) == 1)

                // Node 2 serves the session now: the other message goes too.
                await kept.cancel()
                #expect(await events.waitLost(2, 10))
                try await sync(publisher, roaming)
                #expect(events.lost == [Self.onLoan, exhibit])
                #expect(events.all.count == 4, "\(events.all)")
                keep(subscription)
            } catch {
                await roaming.close()
                await proxy.close()
                throw error
            }
            await roaming.close()
            await proxy.close()
        }
    }

    @Test func aLateNodeStartsFromTheSnapshotOnceTheLogBeforeItIsGone() async throws {
        var configuration = TestCluster.fastConfiguration
        configuration.snapshotInterval = 0.5
        try await withCluster(nodes: 3, configuration: configuration) { cluster in
            let publisher = try await cluster.device(node: 0)
            let subscriber = try await cluster.device(node: 1)
            let publication = try await publisher.manager.publish(exhibit, now: 0)
            let events = EventRecorder()
            let subscription = try await subscriber.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: events.handler)
            try await subscriber.hear(publisher)
            #expect(await events.waitFound(1, 10))

            // Two snapshots: the entries up to the older one are deleted, and with them the publication's.
            let truncated = await eventually(20) {
                guard let state = try? await cluster.logState(), state.snapshots.count == 2, let first = state.firstEntry else { return false }
                return first > state.snapshots[0]
            }
            let before = try await cluster.logState()
            #expect(truncated, "\(before)")
            #expect(before.snapshots.count <= 2 && (before.firstEntry ?? 0) > (before.snapshots.first ?? .max), "\(before)")

            // A fourth node starts now: what it knows of the publication comes from the snapshot.
            let late = try await cluster.startNode()
            let newcomer = try await cluster.device(node: late)
            let found = EventRecorder()
            let lateSubscription = try await newcomer.manager.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: found.handler)
            try await newcomer.hear(publisher)
            #expect(await found.waitFound(1, 10), "the late node's device finds a publication made before the node started")
            // And the others find what the late node's device publishes.
            let latePublication = try await newcomer.manager.publish(Self.sunflowers, now: 0)
            try await subscriber.hear(newcomer)
            #expect(await events.waitFound(2, 10))
            try await sync(publisher, newcomer, subscriber)
            #expect(found.all == [.found(exhibit)])
            #expect(events.all == [.found(exhibit), .found(Self.sunflowers)])

            // It did not replay the log from its beginning (gone anyway), and holds the same sessions.
            let applied = cluster.metric("sotto_log_entries_applied_total", node: late)
            let after = try await cluster.logState()
            #expect(applied + Double(before.snapshots.first ?? 0) <= Double(after.head), "applied \(applied); before: \(before); after: \(after)")
            let sameSessions = await eventually(10) {
                let first = await cluster.node(0).server.host.sessionCount
                return await cluster.node(late).server.host.sessionCount == first
            }
            #expect(sameSessions)
            keep(publication, subscription, lateSubscription, latePublication)
        }
    }
}
