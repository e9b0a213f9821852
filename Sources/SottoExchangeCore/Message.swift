/// Limits of the exchange, as in Google's Nearby Messages (see NEARBY.md §1.2-1.9).
public enum ExchangeLimits {
    /// Largest message content (bytes).
    public static let maxContentBytes = 102_400
    /// Longest message type (Unicode scalars).
    public static let maxTypeLength = 32
    /// Longest namespace (Unicode scalars), of messages, attachments and filters. Nearby's namespaces are
    /// project-scoped names (a Cloud project id is at most 30 characters); 100 leaves room and bounds what
    /// a matcher service holds and queues per message.
    public static let maxNamespaceLength = 100
    /// Largest audio-bytes payload (bytes).
    public static let maxAudioBytes = 10
    /// Largest beacon attachment (bytes).
    public static let maxAttachmentBytes = 1_024
    /// Longest attachment type (characters).
    public static let maxAttachmentTypeLength = 100
    /// TTL bounds (s) for publications; subscriptions may also be infinite.
    public static let ttlRange: ClosedRange<Int> = 1...86_400
    /// Default TTL (s).
    public static let defaultTTL = 300
    /// Active operations per app (publications plus subscriptions).
    public static let maxOperationsPerApp = 100
    /// Reserved namespace for audio bytes and raw beacon IDs.
    public static let reservedNamespace = "__reserved_namespace"
    /// Type of audio-bytes messages.
    public static let audioBytesType = "__audio_bytes"
    /// Type of raw beacon-ID messages.
    public static let beaconIDType = "__sotto_beacon_id"
    /// Time without a sighting before `lost` that a subscription may ask a matcher service for (s).
    public static let lostTimeoutRange: ClosedRange<Double> = 1...60
    /// Sightings in one report to a matcher service.
    public static let maxSightingsPerReport = 64
    /// A client linked to a matcher service reports a payload it still hears at most this often (s); the first
    /// sighting at once.
    public static let sightingReportInterval = 2.0
    /// Longest token-frame airtime a session may give for the matcher's turns (ms): beyond any profile's
    /// 16-byte frame.
    public static let maxFrameAirtimeMs: UInt32 = 5_000
    /// Longest a client follows one set of the matcher's turns (s): a round of 50 devices and then some.
    public static let maxTurnsFollow = 60.0
    /// Most slots a client takes from one set of the matcher's turns.
    public static let maxTurnsSlots = 16
}

/// Every way an exchange request can be wrong; each says what is allowed.
public enum ExchangeError: Error, Sendable, Hashable, CustomStringConvertible {
    case contentTooLarge(Int)
    case typeTooLong(Int)
    /// A namespace longer than ``ExchangeLimits/maxNamespaceLength`` (Unicode scalars).
    case namespaceTooLong(Int)
    /// A filter's type longer than ``ExchangeLimits/maxAttachmentTypeLength`` (Unicode scalars; filters
    /// name attachment types, which may be longer than message types).
    case filterTypeTooLong(Int)
    case reservedNamespace(String)
    case invalidNamespace(String)
    case invalidType(String)
    case invalidTTL(Int)
    case audioBytesLength(Int)
    case emptyFilter
    case quotaExceeded(Int)
    case attachmentTooLarge(Int)
    case invalidBeaconID(Int)
    case consentNotGranted
    case unknownOperation
    /// A lost timeout outside ``ExchangeLimits/lostTimeoutRange`` (s).
    case invalidLostTimeout(Double)
    /// An operation id already in use by another live operation of the session.
    case duplicateOperation
    /// The API key's rate (requests per second) was exceeded.
    case rateLimited(Double)
    /// The project already has this many sessions, its quota.
    case sessionQuotaExceeded(Int)
    /// The project's publications would hold more than its quota of bytes (namespace, type and content of
    /// every live publication of its sessions).
    case publicationBytesExceeded(Int)
    /// The API key is unknown or revoked.
    case unauthenticated
    /// The matcher service could not take the request (unreachable, shutting down, its store failing).
    case unavailable(String)
    /// A request the matcher service does not understand (a client bug or an incompatible version).
    case protocolViolation(String)

