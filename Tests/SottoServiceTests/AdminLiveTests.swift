import Foundation
import NIOCore
import NIOPosix
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
@testable import SottoExchangeService
import SottoExchangeWire
import Synchronization
import Testing

/// The live views of the admin API (issue 34): fed by the service's own state (``MatcherHost/statistics()``), as
/// JSON and as server-sent events.
@Suite(.timeLimit(.minutes(1))) struct AdminLiveTests {
    @Test func theLiveViewCountsAKnownRunOfSessionsAPublicationAndASighting() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let secret = try await service.store.createOperator(name: "alice").secret
        let host = service.server.host
        let live = LiveFeed { await host.statistics() }
        let api = AdminAPI(store: service.store, live: live)
        await live.sample()  // the baseline

        let publisher = try await service.manager()
        let subscriber = try await service.manager()
        let publication = try await publisher.publish(exhibit, now: 0)
        let recorder = EventRecorder()
        let subscription = try await subscriber.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        await heard(subscriber, token: try await token(of: publisher))
        #expect(await recorder.waitFound())
        await live.sample()

        let answer = await AdminBeaconTests.call(api, secret, "GET", "/api/projects/\(service.project.name)/live")
        #expect(answer.status == 200, "\(String(decoding: answer.body, as: UTF8.self))")
        let view = try #require(answer.json)
        #expect(view["project"] as? String == service.project.id && view["name"] as? String == service.project.name)
        let current = try #require(view["current"] as? [String: Any])
        #expect(current["sessions"] as? Int == 2)
        #expect(current["publications"] as? Int == 1 && current["subscriptions"] as? Int == 1)
        #expect((current["sightingsPerSecond"] as? Double ?? 0) > 0 && (current["foundPerSecond"] as? Double ?? 0) > 0)
        #expect(current["lostPerSecond"] as? Double == 0 && current["invalidTokensPerSecond"] as? Double == 0)
        #expect(current["medianSNR"] as? Double == 20.5, "the sighting's 20 dB, in its 1 dB bin")
        #expect(view["publicationsByType"] as? [String: Int] == ["museum/exhibit": 1])
        #expect(view["subscriptionsByType"] as? [String: Int] == ["museum/exhibit": 1])
        #expect((view["history"] as? [Any])?.count == 1, "the project did nothing at the baseline: its first point is this one")
        // The counters behind the rates: exactly what happened.
        let counters = try #require(await host.statistics().counters[service.project.id])
        #expect(counters.sightings == 1 && counters.found == 1 && counters.lost == 0 && counters.rateLimited == 0)

        // A token that resolves to nothing, and what the view of an unknown project or a project key says.
        await heard(subscriber, token: [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(await eventually { await host.statistics().counters[service.project.id]?.invalidTokens == 1 })
        #expect(await AdminBeaconTests.call(api, secret, "GET", "/api/projects/nope/live").status == 404)
        #expect(await AdminBeaconTests.call(api, service.apiKey, "GET", "/api/projects/\(service.project.id)/live").status == 401)
        let audit = try await service.store.auditEntries(limit: 5).map(\.action)
        #expect(audit.contains("live.view"))
        keep(publication, subscription)
        await publisher.close(now: 0)
        await subscriber.close(now: 0)
    }

    @Test func framesRefusedOverAKeysRateAreCountedForItsProject() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let host = service.server.host
        let live = LiveFeed { await host.statistics() }
        await live.sample()
        let slow = try await service.store.createKey(project: service.project.id, label: "slow", ratePerSecond: 0.5, burst: 2).key
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let session = RawSession(client)
        #expect(await session.hello(key: slow) != nil)
        for op in 1...8 { session.send(Frames.publish(UInt32(op), content: [UInt8(op)])) }
        #expect(await eventually { (await host.statistics().counters[service.project.id]?.rateLimited ?? 0) >= 4 })
        await live.sample()
        let view = await live.view(project: service.project.id)
        #expect(view.current.rateLimitedPerSecond > 0 && view.current.sessions == 1, "\(view.current)")
        session.cancel()
    }

    @Test func theEventStreamDeliversAPointASecondAndStopsWhenItsClientLeaves() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let secret = try await service.store.createOperator(name: "alice").secret
        let host = service.server.host
        let live = LiveFeed(interval: 0.2) { await host.statistics() }
        let feeding = Task { await live.run() }
        defer { feeding.cancel() }
        let listener = try await AdminListener.bind(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil)
        let serving = Task { try await listener.serve(api: AdminAPI(store: service.store, live: live)) }
        defer { listener.close(); serving.cancel() }
        let port = try #require(listener.address.split(separator: ":").last.flatMap { Int($0) })

        let publisher = try await service.manager()
        let text = try await withDeadline(10, "two events") { () -> String in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
            return try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(ByteBuffer(string: """
                    GET /api/projects/\(service.project.id)/live/events HTTP/1.1\r
                    Host: 127.0.0.1\r
                    Authorization: Bearer \(secret)\r
                    Accept: text/event-stream\r
                    \r

                    """))
                var text = ""
                for try await chunk in inbound {
                    text += String(buffer: chunk)
                    if text.components(separatedBy: "data: ").count > 2 { break }
                }
                return text
            }
        }
        // The client has left (its connection closed): the stream stops within a couple of points.
        #expect(text.hasPrefix("HTTP/1.1 200") && text.contains("Content-Type: text/event-stream"), "\(text)")
        #expect(!text.contains("Content-Length"), "\(text)")
        let event = try #require(text.components(separatedBy: "data: ").dropFirst().first?.components(separatedBy: "\n\n").first)
        let point = try #require(try JSONSerialization.jsonObject(with: Data(event.utf8)) as? [String: Any])
        #expect(point["sessions"] as? Int == 1, "\(point)")
        #expect(await eventually(5) { await live.watcherCount == 0 }, "the watcher is forgotten once its client left")
        await publisher.close(now: 0)
    }
}

