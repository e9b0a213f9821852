import Foundation
import SottoExchange
import SottoExchangeCore
import SottoSupport

/// What an operation handed to the daemon does: a publication, a subscription or a beacon, with the
/// options of the matching `sotto` command. Persisted as is (JSON) for persistent operations.
public struct OperationSpec: Codable, Sendable, Equatable {
    /// The three kinds of operation.
    public enum Kind: String, Codable, Sendable { case publish, subscribe, beacon }
    /// Publication, subscription or beacon.
    public var kind: Kind
    /// Namespace and type (publish: of the message; subscribe: the filter; nil: the app's own namespace).
    public var namespace: String?
    /// See ``namespace``.
    public var type: String?
    /// The published content (publish) or the beacon ID (beacon), as lowercase hex.
    public var content: String?
    /// Discovery mode: broadcast, scan or both.
    public var mode: String
    /// Seconds to run (1-86400); nil: until cancelled (subscriptions and beacons only).
    public var ttl: Int?
    /// Seconds without a sighting before lost (subscriptions).
    public var lostTimeout: Double?
    /// Subscriptions: also receive beacon IDs and attachments.
    public var beacons: Bool
    /// Kept across daemon restarts (saved under the state directory).
    public var persistent: Bool
    /// The notification group; nil: one group per operation (its id).
    public var group: String?

    /// - Parameters:
    ///   - kind: publication, subscription or beacon.
    ///   - namespace: the message's or filter's namespace.
    ///   - type: the message's or filter's type.
    ///   - content: the content or beacon ID as hex.
    ///   - mode: broadcast, scan or both.
    ///   - ttl: seconds to run, nil for no end.
    ///   - lostTimeout: seconds without a sighting before lost.
    ///   - beacons: subscriptions: receive beacons too.
    ///   - persistent: restored when the daemon starts again.
    ///   - group: the notification group key.
    public init(kind: Kind, namespace: String? = nil, type: String? = nil, content: String? = nil, mode: String = "both",
                ttl: Int? = nil, lostTimeout: Double? = nil, beacons: Bool = false, persistent: Bool = false, group: String? = nil) {
        self.kind = kind
        self.namespace = namespace
        self.type = type
        self.content = content
        self.mode = mode
        self.ttl = ttl
        self.lostTimeout = lostTimeout
        self.beacons = beacons
        self.persistent = persistent
        self.group = group
    }

    /// The discovery mode, nil when ``mode`` names none.
    public var discoveryMode: Strategy.DiscoveryMode? {
        switch mode {
        case "broadcast": return .broadcast
        case "scan": return .scan
        case "both": return .both
        default: return nil
        }
    }

    /// The content bytes (nil without content or with bad hex).
    public var contentBytes: [UInt8]? { content.flatMap(Self.bytes(hex:)) }

    /// Checks the fields that do not need a matcher to judge.
    /// - Throws: ``ControlError`` naming the bad field.
    public func validate() throws(ControlError) {
        guard discoveryMode != nil else { throw ControlError("mode must be broadcast, scan or both") }
        if let ttl, !ExchangeLimits.ttlRange.contains(ttl) { throw ControlError("ttl must be 1-86400 s") }
        if let lostTimeout, !(1...600).contains(lostTimeout) { throw ControlError("lostTimeout must be 1-600 s") }
        if let group, group.isEmpty || group.utf8.count > 200 { throw ControlError("group must be 1-200 bytes") }
        if (namespace == nil) != (type == nil) && kind == .subscribe { throw ControlError("namespace and type go together") }
        switch kind {
        case .publish:
            guard ttl != nil else { throw ControlError("a publication needs a ttl") }
            guard let bytes = contentBytes, !bytes.isEmpty, bytes.count <= ExchangeLimits.maxContentBytes else {
                throw ControlError("a publication needs content as hex (1-\(ExchangeLimits.maxContentBytes) bytes)")
            }
        case .subscribe:
            if content != nil { throw ControlError("a subscription has no content") }
        case .beacon:
            guard let bytes = contentBytes, (1...15).contains(bytes.count) else { throw ControlError("a beacon needs an ID of 1-15 bytes as hex") }
        }
    }

    static func bytes(hex: String) -> [UInt8]? { Hex.decode(hex) }

    /// Lowercase hex of `bytes`.
    /// - Parameter bytes: any bytes.
    public static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }
}

/// Operation ids: 12 lowercase hex digits from the system's CSPRNG (not guessable by another client).
public enum OperationID {
    /// A fresh id.
    public static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return OperationSpec.hex((0..<6).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// Whether `id` has the form of an id.
    /// - Parameter id: the text to check.
    public static func isValid(_ id: String) -> Bool {
        id.utf8.count == 12 && id.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }
}