    public var description: String {
        switch self {
        case .contentTooLarge(let n): return "message content is \(n) bytes; at most \(ExchangeLimits.maxContentBytes) are allowed"
        case .typeTooLong(let n): return "message type is \(n) characters; at most \(ExchangeLimits.maxTypeLength) are allowed"
        case .namespaceTooLong(let n): return "namespace is \(n) characters; at most \(ExchangeLimits.maxNamespaceLength) are allowed"
        case .filterTypeTooLong(let n): return "filter type is \(n) characters; at most \(ExchangeLimits.maxAttachmentTypeLength) are allowed"
        case .reservedNamespace(let ns): return "namespace '\(ns)' is reserved for audio bytes and beacon IDs"
        case .invalidNamespace(let ns): return "namespace '\(ns)' is invalid: no '*' or '/' (and non-empty in a namespaced-type filter)"
        case .invalidType(let t): return "type '\(t)' is invalid: no '*' or '/'"
        case .invalidTTL(let t): return "TTL \(t) s is invalid: 1 to 86400 s (or infinite, for subscriptions only)"
        case .audioBytesLength(let n): return "audio bytes must be 1 to \(ExchangeLimits.maxAudioBytes) bytes, got \(n)"
        case .emptyFilter: return "a filter needs at least one include (all my types, a namespaced type, beacon IDs or audio bytes)"
        case .quotaExceeded(let n): return "too many operations: \(n) are active, at most \(ExchangeLimits.maxOperationsPerApp) per app"
        case .attachmentTooLarge(let n): return "attachment is \(n) bytes; at most \(ExchangeLimits.maxAttachmentBytes) are allowed"
        case .invalidBeaconID(let n): return "a beacon ID must be 1 to 15 bytes, got \(n)"
        case .consentNotGranted: return "the user has not granted consent for nearby exchange (see Consent)"
        case .unknownOperation: return "no such publication or subscription"
        case .invalidLostTimeout(let t): return "lost timeout \(t) s is invalid: \(ExchangeLimits.lostTimeoutRange.lowerBound) to \(ExchangeLimits.lostTimeoutRange.upperBound) s"
        case .duplicateOperation: return "an operation with this id is already active in the session"
        case .rateLimited(let rate): return "too many requests: this API key allows \(rate) per second"
        case .sessionQuotaExceeded(let n): return "the project already has \(n) sessions, its quota"
        case .publicationBytesExceeded(let n): return "the project's publications would exceed its quota of \(n) bytes (unpublish some first)"
        case .unauthenticated: return "the API key is unknown or revoked"
        case .unavailable(let reason): return "the matcher service is unavailable: \(reason)"
        case .protocolViolation(let what): return "protocol violation: \(what)"
        }
    }
}

/// A message: namespace, type and content. Identity is all three (two devices publishing the same bytes
/// publish one message, as in Nearby).
public struct Message: Sendable, Hashable, Codable, CustomStringConvertible {
    /// "" is the app's own namespace.
    public let namespace: String
    public let type: String
    public let content: [UInt8]

    /// - Throws: `ExchangeError` for oversized content, a long or wildcard type, or a reserved namespace.
    public init(namespace: String = "", type: String = "", content: [UInt8]) throws(ExchangeError) {
        guard content.count <= ExchangeLimits.maxContentBytes else { throw .contentTooLarge(content.count) }
        guard type.unicodeScalars.count <= ExchangeLimits.maxTypeLength else { throw .typeTooLong(type.unicodeScalars.count) }
        guard !type.contains("*"), !type.contains("/") else { throw .invalidType(type) }
        guard namespace.unicodeScalars.count <= ExchangeLimits.maxNamespaceLength else { throw .namespaceTooLong(namespace.unicodeScalars.count) }
        guard namespace != ExchangeLimits.reservedNamespace else { throw .reservedNamespace(namespace) }
        guard !namespace.contains("*"), !namespace.contains("/") else { throw .invalidNamespace(namespace) }
        self.namespace = namespace
        self.type = type
        self.content = content
    }

    /// An attachment (its limits checked by ``BeaconAttachment``; types may be up to 100 characters).
    init(namespace: String, type: String, validatedContent: [UInt8]) {
        self.namespace = namespace
        self.type = type
        content = validatedContent
    }

    /// A message as a matcher delivered it (already checked by the matcher: attachments may have longer
    /// types, audio bytes and beacon IDs live in the reserved namespace).
    package init(delivered namespace: String, type: String, content: [UInt8]) {
        self.namespace = namespace
        self.type = type
        self.content = content
    }

    /// Messages of the reserved namespace, made only by the library.
    init(reservedType: String, content: [UInt8]) {
        namespace = ExchangeLimits.reservedNamespace
        type = reservedType
        self.content = content
    }

    /// True for messages carried directly in the audio frame.
    public var isAudioBytes: Bool { namespace == ExchangeLimits.reservedNamespace && type == ExchangeLimits.audioBytesType }