/// The console's beacons and live view in headless Chromium (Tests/Browser/live-check.mjs under node, as
/// ``AdminBrowserTests``): a beacon registered with an attachment of markup shows it as text; the live numbers
/// change as the test opens two sessions, a publication and a sighting while the page watches.
@Suite(.timeLimit(.minutes(1)), .enabled(if: consoleChromium != nil && consoleNode != nil, "no chromium or node (scripts/install-deps)"))
struct AdminLiveBrowserTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Browser/live-check.mjs").path

    /// Runs the driver and returns its output, a JSON line (a dedicated thread waits for the process, not the pool).
    static func drive(url: String, secret: String, profile: String, project: String) async throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try #require(consoleNode))
        process.arguments = [script, try #require(consoleChromium), url, profile, project]
        process.environment = ["CONSOLE_SECRET": secret, "PATH": "/usr/bin:/bin", "HOME": profile]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            process.terminationHandler = { _ in continuation.resume() }
            do { try process.run() } catch { continuation.resume() }
        }
        return String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    @Test func theConsoleShowsABeaconsMarkupAsTextAndItsLiveNumbersChange() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.registryPollInterval = 0.2  // the beacon the page registers reaches the matcher soon
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let secret = try await service.store.createOperator(name: "alice").secret
        let host = service.server.host
        let live = LiveFeed(interval: 0.5) { await host.statistics() }
        let feeding = Task { await live.run() }
        defer { feeding.cancel() }
        let listener = try await AdminListener.bind(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil)
        let serving = Task { try await listener.serve(api: AdminAPI(store: service.store, live: live)) }
        defer { listener.close(); serving.cancel() }

        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let driving = Task { try await Self.drive(url: "http://\(listener.address)/", secret: secret, profile: directory + "/profile",
                                                  project: service.project.name) }
        // Once the page watches (and has registered its beacon), the sessions open and hear each other.
        let watching = await eventually(40) {
            let attachments = (try? await service.store.beacons().first?.attachments.count) ?? 0
            return await live.watcherCount > 0 && attachments == 1
        }
        #expect(watching)
        // The beacon the page registered, heard by a visitor of the project subscribed to its attachments' type: found.
        let visitor = try await Device.remote(service.address, key: service.apiKey, name: "visitor")
        let beaconFinds = EventRecorder()
        let beaconSubscription = try await visitor.manager.subscribe(filter: try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")]),
                                                                     lostTimeout: 30, now: 0, handler: beaconFinds.handler)
        let beaconFound = await eventually(10) {
            await visitor.manager.heard(frame: Payload.beacon([0xBE, 0xAC, 0x01]).frameBytes, snr: 20, level: -30, now: 0)
            return await beaconFinds.waitFound(1, 0.5)
        }
        #expect(beaconFound, "a subscriber hears the beacon registered on the page and finds its attachment")
        keep(beaconSubscription)
        await visitor.close()  // (the page then waits for the two sessions below)
        let publisher = try await service.manager()
        let subscriber = try await service.manager()
        let publication = try await publisher.publish(exhibit, now: 0)
        let recorder = EventRecorder()
        let subscription = try await subscriber.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        await heard(subscriber, token: try await token(of: publisher))
        #expect(await recorder.waitFound())

        let text = try await driving.value
        let seen = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? ["error": "no answer: \(text)"]
        #expect(seen["error"] == nil, "\(seen)")
        #expect(seen["loggedIn"] as? Bool == true && seen["liveShown"] as? Bool == true && seen["sessionsBefore"] as? String == "0", "\(seen)")
        #expect(seen["beaconListed"] as? Bool == true && seen["attachmentShown"] as? Bool == true, "\(seen)")
        let markup = try #require(seen["markup"] as? String)
        #expect(seen["attachmentText"] as? String == "museum/exhibit: " + markup, "the attachment is shown as its text")
        #expect(seen["markupInTable"] as? Int == 0 && seen["pwned"] as? Int == 0, "no element made from it, no script run")
        #expect(seen["sessionsChanged"] as? Bool == true && seen["sightingsSeen"] as? Bool == true, "\(seen)")
        #expect((seen["sparkPoints"] as? Int ?? 0) >= 2, "\(seen)")
        let beacon = try #require(try await service.store.beacons().first)
        #expect(beacon.id == [0xBE, 0xAC, 0x01] && beacon.attachments.first.map { String(decoding: $0.content, as: UTF8.self) } == markup)
        #expect(beaconFinds.found.map { String(decoding: $0.content, as: UTF8.self) } == [markup], "the visitor found the page's attachment: \(beaconFinds.all)")
        keep(publication, subscription)
        await publisher.close(now: 0)
        await subscriber.close(now: 0)
    }
}

