import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoTestSupport
import Testing

/// The stores that implement `ExchangeStore`; every contract test runs on each.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    /// A fresh, empty store of this kind (SQLite: a new file; PostgreSQL: a new database on the shared
    /// test server) and what closes it.
    func makeStore() async throws -> (store: any ExchangeStore, close: @Sendable () async -> Void) {
        switch self {
        case .sqlite:
            let directory = try temporaryDirectory()
            let store = try SQLiteStore(path: directory + "/exchange.sqlite")
            return (store, { try? FileManager.default.removeItem(atPath: directory) })
        case .postgres:
            let url = try await PostgresServer.shared().createDatabase()
            let store = try await PostgresStore(url: url)
            return (store, { await store.shutdown() })
        }
    }
}

/// What every store does the same way: errors, orderings, the registry version.
@Suite(.timeLimit(.minutes(1))) struct StoreContractTests {
    @Test(arguments: StoreKind.allCases)
    func projectsAreSortedByNameAndFoundByIDOrName(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let names = ["zeta", "Alpha", "émile", "alpha", "beta", "Zulu", "a-b", "a_b"]
        var created: [String: Project] = [:]
        for name in names { created[name] = try await store.createProject(name: name, maxSessions: name.count) }
        // Byte order (SQLite's BINARY collation), whatever the database's locale.
        let expected = names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        #expect(try await store.projects().map(\.name) == expected)
        #expect(try await store.projects() == expected.compactMap { created[$0] })
        let beta = try #require(created["beta"])
        #expect(beta.maxSessions == 4)
        #expect(beta.id.hasPrefix("p_"))
        #expect(try await store.project(id: beta.id) == beta)
        #expect(try await store.project(id: "beta") == beta)
        #expect(try await store.project(id: "gamma") == nil)
        #expect(try await store.project(id: "") == nil)
    }

    @Test(arguments: StoreKind.allCases)
    func duplicateAndInvalidProjectsAreRefused(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let first = try await store.createProject(name: "museum", maxSessions: 10)
        await #expect(throws: StoreError.duplicateProject("museum")) { _ = try await store.createProject(name: "museum", maxSessions: 5) }
        let invalidName = StoreError.invalid("a project name is 1 to 100 characters, no '/' and no control characters (newline, tab)")
        // Control characters would break the one-project-per-line listing (issue 30).
        for name in ["a/b", "", "two\nlines", "tab\there", "bell\u{7}"] {
            await #expect(throws: invalidName) { _ = try await store.createProject(name: name, maxSessions: 5) }
        }
        await #expect(throws: StoreError.invalid("a key label is at most 200 characters, no control characters (newline, tab)")) {
            _ = try await store.createKey(project: "museum", label: "a\nb", ratePerSecond: 1, burst: 1)
        }
        await #expect(throws: StoreError.invalid("the session quota must be positive")) {
            _ = try await store.createProject(name: "empty", maxSessions: 0)
        }
        #expect(try await store.projects() == [first])
    }

    @Test(arguments: StoreKind.allCases)
    func keysAreCreatedListedAuthenticatedAndRevoked(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let museum = try await store.createProject(name: "museum", maxSessions: 10)
        let shop = try await store.createProject(name: "shop", maxSessions: 10)
        await #expect(throws: StoreError.unknownProject("nowhere")) {
            _ = try await store.createKey(project: "nowhere", label: "x", ratePerSecond: 1, burst: 1)
        }
        await #expect(throws: StoreError.invalid("a key's rate must be positive and its burst at least 1")) {
            _ = try await store.createKey(project: museum.id, label: "x", ratePerSecond: 0, burst: 1)
        }
        let (first, firstKey) = try await store.createKey(project: museum.id, label: "front desk", ratePerSecond: 5, burst: 20)
        let (other, _) = try await store.createKey(project: "shop", label: "till", ratePerSecond: 7, burst: 8)
        let (second, secondKey) = try await store.createKey(project: "museum", label: "app", ratePerSecond: 50, burst: 200)
        #expect(first.projectID == museum.id && other.projectID == shop.id && second.projectID == museum.id)
        #expect(!first.revoked)

        // Creation order, all projects or one (by id or name); never the secret, only its hash.
        #expect(try await store.keys(project: nil) == [first, other, second])
        #expect(try await store.keys(project: museum.id) == [first, second])
        #expect(try await store.keys(project: "shop") == [other])
        await #expect(throws: StoreError.unknownProject("nowhere")) { _ = try await store.keys(project: "nowhere") }
        let secret = try #require(APIKeys.parse(firstKey)).secret
        #expect(try await store.key(id: first.id)?.secretHash == APIKeys.hash(secret))
        #expect(try await store.key(id: "0000000000000000") == nil)

        let authenticated = try #require(try await APIKeys.authenticate(firstKey, in: store))
        #expect(authenticated.keyID == first.id)
        #expect(authenticated.project == museum)
        #expect(authenticated.ratePerSecond == 5 && authenticated.burst == 20)
        #expect(try await APIKeys.authenticate(secondKey, in: store)?.keyID == second.id)
        let wrongSecret = "sotto_\(first.id)_" + String(repeating: "0", count: 64)
        #expect(try await APIKeys.authenticate(wrongSecret, in: store) == nil)
        #expect(try await APIKeys.authenticate("sotto_ffffffffffffffff_" + secret, in: store) == nil)
        #expect(try await APIKeys.authenticate("not a key", in: store) == nil)

        try await store.revokeKey(id: first.id)
        #expect(try await APIKeys.authenticate(firstKey, in: store) == nil)
        #expect(try await store.key(id: first.id)?.revoked == true)
        #expect(try await APIKeys.authenticate(secondKey, in: store) != nil)
        try await store.revokeKey(id: first.id)  // Revoking twice is not an error.
        await #expect(throws: StoreError.unknownKey("nope")) { try await store.revokeKey(id: "nope") }
        #expect(try await store.keys(project: museum.id).map(\.revoked) == [true, false])
    }

    @Test(arguments: StoreKind.allCases)
    func beaconsAttachmentsAndTheRegistryVersion(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let museum = try await store.createProject(name: "museum", maxSessions: 10)
        #expect(try await store.beacons().isEmpty)
        let start = try await store.registryVersion()

        let hall = try BeaconAttachment.message(namespace: "museum", type: "room", data: Array("hall".utf8))
        let map = try BeaconAttachment.message(namespace: "museum", type: "map", data: [0, 1, 2, 255])
        // The identity key is kept byte for byte (a 0xff or a 0 among them included).
        let rotation = try BeaconRotation(key: BeaconIdentityKey(bytes: [0xFF, 0] + (1...30).map { UInt8($0) }), period: 30)
        try await store.registerBeacon(BeaconRecord(id: [2], projectID: museum.id, isPublic: false, rotation: nil))
        try await store.registerBeacon(BeaconRecord(id: [1, 255, 3, 4, 5, 6, 7, 8], projectID: "museum", isPublic: true, rotation: rotation,
                                                    attachments: [hall, map]))
        try await store.registerBeacon(BeaconRecord(id: [1], projectID: museum.id, isPublic: false, rotation: nil))
        #expect(try await store.registryVersion() == start + 3)
        try await store.addAttachment(beacon: [2], map)
        try await store.addAttachment(beacon: [2], hall)
        #expect(try await store.registryVersion() == start + 5)

        // Ordered by ID bytes; attachments in the order they were given or added.
        var beacons = try await store.beacons()
        #expect(beacons.map(\.id) == [[1], [1, 255, 3, 4, 5, 6, 7, 8], [2]])
        #expect(beacons.map(\.projectID) == [museum.id, museum.id, museum.id])
        #expect(beacons.map(\.isPublic) == [false, true, false])
        #expect(beacons[1].rotation == rotation)
        #expect(beacons[0].rotation == nil)
        #expect(beacons[1].attachments == [hall, map])
        #expect(beacons[2].attachments == [map, hall])
        #expect(beacons[0].attachments.isEmpty)

        // Registering again replaces the beacon and its attachments.
        try await store.registerBeacon(BeaconRecord(id: [1, 255, 3, 4, 5, 6, 7, 8], projectID: museum.id, isPublic: false, rotation: nil, attachments: [map]))
        #expect(try await store.registryVersion() == start + 6)
        beacons = try await store.beacons()
        #expect(beacons.count == 3)
        #expect(beacons[1] == BeaconRecord(id: [1, 255, 3, 4, 5, 6, 7, 8], projectID: museum.id, isPublic: false, rotation: nil, attachments: [map]))
        try await store.addAttachment(beacon: [1, 255, 3, 4, 5, 6, 7, 8], hall)
        #expect(try await store.beacons()[1].attachments == [map, hall])
        #expect(try await store.registryVersion() == start + 7)
    }

    /// Issue 34: an attachment deleted by index, visibility changed, a beacon decommissioned for good; each moves the
    /// registry's version; a decommissioned ID is listed as such, without key or attachments, and never registers again.
    @Test(arguments: StoreKind.allCases)
    func attachmentsAreDeletedVisibilityChangesAndADecommissionedBeaconNeverReturns(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let museum = try await store.createProject(name: "museum", maxSessions: 10)
        let notes = try (0..<3).map { try BeaconAttachment.message(namespace: "museum", type: "note", data: [UInt8($0)]) }
        let id: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let rotation = try BeaconRotation(key: .generate(), period: 60)
        try await store.registerBeacon(BeaconRecord(id: id, projectID: museum.id, isPublic: false, rotation: rotation, attachments: notes))
        let start = try await store.registryVersion()
        try await store.removeAttachment(beacon: id, at: 1)
        #expect(try await store.beacons().first?.attachments == [notes[0], notes[2]])
        try await store.removeAttachment(beacon: id, at: 1)
        #expect(try await store.beacons().first?.attachments == [notes[0]])
        await #expect(throws: StoreError.self) { try await store.removeAttachment(beacon: id, at: 1) }
        await #expect(throws: StoreError.unknownBeacon("09")) { try await store.removeAttachment(beacon: [9], at: 0) }
        try await store.setBeaconPublic(id, true)
        #expect(try await store.beacons().first?.isPublic == true)
        await #expect(throws: StoreError.unknownBeacon("09")) { try await store.setBeaconPublic([9], true) }
        #expect(try await store.registryVersion() == start + 3)

        try await store.decommissionBeacon(id)
        #expect(try await store.registryVersion() == start + 4)
        let gone = try #require(try await store.beacons().first)
        #expect(gone.decommissioned && gone.id == id && gone.projectID == museum.id)
        #expect(gone.rotation == nil && gone.attachments.isEmpty && !gone.isPublic)
        #expect(gone.registered.projectID.isEmpty, "the matcher registers it as no project's")
        let refusal = StoreError.invalid("beacon 0102030405060708 was decommissioned: its ID is never registered again")
        await #expect(throws: refusal) { try await store.registerBeacon(BeaconRecord(id: id, projectID: museum.id, isPublic: true, rotation: nil)) }
        await #expect(throws: refusal) { try await store.addAttachment(beacon: id, notes[1]) }
        await #expect(throws: refusal) { try await store.setBeaconPublic(id, true) }
        await #expect(throws: refusal) { try await store.decommissionBeacon(id) }
        #expect(try await store.registryVersion() == start + 4, "refusals change nothing")
    }

    @Test(arguments: StoreKind.allCases)
    func beaconErrorsChangeNothing(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let museum = try await store.createProject(name: "museum", maxSessions: 10)
        let start = try await store.registryVersion()
        let note = try BeaconAttachment.message(namespace: "museum", type: "note", data: [1])
        await #expect(throws: StoreError.unknownBeacon("0a0b")) { try await store.addAttachment(beacon: [10, 11], note) }
        await #expect(throws: StoreError.unknownProject("nowhere")) {
            try await store.registerBeacon(BeaconRecord(id: [1], projectID: "nowhere", isPublic: false, rotation: nil))
        }
        await #expect(throws: StoreError.invalid(ExchangeError.invalidBeaconID(16).description)) {
            try await store.registerBeacon(BeaconRecord(id: [UInt8](repeating: 1, count: 16), projectID: museum.id, isPublic: false, rotation: nil))
        }
        await #expect(throws: StoreError.invalid("a rotating beacon's ID must be 8 to 15 bytes, got 7")) {
            let rotation = try BeaconRotation(key: BeaconIdentityKey.generate(), period: 30)
            try await store.registerBeacon(BeaconRecord(id: [1, 2, 3, 4, 5, 6, 7], projectID: museum.id, isPublic: false, rotation: rotation))
        }
        #expect(try await store.registryVersion() == start)
        #expect(try await store.beacons().isEmpty)
    }
}
