import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import SottoSupport
import Testing

/// Beacons through the admin API (issue 34): registered with an attachment there, a subscriber of the project finds
/// them; decommissioned, they resolve to nothing and never register again; inputs are checked with the exchange's
/// limits; a rotating beacon's key is made here and given once; every call is audited as the operator.
@Suite(.timeLimit(.minutes(1))) struct AdminBeaconTests {
    static let beacon: [UInt8] = [0xBE, 0xAC, 0x34]

    /// Calls the API with the operator's credential (Bearer: no cookie, so no CSRF).
    static func call(_ api: AdminAPI, _ secret: String, _ method: String, _ target: String, _ body: [String: Any]? = nil) async -> AdminResponse {
        await api.handle(AdminRequest(method: method, target: target, headers: [("Authorization", "Bearer " + secret)],
                                      body: body.map { Array((try? JSONSerialization.data(withJSONObject: $0)) ?? Data()) } ?? []))
    }

    @Test func aBeaconRegisteredWithAnAttachmentIsFoundAndOnceDecommissionedResolvesToNothingForGood() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.registryPollInterval = 0.2
        let service = try await TestServer(configuration: configuration)
        let secret = try await service.store.createOperator(name: "alice").secret
        let api = AdminAPI(store: service.store)
        let hex = Hex.encode(Self.beacon)

        let registered = await Self.call(api, secret, "POST", "/api/projects/\(service.project.name)/beacons",
                                         ["id": hex, "attachments": [["namespace": "museum", "type": "exhibit", "text": "<b>hall 1</b>"]]])
        #expect(registered.status == 201, "\(String(decoding: registered.body, as: UTF8.self))")
        let added = await Self.call(api, secret, "POST", "/api/beacons/\(hex)/attachments", ["namespace": "museum", "type": "exhibit", "hex": "00ff"])
        #expect(added.status == 201)

        let device = try await Device.remote(service.address, key: service.apiKey, name: "visitor")
        let recorder = EventRecorder()
        let filter = try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])
        let subscription = try await device.manager.subscribe(filter: filter, lostTimeout: 30, now: 0, handler: recorder.handler)
        await device.manager.heard(frame: Payload.beacon(Self.beacon).frameBytes, snr: 20, level: -30, now: 0)
        #expect(await recorder.waitFound(2))
        let expected = [try BeaconAttachment.message(namespace: "museum", type: "exhibit", data: Array("<b>hall 1</b>".utf8)),
                        try BeaconAttachment.message(namespace: "museum", type: "exhibit", data: [0, 0xFF])]
        #expect(Set(recorder.found) == Set(expected))

        // Decommissioned: what the subscriber found is lost, nothing is found again, and the ID never registers again.
        #expect(await Self.call(api, secret, "POST", "/api/beacons/\(hex)/decommission").status == 200)
        #expect(await recorder.waitLost(2), "the decommissioned beacon's attachments are lost: \(recorder.all)")
        await device.manager.heard(frame: Payload.beacon(Self.beacon).frameBytes, snr: 20, level: -30, now: 0)
        try await sync(device)
        #expect(recorder.found.count == 2, "nothing found again: \(recorder.all)")
        let again = await Self.call(api, secret, "POST", "/api/projects/\(service.project.name)/beacons", ["id": hex])
        #expect(again.status == 400 && (again.json?["error"] as? String)?.contains("decommissioned") == true)
        #expect(await Self.call(api, secret, "POST", "/api/beacons/\(hex)/attachments", ["namespace": "m", "type": "t", "text": "x"]).status == 400)
        let listed = await Self.call(api, secret, "GET", "/api/beacons/\(hex)")
        let record = try #require(listed.json?["beacon"] as? [String: Any])
        #expect(record["decommissioned"] as? Bool == true && (record["attachments"] as? [Any])?.isEmpty == true)

        let actions = try await service.store.auditEntries(limit: 20).filter { $0.actor == "operator:alice" }.map(\.action)
        for action in ["beacon.register", "beacon.attach", "beacon.decommission"] { #expect(actions.contains(action), "\(actions)") }
        keep(subscription)
        await device.close()
        await service.stop()
    }

    @Test func inputsAreCheckedVisibilityAndAttachmentsChangeAndARotatingBeaconsKeyIsGivenOnce() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let secret = try await store.createOperator(name: "alice").secret
        _ = try await store.createProject(name: "museum", maxSessions: 10)
        let api = AdminAPI(store: store)
        func post(_ target: String, _ body: [String: Any] = [:]) async -> AdminResponse { await Self.call(api, secret, "POST", target, body) }

        for (body, why) in [
            (["id": "zz"], "not hex"), (["id": String(repeating: "ab", count: 16)], "16 bytes"), (["id": ""], "empty"),
            (["id": "ab", "visibility": "secret"], "unknown visibility"), (["id": "ab", "rotationPeriod": 0], "period 0"),
            (["id": "ab", "identityKey": "00"], "a key without a period"), (["id": "ab", "rotationPeriod": 60], "a rotating ID of 1 byte"),
            (["id": "0102030405060708", "rotationPeriod": 60, "identityKey": "0011"], "a key of 2 bytes"),
            (["id": "ab", "attachments": [["namespace": "m", "type": "t", "hex": String(repeating: "00", count: 1025)]]], "1025 bytes of data"),
            (["id": "ab", "attachments": [["namespace": "m", "type": "t", "text": "x", "hex": "00"]]], "text and hex"),
            (["id": "ab", "attachments": [["namespace": "", "type": "t", "text": "x"]]], "an empty namespace"),
            (["id": 5], "an ID that is a number"),
        ] as [([String: Any], String)] {
            let answer = await post("/api/projects/museum/beacons", body)
            #expect(answer.status == 400, "\(why): \(answer.status)")
            #expect(answer.json?["error"] is String, "\(why)")
        }
        #expect(await post("/api/projects/nope/beacons", ["id": "ab"]).status == 404)
        #expect(try await store.beacons().isEmpty, "nothing refused was registered")

        #expect(await post("/api/projects/museum/beacons", ["id": "ab", "visibility": "public"]).status == 201)
        for text in ["one", "two", "three"] { #expect(await post("/api/beacons/ab/attachments", ["namespace": "m", "type": "t", "text": text]).status == 201) }
        #expect(await post("/api/beacons/ab/attachments/1/delete").status == 200)
        #expect(await post("/api/beacons/ab/attachments/7/delete").status == 400)
        #expect(await post("/api/beacons/cd/attachments", ["namespace": "m", "type": "t", "text": "x"]).status == 404)
        #expect(await post("/api/beacons/ab/visibility", ["visibility": "unlisted"]).status == 200)
        let beacon = try #require(try await store.beacons().first)
        #expect(!beacon.isPublic && beacon.attachments.map { String(decoding: $0.content, as: UTF8.self) } == ["one", "three"])

        // A rotating beacon: its key is made here, given once as the key file's text, and never listed.
        let rotating = await post("/api/projects/museum/beacons", ["id": "0102030405060708", "rotationPeriod": 30])
        #expect(rotating.status == 201)
        let provisioning = try BeaconProvisioning(text: try #require(rotating.json?["provisioning"] as? String))
        #expect(provisioning.id == [1, 2, 3, 4, 5, 6, 7, 8] && provisioning.rotation.period == 30)
        #expect(try await store.beacons().first { $0.id == provisioning.id }?.rotation == provisioning.rotation)
        let listing = await Self.call(api, secret, "GET", "/api/beacons?project=museum")
        #expect(listing.status == 200 && (listing.json?["beacons"] as? [Any])?.count == 2)
        #expect(!String(decoding: listing.body, as: UTF8.self).contains(Hex.encode(provisioning.rotation.key.bytes)), "the key is never listed")
        // With the caller's key (sotto admin --server makes it): no key in the answer.
        let ownKey = BeaconIdentityKey.generate()
        let withKey = await post("/api/projects/museum/beacons", ["id": "1112131415161718", "rotationPeriod": 30, "identityKey": Hex.encode(ownKey.bytes)])
        #expect(withKey.status == 201 && withKey.json?["provisioning"] == nil)
        #expect(try await store.beacons().first { $0.id == Hex.decode("1112131415161718") }?.rotation?.key == ownKey)
    }
}

