import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import Testing

/// Rotating beacons through `sotto serve` (issue 29): IDs of the current Unix time slot resolve whenever the
/// service started, after a restart, on any node of a PostgreSQL cluster, with clocks skewed within the
/// window; beyond it, or for a replayed old ID, nothing is found. A private beacon stays in its project.
@Suite(.serialized, .timeLimit(.minutes(2))) struct RotatingBeaconTests {
    static let stable: [UInt8] = [0xE1, 0xD0, 0, 0, 0, 0, 0, 29]
    static let offer = try! BeaconAttachment.message(namespace: "museum", type: "exhibit", data: Array("rotating".utf8))
    static let exhibitFilter = try! MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])

    static func register(_ store: any ExchangeStore, project: String) async throws -> BeaconRotation {
        let rotation = try BeaconRotation(key: .generate(), period: 5)
        try await store.registerBeacon(BeaconRecord(id: stable, projectID: project, isPublic: false, rotation: rotation, attachments: [offer]))
        return rotation
    }

    /// Reports hearing the ID `rotation` broadcasts at Unix time `unixTime`, and whether `recorder` finds
    /// the attachment within `seconds`.
    static func hearAndFind(_ device: Device, _ recorder: EventRecorder, _ rotation: BeaconRotation, at unixTime: Double,
                            within seconds: Double = 3) async -> Bool {
        await device.manager.heard(frame: Payload.beacon(rotation.id(atUnixTime: unixTime, length: stable.count)).frameBytes,
                                   snr: 15, level: -30, now: 0)
        return await recorder.waitFound(1, seconds)
    }

    static var configuration: ServiceConfiguration {
        var configuration = TestServer.fastConfiguration
        configuration.registryPollInterval = 0.2
        return configuration
    }

    /// Registered in the store, then heard long after the service started (its monotonic clock reads
    /// seconds, Unix time reads billions): found; the service restarted: found again; another project
    /// hearing the same ID learns nothing (no raw ID, no attachment, no sighting).
    @Test func resolvesWheneverTheServiceStartedAndAcrossARestart() async throws {
        let seed = try await TestServer(configuration: Self.configuration)
        await seed.stop()
        let rotation = try await Self.register(seed.store, project: seed.project.id)
        for round in 0..<2 {
            let service = try await TestServer(configuration: Self.configuration, reuse: seed)
            let own = try await Device.remote(service.address, key: service.apiKey, name: "own")
            let foreign = try await Device.remote(service.address, key: try await service.otherProjectKey(name: "other-\(round)"), name: "foreign")
            let found = EventRecorder(), foreignEvents = EventRecorder()
            let subscription = try await own.manager.subscribe(filter: Self.exhibitFilter, lostTimeout: 30, now: 0, handler: found.handler)
            let everything = try await foreign.manager.subscribe(filter: try MessageFilter([.allMyTypes, .beaconIDs]), lostTimeout: 30, now: 0,
                                                                 handler: foreignEvents.handler)
            #expect(await Self.hearAndFind(own, found, rotation, at: Date().timeIntervalSince1970), "round \(round)")
            #expect(found.found == [Self.offer])
            await foreign.manager.heard(frame: Payload.beacon(rotation.id(atUnixTime: Date().timeIntervalSince1970, length: 8)).frameBytes,
                                        snr: 15, level: -30, now: 0)
            await foreign.manager.heard(frame: Payload.beacon(Self.stable).frameBytes, snr: 15, level: -30, now: 0)
            try await sync(foreign, own)
            try await Task.sleep(for: .milliseconds(300))
            #expect(foreignEvents.all.isEmpty, "another project learns nothing of a private beacon: \(foreignEvents.all)")
            keep(subscription, everything)
            await own.close()
            await foreign.close()
            await service.stop()
        }
    }

    /// The service's clock skewed from the beacon's by 55 s either way: found; by 70 s: not found; an ID
    /// recorded 3 minutes ago and replayed: not found.
    @Test func clockSkewAtTheWindowResolvesBeyondItDoesNot() async throws {
        let seed = try await TestServer(configuration: Self.configuration)
        await seed.stop()
        let rotation = try await Self.register(seed.store, project: seed.project.id)
        for (skew, resolves) in [(55.0, true), (-55, true), (70, false), (-70, false), (-180, false)] {
            var configuration = Self.configuration
            configuration.clockSkew = skew  // the service's clock runs `skew` s ahead of the beacon's
            let service = try await TestServer(configuration: configuration, reuse: seed)
            let own = try await Device.remote(service.address, key: service.apiKey, name: "own")
            let found = EventRecorder()
            let subscription = try await own.manager.subscribe(filter: Self.exhibitFilter, lostTimeout: 30, now: 0, handler: found.handler)
            let result = await Self.hearAndFind(own, found, rotation, at: Date().timeIntervalSince1970, within: resolves ? 3 : 1)
            #expect(result == resolves, "skew \(skew) s")
            keep(subscription)
            await own.close()
            await service.stop()
        }
    }

    static let hourlyStable: [UInt8] = [0xE1, 0xD0, 0, 0, 0, 0, 0x0E, 29]
    static let hourlyOffer = try! BeaconAttachment.message(namespace: "museum", type: "exhibit", data: Array("every 15 min".utf8))

    /// A beacon started minutes, then hours after the service: the service's clocks (monotonic and wall) are
    /// moved forward while it runs (`ServiceTimeShift`, no waiting), and a beacon's ID is the one of its own
    /// Unix time then (`BeaconRotation.id(atUnixTime:length:)`, what `sotto beacon` plays). Two beacons, one
    /// rotating every 5 s and one every 900 s (the README's period), each across many rotation boundaries since
    /// the service started. A subscriber since the service's start (TTL infinite) finds both 7 minutes later,
    /// loses them, and finds them again 3 hours later; at 3 hours a new subscriber finds the 5 s beacon with its
    /// clock 55 s ahead or behind (within the skew window, 11 slots away), not with it 70 s ahead or behind
    /// (beyond the window plus a period), and then the same subscriber finds the beacon's current ID.
    @Test func aBeaconStartedMinutesOrHoursAfterTheServiceResolves() async throws {
        let seed = try await TestServer(configuration: Self.configuration)
        await seed.stop()
        let fast = try await Self.register(seed.store, project: seed.project.id)
        let hourly = try BeaconRotation(key: .generate(), period: 900)
        try await seed.store.registerBeacon(BeaconRecord(id: Self.hourlyStable, projectID: seed.project.id, isPublic: false,
                                                         rotation: hourly, attachments: [Self.hourlyOffer]))
        let shift = ServiceTimeShift()
        var configuration = Self.configuration
        configuration.timeShift = shift
        let service = try await TestServer(configuration: configuration, reuse: seed)
        /// The Unix time of a beacon whose clock is `skew` s ahead of the service's.
        func beaconTime(skew: Double = 0) -> Double { Date().timeIntervalSince1970 + shift.seconds + skew }
        func hear(_ device: Device, _ rotation: BeaconRotation, skew: Double = 0) async {
            await device.manager.heard(frame: Payload.beacon(rotation.id(atUnixTime: beaconTime(skew: skew), length: 8)).frameBytes,
                                       snr: 15, level: -30, now: 0)
        }

        let early = try await Device.remote(service.address, key: service.apiKey, name: "since the start")
        let earlyEvents = EventRecorder()
        let always = try await early.manager.subscribe(filter: Self.exhibitFilter, strategy: try Strategy(ttl: .infinite), lostTimeout: 30,
                                                       now: 0, handler: earlyEvents.handler)
        try await early.sync()
        shift.advance(by: 7 * 60)
        await hear(early, fast)
        await hear(early, hourly)
        #expect(await earlyEvents.waitFound(2, 5), "7 min after the start: \(earlyEvents.all)")
        #expect(Set(earlyEvents.found) == [Self.offer, Self.hourlyOffer])

        shift.advance(by: 3 * 3600 - 7 * 60 + 17)
        #expect(await earlyEvents.waitLost(2, 5), "not heard for 3 hours: lost (\(earlyEvents.all))")
        await hear(early, fast)
        await hear(early, hourly)
        #expect(await earlyEvents.waitFound(4, 5), "3 h 17 s after the start: \(earlyEvents.all)")
        #expect(earlyEvents.pattern == "FFLLFF", "\(earlyEvents.pattern)")
        keep(always)
        await early.close()

        for (skew, resolves) in [(55.0, true), (-55, true), (70, false), (-70, false)] {
            let device = try await Device.remote(service.address, key: service.apiKey, name: "skew \(skew)")
            let found = EventRecorder()
            let subscription = try await device.manager.subscribe(filter: Self.exhibitFilter, lostTimeout: 30, now: 0, handler: found.handler)
            await hear(device, fast, skew: skew)
            if resolves {
                #expect(await found.waitFound(1, 5), "beacon clock \(skew) s from the service's, 3 h after its start")
            } else {
                try await device.sync()
                try await Task.sleep(for: .milliseconds(300))
                #expect(found.all.isEmpty, "beacon clock \(skew) s from the service's: \(found.all)")
                await hear(device, fast)
                #expect(await found.waitFound(1, 5), "then the beacon's current ID, on the same subscription")
            }
            #expect(found.found == [Self.offer])
            keep(subscription)
            await device.close()
        }
        await service.stop()
    }

    /// Two nodes on one PostgreSQL: a beacon registered while they run is resolved on either node, on the
    /// database's clock (the same for every replica).
    @Test func aSecondNodeResolvesTheSameIDs() async throws {
        var configuration = TestCluster.fastConfiguration
        configuration.registryPollInterval = 0.2
        try await withCluster(nodes: 2, configuration: configuration) { cluster in
            let rotation = try await Self.register(cluster.admin, project: cluster.project.id)
            for node in [1, 0] {
                let device = try await cluster.device(node: node)
                let found = EventRecorder()
                let subscription = try await device.manager.subscribe(filter: Self.exhibitFilter, lostTimeout: 30, now: 0, handler: found.handler)
                // The registry reaches the log within a poll or two; the manager reports one ID at most every 2 s
                // (`MessageManager.reportInterval`), so a loaded machine gets up to 20 s and about ten reports.
                var resolved = false
                for _ in 0..<20 where !resolved {
                    resolved = await Self.hearAndFind(device, found, rotation, at: Date().timeIntervalSince1970, within: 1)
                }
                #expect(resolved, "node \(node)")
                keep(subscription)
            }
        }
    }
}