    public var description: String {
        let text = String(validating: content, as: UTF8.self).flatMap { s in s.unicodeScalars.allSatisfy({ $0.value >= 0x20 }) ? "\"\(s)\"" : nil }
        let hex = content.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        return "\(namespace.isEmpty ? "" : namespace + "/")\(type.isEmpty ? "" : type + ":")\(text ?? hex)"
    }
}

/// A message of up to 10 bytes sent directly in the audio frame: no matcher needed.
public enum AudioBytes {
    /// The message audio bytes `bytes` arrive as.
    public static func message(_ bytes: [UInt8]) throws(ExchangeError) -> Message {
        guard (1...ExchangeLimits.maxAudioBytes).contains(bytes.count) else { throw .audioBytesLength(bytes.count) }
        return Message(reservedType: ExchangeLimits.audioBytesType, content: bytes)
    }
}

/// Beacon attachments: data a beacon's owner attaches to it, delivered as messages to subscribers that
/// hear the beacon.
public enum BeaconAttachment {
    /// An attachment as the message subscribers receive: namespace (non-empty), type (no '/', at most 100
    /// characters) and data (at most 1024 bytes).
    public static func message(namespace: String, type: String, data: [UInt8]) throws(ExchangeError) -> Message {
        guard data.count <= ExchangeLimits.maxAttachmentBytes else { throw .attachmentTooLarge(data.count) }
        guard namespace.unicodeScalars.count <= ExchangeLimits.maxNamespaceLength else { throw .namespaceTooLong(namespace.unicodeScalars.count) }
        guard !namespace.isEmpty, !namespace.contains("/"), !namespace.contains("*") else { throw .invalidNamespace(namespace) }
        guard type.count <= ExchangeLimits.maxAttachmentTypeLength, !type.contains("/"), !type.contains("*") else { throw .invalidType(type) }
        return Message(namespace: namespace, type: type, validatedContent: data)
    }
}

/// What a subscription receives: the OR of its includes.
public struct MessageFilter: Sendable, Hashable {
    public enum Include: Sendable, Hashable {
        /// Every message of the app's own namespace, any type.
        case allMyTypes
        /// Exactly this namespace and type.
        case namespacedType(namespace: String, type: String)
        /// Audio bytes of exactly this length (1...10).
        case audioBytes(Int)
        /// Beacons heard: their raw IDs (reserved namespace), and every attachment of the project's own
        /// beacons; with a namespaced type, only the attachments of that type (the project's own, and other
        /// beacons' public ones).
        case beaconIDs
    }
    public let includes: Set<Include>

    /// - Throws: `ExchangeError.emptyFilter` without includes, or for an invalid include.
    public init(_ includes: [Include]) throws(ExchangeError) {
        guard !includes.isEmpty else { throw .emptyFilter }
        for include in includes {
            switch include {
            case .namespacedType(let namespace, let type):
                guard namespace.unicodeScalars.count <= ExchangeLimits.maxNamespaceLength else { throw .namespaceTooLong(namespace.unicodeScalars.count) }
                guard type.unicodeScalars.count <= ExchangeLimits.maxAttachmentTypeLength else { throw .filterTypeTooLong(type.unicodeScalars.count) }
                guard !namespace.isEmpty, !namespace.contains("*"), !namespace.contains("/") else { throw .invalidNamespace(namespace) }
                guard !type.contains("*"), !type.contains("/") else { throw .invalidType(type) }
            case .audioBytes(let n):
                guard (1...ExchangeLimits.maxAudioBytes).contains(n) else { throw .audioBytesLength(n) }
            case .allMyTypes, .beaconIDs: break
            }
        }
        self.includes = Set(includes)
    }

    /// The default: every message of the app.
    public static let allMyTypes = try! MessageFilter([.allMyTypes])

    /// Whether this is a beacon subscription without a namespaced type: the seeds' default, which receives
    /// every attachment of the project's own beacons (a namespaced type narrows it to that type).
    var takesOwnBeaconsWhole: Bool {
        includes.contains(.beaconIDs) && !includes.contains { if case .namespacedType = $0 { true } else { false } }
    }

    /// Whether `message` passes.
    public func accepts(_ message: Message) -> Bool {
        includes.contains { include in
            switch include {
            case .allMyTypes: return message.namespace.isEmpty
            case .namespacedType(let namespace, let type): return message.namespace == namespace && message.type == type
            case .audioBytes(let n): return message.isAudioBytes && message.content.count == n
            case .beaconIDs: return message.namespace == ExchangeLimits.reservedNamespace && message.type == ExchangeLimits.beaconIDType
            }
        }
    }
}

