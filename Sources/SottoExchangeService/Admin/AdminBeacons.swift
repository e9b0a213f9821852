import Foundation
import SottoExchangeCore
import SottoSupport

/// The admin API's beacon endpoints (issue 34), audited as the operator like the rest:
///
/// - `GET /api/beacons` (`?project=P` for one project's), `GET /api/beacons/ID`: beacons with their attachments
///   (`index`, `namespace`, `type`, `hex`, and `text` when the data is UTF-8); never a rotating beacon's key.
/// - `POST /api/projects/P/beacons {"id": HEX, "visibility": "public"|"unlisted", "rotationPeriod": S,
///   "identityKey": HEX, "attachments": [...]}`: registers (or replaces) a beacon. With `rotationPeriod` (1 to
///   86400 s) it rotates: its identity key is `identityKey` (16 to 32 bytes, made by the caller) or, without one,
///   made here from the system CSPRNG and returned once as `provisioning` (the text of `sotto beacon --key-file`).
/// - `POST /api/beacons/ID/attachments {"namespace", "type", "text" | "hex"}`: adds an attachment (the exchange's
///   limits: `BeaconAttachment`); `POST /api/beacons/ID/attachments/N/delete` deletes the `N`th.
/// - `POST /api/beacons/ID/visibility {"visibility": "public"|"unlisted"}`.
/// - `POST /api/beacons/ID/decommission`: for good (attachments and key deleted; the ID never registers again).
extension AdminAPI {
    struct AttachmentBody: Decodable { let namespace: String; let type: String; let text: String?; let hex: String? }
    struct BeaconBody: Decodable {
        let id: String
        let visibility: String?
        let rotationPeriod: Double?
        let identityKey: String?
        let attachments: [AttachmentBody]?
    }
    struct VisibilityBody: Decodable { let visibility: String }

    /// Most attachments a beacon registered through the API may carry at once.
    static let maxAttachmentsPerRequest = 100

    /// Answers a beacon endpoint, or nil when the request is not one.
    func dispatchBeacons(_ segments: [String], _ request: AdminRequest, _ store: AuditedStore) async throws(StoreError) -> AdminResponse? {
        switch (request.method, segments.count, segments.first) {
        case ("GET", 1, "beacons"):
            var beacons = try await store.beacons()
            if let project = request.query["project"] {
                guard let found = try await store.project(id: project) else { throw .unknownProject(project) }
                beacons = beacons.filter { $0.projectID == found.id }
            }
            return .json(200, ["beacons": beacons.map(Self.json)])
        case ("POST", 3, "projects") where segments[2] == "beacons":
            return try await register(project: segments[1], try Self.decode(BeaconBody.self, request.body), store)
        case ("GET", 2, "beacons"):
            let id = try Self.beaconID(segments[1])
            guard let beacon = try await store.beacons().first(where: { $0.id == id }) else { throw .unknownBeacon(Hex.encode(id)) }
            return .json(200, ["beacon": Self.json(beacon)])
        case ("POST", 3, "beacons") where segments[2] == "attachments":
            let id = try Self.beaconID(segments[1])
            let attachment = try Self.attachment(try Self.decode(AttachmentBody.self, request.body))
            try await store.addAttachment(beacon: id, attachment)
            return .json(201, ["beacon": Hex.encode(id), "attachment": Self.json(attachment, index: nil)])
        case ("POST", 5, "beacons") where segments[2] == "attachments" && segments[4] == "delete":
            let id = try Self.beaconID(segments[1])
            guard let index = Int(segments[3]), (0..<10_000).contains(index) else { throw .invalid("an attachment's index is 0 to 9999") }
            try await store.removeAttachment(beacon: id, at: index)
            return .json(200, ["beacon": Hex.encode(id), "deleted": index])
        case ("POST", 3, "beacons") where segments[2] == "visibility":
            let id = try Self.beaconID(segments[1])
            let isPublic = try Self.isPublic(try Self.decode(VisibilityBody.self, request.body).visibility)
            try await store.setBeaconPublic(id, isPublic)
            return .json(200, ["beacon": Hex.encode(id), "visibility": isPublic ? "public" : "unlisted"])
        case ("POST", 3, "beacons") where segments[2] == "decommission":
            let id = try Self.beaconID(segments[1])
            try await store.decommissionBeacon(id)
            return .json(200, ["decommissioned": Hex.encode(id)])
        default:
            return nil
        }
    }