/// `sotto admin beacon ... --server`: the beacon operations through the admin listener, on a Unix socket.
@Suite(.timeLimit(.minutes(1))) struct RemoteAdminBeaconTests {
    @Test func beaconsGoThroughTheAPIAndAreAuditedAsTheOperator() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteStore(path: directory + "/exchange.sqlite")
        let secret = try await store.createOperator(name: "alice").secret
        let project = try await store.createProject(name: "museum", maxSessions: 10)
        let listener = try await AdminListener.bind(endpoint: .unix(path: directory + "/admin.sock"), tls: nil)
        let serving = Task { try await listener.serve(api: AdminAPI(store: store)) }
        defer { listener.close(); serving.cancel() }
        let remote = try RemoteAdminStore(server: listener.address, secret: secret)

        let rotation = try BeaconRotation(key: .generate(), period: 60)
        let id: [UInt8] = [9, 8, 7, 6, 5, 4, 3, 2]
        try await remote.registerBeacon(BeaconRecord(id: id, projectID: "museum", isPublic: true, rotation: rotation))
        #expect(try await store.beacons().first?.rotation == rotation, "the key the caller made is the one registered")
        try await remote.addAttachment(beacon: id, try BeaconAttachment.message(namespace: "m", type: "t", data: [1]))
        try await remote.addAttachment(beacon: id, try BeaconAttachment.message(namespace: "m", type: "t", data: [2]))
        try await remote.removeAttachment(beacon: id, at: 0)
        try await remote.setBeaconPublic(id, false)
        let listed = try #require(try await remote.beacons().first)
        #expect(listed.id == id && listed.projectID == project.id && !listed.isPublic && listed.rotation?.period == 60)
        #expect(listed.attachments.map(\.content) == [[2]])
        #expect(listed.rotation?.key != rotation.key, "the key stays on the service")
        try await remote.decommissionBeacon(id)
        #expect(try await remote.beacons().first?.decommissioned == true)
        await #expect(throws: StoreError.self) { try await remote.registerBeacon(BeaconRecord(id: id, projectID: "museum", isPublic: false, rotation: nil)) }
        let actions = try await store.auditEntries(limit: 20).filter { $0.actor == "operator:alice" }.map(\.action)
        for action in ["beacon.register", "beacon.attach", "beacon.detach", "beacon.unlisted", "beacon.list", "beacon.decommission"] {
            #expect(actions.contains(action), "\(action) in \(actions)")
        }
    }
}
