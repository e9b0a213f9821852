import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import Testing

/// A damaged or unreadable SQLite store makes rotating-ID resolution fail closed (issue 29): the beacon's
/// rotating IDs and its stable ID find nothing of it (no attachment, no stable ID), and a store file that
/// is not a database is refused, rather than served empty.
@Suite(.serialized, .timeLimit(.minutes(2))) struct BeaconStoreFailureTests {
    /// Runs `sql` on the SQLite file at `path` with the sqlite3 shell (scripts/install-deps installs it).
    static func damage(_ path: String, _ sql: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [path, sql]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "sqlite3 \(sql)")
    }

    /// Registers a rotating beacon, stops the service, runs `sql` on its file, restarts it, and reports what
    /// a subscription of the beacon's own project (its attachment's type and beacon IDs) finds after
    /// hearing the current rotating ID and the stable ID.
    static func foundAfterDamage(_ sql: String?) async throws -> [Message] {
        let seed = try await TestServer(configuration: RotatingBeaconTests.configuration)
        await seed.stop()
        let rotation = try await RotatingBeaconTests.register(seed.store, project: seed.project.id)
        if let sql { try damage(seed.directory + "/exchange.sqlite", sql) }
        let service = try await TestServer(configuration: RotatingBeaconTests.configuration, reuse: seed)
        let own = try await Device.remote(service.address, key: service.apiKey, name: "own")
        let recorder = EventRecorder()
        let filter = try MessageFilter([.beaconIDs, .namespacedType(namespace: "museum", type: "exhibit")])
        let subscription = try await own.manager.subscribe(filter: filter, lostTimeout: 30, now: 0, handler: recorder.handler)
        let heard = rotation.id(atUnixTime: Date().timeIntervalSince1970, length: RotatingBeaconTests.stable.count)
        await own.manager.heard(frame: Payload.beacon(heard).frameBytes, snr: 15, level: -30, now: 0)
        await own.manager.heard(frame: Payload.beacon(RotatingBeaconTests.stable).frameBytes, snr: 15, level: -30, now: 0)
        try await sync(own)
        _ = await recorder.waitFound(2, 1.5)
        keep(subscription)
        await own.close()
        await service.stop()
        return recorder.found
    }

    static let stableID = Message(delivered: ExchangeLimits.reservedNamespace, type: ExchangeLimits.beaconIDType, content: RotatingBeaconTests.stable)

    /// Undamaged (the control): the rotating ID resolves to the beacon, whose ID and attachment are found.
    @Test func undamagedResolves() async throws {
        let found = try await Self.foundAfterDamage(nil)
        #expect(found.contains(RotatingBeaconTests.offer) && found.contains(Self.stableID), "\(found)")
    }

    /// A truncated identity key, or a key whose period was lost: the beacon stays rotating under a key no
    /// beacon has, so neither its rotating ID nor its stable ID finds its attachment or its stable ID. (Left
    /// out, its stable ID would pass for an unregistered beacon's and be found; taken as a fixed beacon, a
    /// lost period would make the never-broadcast stable ID resolve to it, attachments and all.)
    @Test func aDamagedRotationFindsNothingOfTheBeacon() async throws {
        let hex = RotatingBeaconTests.stable.map { String(format: "%02X", $0) }.joined()
        for sql in ["UPDATE beacon SET identity_key = X'0102' WHERE id = X'\(hex)'",
                    "UPDATE beacon SET rotation_period = NULL WHERE id = X'\(hex)'"] {
            let found = try await Self.foundAfterDamage(sql)
            #expect(!found.contains(RotatingBeaconTests.offer) && !found.contains(Self.stableID), "\(sql): \(found)")
        }
    }

    /// A store file that is not a database is refused when opened: no service starts on it.
    @Test func aStoreFileThatIsNotADatabaseIsRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/exchange.sqlite"
        try Data(repeating: 0x5A, count: 8_192).write(to: URL(fileURLWithPath: path))
        #expect(throws: (any Error).self) { _ = try SQLiteStore(path: path) }
    }
}