/// How discovery runs.
public struct Strategy: Sendable, Hashable {
    public enum DiscoveryMode: Sendable, Hashable { case broadcast, scan, both }
    public enum DistanceType: Sendable, Hashable { case `default`, earshot }
    public enum TTL: Sendable, Hashable {
        case seconds(Int)
        /// Subscriptions only.
        case infinite
    }
    public let discoveryMode: DiscoveryMode
    public let distanceType: DistanceType
    public let ttl: TTL
    /// Low power preferred (iOS `GNSBeaconStrategy.lowPowerPreferred`, chrome.copresence `Strategy.lowPower`):
    /// the device may listen duty-cycled (`ScanDutyCycle` in SottoExchangeRadio), finding things later for
    /// less CPU. A preference the radio honours, carried to the matcher; matching is unchanged.
    public let lowPower: Bool

    /// - Throws: `ExchangeError.invalidTTL` outside 1...86400 s.
    public init(discoveryMode: DiscoveryMode = .both, distanceType: DistanceType = .default,
                ttl: TTL = .seconds(ExchangeLimits.defaultTTL), lowPower: Bool = false) throws(ExchangeError) {
        if case .seconds(let s) = ttl, !ExchangeLimits.ttlRange.contains(s) { throw .invalidTTL(s) }
        self.discoveryMode = discoveryMode
        self.distanceType = distanceType
        self.ttl = ttl
        self.lowPower = lowPower
    }

    public static let `default` = try! Strategy()

    /// TTL in seconds, or nil for infinite.
    var seconds: Double? {
        if case .seconds(let s) = ttl { return Double(s) }
        return nil
    }
}

/// What the first byte of a Sotto audio frame says the rest is.
public enum Payload: Sendable, Hashable {
    /// An exchange token issued by the matcher (6...15 bytes).
    case token([UInt8])
    /// An audio-bytes message (1...10 bytes).
    case audioBytes([UInt8])
    /// A beacon ID (1...15 bytes).
    case beacon([UInt8])
    /// A session's room alias (12 bits, 0...4095): a short name the matcher gives a session in a crowded room
    /// (``BroadcastCoordinator``), resolved only among the sessions of the listener's room. On the air it is the
    /// modem's alias frame (0.236 s of the default profile instead of a token frame's 0.54 s: a crowded room's
    /// turns go round about twice as fast); as a payload, two bytes (the kind in the first byte's high nibble).
    case roomAlias(UInt16)

    static let tokenKind: UInt8 = 0x10, audioKind: UInt8 = 0x20, beaconKind: UInt8 = 0x30, aliasKind: UInt8 = 0x40
    /// Largest room alias (12 bits).
    public static let maxRoomAlias: UInt16 = 0x0FFF

    /// The modem token: kind byte, then the data.
    public var frameBytes: [UInt8] {
        switch self {
        case .token(let b): return [Self.tokenKind] + b
        case .audioBytes(let b): return [Self.audioKind] + b
        case .beacon(let b): return [Self.beaconKind] + b
        case .roomAlias(let a): return [Self.aliasKind | UInt8(truncatingIfNeeded: (a >> 8) & 0x0F), UInt8(truncatingIfNeeded: a)]
        }
    }

    /// The payload of a frame the modem decoded: `alias` when it was the modem's alias frame, else `token` parsed
    /// (``init(frame:)``). Nil for frames of other applications, and for a token frame that claims the room-alias
    /// kind: room aliases are only ever played as the alias frame, so such a frame was made of noise and other
    /// frames' symbols (one in sixteen of the two-byte frames a crowd's collisions can make pass for one).
    public init?(decoded token: [UInt8], alias: UInt16?) {
        if let alias {
            guard alias <= Self.maxRoomAlias else { return nil }
            self = .roomAlias(alias)
            return
        }
        guard let payload = Payload(frame: token) else { return nil }
        if case .roomAlias = payload { return nil }
        self = payload
    }

    /// Parses a decoded modem token; nil for frames of other applications.
    public init?(frame: [UInt8]) {
        guard let kind = frame.first, frame.count >= 2 else { return nil }
        if kind & 0xF0 == Self.aliasKind {
            guard frame.count == 2 else { return nil }
            self = .roomAlias(UInt16(kind & 0x0F) << 8 | UInt16(frame[1]))
            return
        }
        let data = Array(frame.dropFirst())
        switch kind {
        case Self.tokenKind: self = .token(data)
        case Self.audioKind where data.count <= ExchangeLimits.maxAudioBytes: self = .audioBytes(data)
        case Self.beaconKind: self = .beacon(data)
        default: return nil
        }
    }
}