/// The live views of a service of several nodes (issue 34): each node shares its counters through the store
/// (``ExchangeStore/shareLiveCounters(node:counters:time:)``), and every node's live view counts the whole service.
@Suite(.timeLimit(.minutes(1))) struct ClusterLiveTests {
    /// A ``LiveFeed`` fed by hand: its clock and the statistics of each sample.
    final class Feed: Sendable {
        let time = Mutex(1_000.0)
        let statistics = Mutex(ServiceStatistics(census: [:], counters: [:]))
        var feed: LiveFeed { LiveFeed(clock: { self.time.withLock { $0 } }, source: { self.statistics.withLock { $0 } }) }
    }

    static func counters(sightings: Int, snr bin: Int? = nil) -> ProjectCounters {
        var counters = ProjectCounters()
        counters.sightings = sightings
        if let bin { counters.snrHistogram = [Int](repeating: 0, count: ProjectCounters.snrBins); counters.snrHistogram[bin] = sightings }
        return counters
    }

    @Test func otherNodesCountFromTheirSecondSampleOnAndNeverBackwards() async {
        let input = Feed()
        let live = input.feed
        input.statistics.withLock { $0.counters = ["p": Self.counters(sightings: 5, snr: 40)]; $0.otherNodes = ["n_b": ["p": Self.counters(sightings: 100, snr: 30)]] }
        await live.sample()
        // 2 s later: 4 more here, 30 more on node b, and node c appears with 1 000 since its own start (its baseline).
        input.time.withLock { $0 += 2 }
        input.statistics.withLock {
            $0.counters = ["p": Self.counters(sightings: 9, snr: 40)]
            $0.otherNodes = ["n_b": ["p": Self.counters(sightings: 130, snr: 30)], "n_c": ["p": Self.counters(sightings: 1_000)]]
        }
        await live.sample()
        var point = await live.view(project: "p").current
        #expect(point.sightingsPerSecond == 17, "(4 + 30) / 2 s: \(point)")
        #expect(point.medianSNR == Double(ProjectCounters.snrFloor + 30) + 0.5, "most of the new sightings were node b's, at bin 30")
        // Node b is gone (stopped, or its row went stale); node c counted 10 more: no negative rate from b.
        input.time.withLock { $0 += 1 }
        input.statistics.withLock { $0.otherNodes = ["n_c": ["p": Self.counters(sightings: 1_010)]] }
        await live.sample()
        point = await live.view(project: "p").current
        #expect(point.sightingsPerSecond == 10, "\(point)")
        // A project only another node has counted appears too.
        input.time.withLock { $0 += 1 }
        input.statistics.withLock { $0.otherNodes = ["n_c": ["p": Self.counters(sightings: 1_010), "q": Self.counters(sightings: 3)]] }
        await live.sample()
        #expect(await live.view(project: "q").current.sightingsPerSecond == 3)
    }

    @Test func sharedCountersGoThroughTheirBlobAndABadBlobIsRefused() throws {
        var counters = Self.counters(sightings: 7, snr: 25)
        counters.found = 2
        counters.lost = 1
        counters.invalidTokens = 4
        counters.rateLimited = 3
        let blob = ProjectCounters.sharedBlob(["p": counters, "q": ProjectCounters()])
        #expect(try ProjectCounters.counters(sharedBlob: blob) == ["p": counters, "q": ProjectCounters()])
        #expect(blob.count < 200, "the histogram is sparse: \(blob.count) bytes")
        for bad in [#"{"p":{"s":-1,"f":0,"l":0,"i":0,"r":0,"h":[]}}"#, #"{"p":{"s":1,"f":0,"l":0,"i":0,"r":0,"h":[[121,1]]}}"#,
                    #"{"p":{"s":1,"f":0,"l":0,"i":0,"r":0,"h":[[1]]}}"#, #"{"p":{"s":1}}"#, "[]", "not json"] {
            #expect(throws: StoreError.self, "\(bad)") { try ProjectCounters.counters(sharedBlob: Array(bad.utf8)) }
        }
    }

    /// Two nodes on PostgreSQL: sightings reported on node 1 are counted by node 0's live view.
    @Test func aNodesLiveViewCountsTheSightingsOfAnother() async throws {
        let cluster = try await TestCluster(nodes: 2)
        defer { Task { await cluster.stop() } }
        let viewer = cluster.node(0).server, project = cluster.project.id
        let live = LiveFeed(interval: 0.5) { await viewer.liveStatistics() }
        // The baseline once node 1 has shared its counters (a node's first counters seen are its baseline).
        #expect(await eventually(10) { await viewer.liveStatistics().otherNodes.count == 1 }, "node 1 shares its counters")
        await live.sample()
        let publisher = try await cluster.manager(node: 1)
        let subscriber = try await cluster.manager(node: 1)
        let publication = try await publisher.publish(exhibit, now: 0)
        let subscription = try await subscriber.subscribe(filter: exhibitFilter, now: 0, handler: { _ in })
        let token = try await token(of: publisher)
        await heard(subscriber, token: token)
        #expect(await eventually(10) { (await viewer.liveStatistics().otherNodes.values.compactMap { $0[project]?.sightings }.max() ?? 0) == 1 },
                "node 1's counters reach node 0 through the store")
        #expect(await viewer.host.statistics().counters[project]?.sightings ?? 0 == 0, "node 0 itself counted none")
        try await Task.sleep(for: .milliseconds(500))
        await live.sample()
        let point = await live.view(project: project).current
        #expect(point.sightingsPerSecond > 0, "node 0's live view counts node 1's sighting: \(point)")
        #expect(point.medianSNR == 20.5, "the sighting's 20 dB, from node 1's histogram: \(point)")
        #expect(await live.view(project: project).current.sessions == 2, "the census is the service's")
        keep(publication, subscription)
        await publisher.close(now: 0)
        await subscriber.close(now: 0)
    }
}