    private func register(project: String, _ body: BeaconBody, _ store: AuditedStore) async throws(StoreError) -> AdminResponse {
        let id = try Self.beaconID(body.id)
        let isPublic = try Self.isPublic(body.visibility ?? "unlisted")
        guard (body.attachments?.count ?? 0) <= Self.maxAttachmentsPerRequest else {
            throw .invalid("'attachments' holds at most \(Self.maxAttachmentsPerRequest) attachments (add more one by one)")
        }
        var attachments: [Message] = []
        for item in body.attachments ?? [] { attachments.append(try Self.attachment(item)) }
        var provisioning: BeaconProvisioning?
        var rotation: BeaconRotation?
        switch (body.rotationPeriod, body.identityKey) {
        case (nil, nil): break
        case (nil, .some): throw .invalid("'identityKey' goes with 'rotationPeriod' (a rotating beacon)")
        case (.some(let period), let keyText):
            guard period.isFinite, (1...86_400).contains(period) else { throw .invalid("'rotationPeriod' must be 1 to 86400 s") }
            do {
                let key: BeaconIdentityKey
                if let keyText {
                    guard let bytes = Hex.decode(keyText) else { throw StoreError.invalid("'identityKey' must be hex") }
                    key = try BeaconIdentityKey(bytes: bytes)
                } else {
                    key = BeaconIdentityKey.generate()
                }
                let made = try BeaconProvisioning(id: id, rotation: try BeaconRotation(key: key, period: period))
                rotation = made.rotation
                // Returned once, only when made here (a caller that sent its key has it).
                if keyText == nil { provisioning = made }
            } catch let error as StoreError { throw error } catch { throw .invalid("\(error)") }
        }
        let record = BeaconRecord(id: id, projectID: project, isPublic: isPublic, rotation: rotation, attachments: attachments)
        try await store.registerBeacon(record)
        guard let registered = try await self.store.beacons().first(where: { $0.id == id }) else { throw .unknownBeacon(Hex.encode(id)) }
        var answer: [String: Any] = ["beacon": Self.json(registered)]
        if let provisioning { answer["provisioning"] = provisioning.text }
        return .json(201, answer)
    }

    /// A beacon ID in hex: 1 to 15 bytes.
    static func beaconID(_ text: String) throws(StoreError) -> [UInt8] {
        guard text.utf8.count <= 30, let bytes = Hex.decode(text), (1...15).contains(bytes.count) else {
            throw .invalid("a beacon ID is 1 to 15 bytes in hex")
        }
        return bytes
    }

    static func isPublic(_ visibility: String) throws(StoreError) -> Bool {
        switch visibility {
        case "public": return true
        case "unlisted": return false
        default: throw .invalid("'visibility' is public (every project receives the attachments) or unlisted (the beacon's project only)")
        }
    }

    /// An attachment from its JSON: data as `text` or `hex` (one of them), checked with the exchange's limits.
    static func attachment(_ body: AttachmentBody) throws(StoreError) -> Message {
        let data: [UInt8]
        switch (body.text, body.hex) {
        case (let text?, nil): data = Array(text.utf8)
        case (nil, let hex?):
            guard hex.utf8.count <= 2 * ExchangeLimits.maxAttachmentBytes + 2, let bytes = Hex.decode(hex) else { throw .invalid("'hex' must be hex") }
            data = bytes
        default: throw .invalid("give an attachment's data as 'text' or as 'hex' (one of them)")
        }
        do { return try BeaconAttachment.message(namespace: body.namespace, type: body.type, data: data) } catch {
            throw .invalid(error.description)
        }
    }

    static func json(_ beacon: BeaconRecord) -> [String: Any] {
        [
            "id": Hex.encode(beacon.id), "project": beacon.projectID, "visibility": beacon.isPublic ? "public" : "unlisted",
            "rotating": beacon.rotation != nil, "rotationPeriod": beacon.rotation?.period ?? NSNull(), "decommissioned": beacon.decommissioned,
            "attachments": beacon.attachments.enumerated().map { json($0.element, index: $0.offset) },
        ]
    }

    static func json(_ attachment: Message, index: Int?) -> [String: Any] {
        var object: [String: Any] = ["namespace": attachment.namespace, "type": attachment.type, "hex": Hex.encode(attachment.content)]
        if let index { object["index"] = index }
        if let text = String(validating: attachment.content, as: UTF8.self) { object["text"] = text }
        return object
    }
}
