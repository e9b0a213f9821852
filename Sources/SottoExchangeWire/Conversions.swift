import Foundation
import SottoExchangeCore

/// Wire names for the generated protocol types.
public typealias ClientFrame = Sotto_Exchange_V1_ClientFrame
public typealias ServerFrame = Sotto_Exchange_V1_ServerFrame
public typealias WireMessage = Sotto_Exchange_V1_ExchangeMessage
public typealias WireErrorCode = Sotto_Exchange_V1_ErrorCode

// Conversions between the exchange's value types and the protocol's messages. The service checks every
// field it receives with the same validating initialisers the client library uses (one definition of the
// limits), so a frame from any client gets the same typed errors.

extension WireMessage {
    public init(_ message: Message) {
        self.init()
        namespace = message.namespace
        type = message.type
        content = Data(message.content)
    }

    /// A message a client sent: checked against every limit.
    public func validated() throws(ExchangeError) -> Message {
        try Message(namespace: namespace, type: type, content: Array(content))
    }

    /// A message the service delivered (already checked there).
    public var delivered: Message { Message(delivered: namespace, type: type, content: Array(content)) }
}

extension Sotto_Exchange_V1_Strategy {
    public init(_ strategy: Strategy) {
        self.init()
        switch strategy.discoveryMode {
        case .both: mode = .both
        case .broadcast: mode = .broadcast
        case .scan: mode = .scan
        }
        switch strategy.ttl {
        case .seconds(let s): ttlSeconds = UInt32(clamping: s)
        case .infinite: infinite = true
        }
        distanceType = strategy.distanceType == .earshot ? .earshot : .default
        lowPower = strategy.lowPower
    }

    /// - Parameter subscription: only subscriptions may be infinite.
    public func validated(subscription: Bool) throws(ExchangeError) -> Strategy {
        let discovery: Strategy.DiscoveryMode
        switch mode {
        case .both: discovery = .both
        case .broadcast: discovery = .broadcast
        case .scan: discovery = .scan
        case .UNRECOGNIZED(let raw): throw .protocolViolation("unknown discovery mode \(raw)")
        }
        let distance: Strategy.DistanceType
        switch distanceType {
        case .default: distance = .default
        case .earshot: distance = .earshot
        case .UNRECOGNIZED(let raw): throw .protocolViolation("unknown distance type \(raw)")
        }
        if infinite {
            guard subscription else { throw .invalidTTL(Int.max) }
            return try Strategy(discoveryMode: discovery, distanceType: distance, ttl: .infinite, lowPower: lowPower)
        }
        let seconds = ttlSeconds == 0 ? ExchangeLimits.defaultTTL : Int(ttlSeconds)
        return try Strategy(discoveryMode: discovery, distanceType: distance, ttl: .seconds(seconds), lowPower: lowPower)
    }
}

extension Sotto_Exchange_V1_FilterInclude {
    public init(_ include: MessageFilter.Include) {
        self.init()
        switch include {
        case .allMyTypes: kind = .allMyTypes
        case .namespacedType(let namespace, let type):
            kind = .namespacedType
            self.namespace = namespace
            self.type = type
        case .audioBytes(let length):
            kind = .audioBytes
            self.length = UInt32(clamping: length)
        case .beaconIDs: kind = .beaconIds
        }
    }

    public func validated() throws(ExchangeError) -> MessageFilter.Include {
        switch kind {
        case .allMyTypes: return .allMyTypes
        case .namespacedType: return .namespacedType(namespace: namespace, type: type)
        case .audioBytes: return .audioBytes(Int(length))
        case .beaconIds: return .beaconIDs
        case .UNRECOGNIZED(let raw): throw .protocolViolation("unknown filter include \(raw)")
        }
    }
}

extension MessageFilter {
    /// The includes of a filter in a stable order (a set has none).
    public var orderedIncludes: [Include] {
        includes.sorted { "\($0)" < "\($1)" }
    }

    /// A filter a client sent: at most 16 includes, each checked.
    public static func validated(_ includes: [Sotto_Exchange_V1_FilterInclude]) throws(ExchangeError) -> MessageFilter {
        guard includes.count <= 16 else { throw .protocolViolation("a filter has at most 16 includes, got \(includes.count)") }
        var checked: [Include] = []
        for include in includes { checked.append(try include.validated()) }
        return try MessageFilter(checked)
    }
}

/// The error code, limit, value and offending text of an exchange error on the wire.
public struct WireError: Sendable, Hashable {
    public var code: WireErrorCode
    public var limit: Int64 = 0
    public var value: Int64 = 0
    public var detail: String = ""
    public var message: String

    public init(_ error: ExchangeError) {
        message = error.description
        switch error {
        case .contentTooLarge(let n): code = .contentTooLarge; limit = Int64(ExchangeLimits.maxContentBytes); value = Int64(n)
        case .typeTooLong(let n): code = .typeTooLong; limit = Int64(ExchangeLimits.maxTypeLength); value = Int64(n)
        case .namespaceTooLong(let n):
            code = .invalidNamespace; limit = Int64(ExchangeLimits.maxNamespaceLength); value = Int64(n); detail = "too long"
        case .filterTypeTooLong(let n): code = .typeTooLong; limit = Int64(ExchangeLimits.maxAttachmentTypeLength); value = Int64(n)
        case .reservedNamespace(let ns): code = .reservedNamespace; detail = ns
        case .invalidNamespace(let ns): code = .invalidNamespace; detail = ns
        case .invalidType(let t): code = .invalidType; detail = t
        case .invalidTTL(let t): code = .invalidTtl; limit = Int64(ExchangeLimits.ttlRange.upperBound); value = Int64(t)
        case .audioBytesLength(let n): code = .audioBytesLength; limit = Int64(ExchangeLimits.maxAudioBytes); value = Int64(n)
        case .emptyFilter: code = .emptyFilter
        case .quotaExceeded(let n): code = .quotaExceeded; limit = Int64(ExchangeLimits.maxOperationsPerApp); value = Int64(n)
        case .attachmentTooLarge(let n): code = .contentTooLarge; limit = Int64(ExchangeLimits.maxAttachmentBytes); value = Int64(n)
        case .invalidBeaconID(let n): code = .protocol; value = Int64(n)
        case .consentNotGranted: code = .protocol
        case .unknownOperation: code = .unknownOperation
        case .invalidLostTimeout(let t): code = .invalidLostTimeout; limit = Int64(ExchangeLimits.lostTimeoutRange.upperBound * 1000); value = Int64((t * 1000).isFinite ? min(max(t * 1000, -1e15), 1e15) : -1)
        case .duplicateOperation: code = .duplicateOperation
        case .rateLimited(let rate): code = .rateLimited; limit = Int64(rate.isFinite ? min(rate, 1e15) : 0)
        case .sessionQuotaExceeded(let n): code = .quotaExceeded; value = Int64(n); detail = "sessions"
        case .publicationBytesExceeded(let n): code = .quotaExceeded; limit = Int64(n); detail = "publication-bytes"
        case .unauthenticated: code = .protocol; detail = "unauthenticated"
        case .unavailable(let why): code = .unavailable; detail = why
        case .protocolViolation(let what): code = .protocol; detail = what
        }
    }

    public init(code: WireErrorCode, limit: Int64, value: Int64, detail: String, message: String) {
        self.code = code
        self.limit = limit
        self.value = value
        self.detail = detail
        self.message = message
    }

    /// The exchange error a client reports for this wire error.
    public var exchangeError: ExchangeError {
        switch code {
        case .contentTooLarge:
            return limit == Int64(ExchangeLimits.maxAttachmentBytes) ? .attachmentTooLarge(Int(clamping: value)) : .contentTooLarge(Int(clamping: value))
        case .typeTooLong:
            return limit == Int64(ExchangeLimits.maxAttachmentTypeLength) ? .filterTypeTooLong(Int(clamping: value)) : .typeTooLong(Int(clamping: value))
        case .reservedNamespace: return .reservedNamespace(detail)
        case .invalidNamespace: return limit > 0 ? .namespaceTooLong(Int(clamping: value)) : .invalidNamespace(detail)
        case .invalidType: return .invalidType(detail)
        case .invalidTtl: return .invalidTTL(Int(clamping: value))
        case .audioBytesLength: return .audioBytesLength(Int(clamping: value))
        case .emptyFilter: return .emptyFilter
        case .quotaExceeded:
            if detail == "publication-bytes" { return .publicationBytesExceeded(Int(clamping: limit)) }
            return detail == "sessions" ? .sessionQuotaExceeded(Int(clamping: value)) : .quotaExceeded(Int(clamping: value))
        case .invalidLostTimeout: return .invalidLostTimeout(Double(value) / 1000)
        case .unknownOperation: return .unknownOperation
        case .duplicateOperation: return .duplicateOperation
        case .rateLimited: return .rateLimited(Double(limit))
        case .unavailable: return .unavailable(detail.isEmpty ? message : detail)
        case .protocol, .unspecified, .UNRECOGNIZED:
            return detail == "unauthenticated" ? .unauthenticated : .protocolViolation(detail.isEmpty ? message : detail)
        }
    }
}

extension Sotto_Exchange_V1_OperationStatus {
    public static func accepted(_ op: UInt32, visible: [Message] = []) -> Self {
        var status = Self()
        status.opID = op
        status.state = .active
        status.visible = visible.map(WireMessage.init)
        return status
    }

    /// The acknowledgement of an unpublish or unsubscribe: the operation is over.
    /// - Parameter op: the operation's id.
    public static func ended(_ op: UInt32) -> Self {
        var status = Self()
        status.opID = op
        status.state = .ended
        return status
    }

    public static func rejected(_ op: UInt32, _ error: ExchangeError) -> Self {
        let wire = WireError(error)
        var status = Self()
        status.opID = op
        status.state = .rejected
        status.error = wire.code
        status.limit = wire.limit
        status.value = wire.value
        status.detail = wire.detail
        status.message = wire.message
        return status
    }

    public var wireError: WireError { WireError(code: error, limit: limit, value: value, detail: detail, message: message) }
}

extension Sotto_Exchange_V1_Error {
    /// The code, limit, value and text of this error (``WireError/exchangeError`` is what a client reports).
    public var wireError: WireError { WireError(code: code, limit: limit, value: value, detail: detail, message: message) }
}

extension ServerFrame {
    public static func status(_ status: Sotto_Exchange_V1_OperationStatus) -> Self {
        var frame = Self()
        frame.kind = .opStatus(status)
        return frame
    }

    /// The frame of an error that concerns no operation.
    /// - Parameters:
    ///   - error: what went wrong.
    ///   - fatal: the service refuses the session: the stream ends after this frame and the client stops.
    public static func error(_ error: ExchangeError, fatal: Bool = false) -> Self {
        let wire = WireError(error)
        var body = Sotto_Exchange_V1_Error()
        (body.code, body.message, body.limit, body.value, body.detail) = (wire.code, wire.message, wire.limit, wire.value, wire.detail)
        body.fatal = fatal
        var frame = Self()
        frame.kind = .error(body)
        return frame
    }

    /// The frame that tells one session about a matcher event (the session id is the stream's).
    public init(_ notice: MatcherNotice) {
        self.init()
        switch notice {
        case .token(let token):
            var body = Sotto_Exchange_V1_TokenDirective()
            body.token = Data(token)
            kind = .token(body)
        case .found(let op, let message):
            var body = Sotto_Exchange_V1_Found()
            body.opID = UInt32(clamping: op.value)
            body.message = WireMessage(message)
            kind = .found(body)
        case .lost(let op, let message):
            var body = Sotto_Exchange_V1_Lost()
            body.opID = UInt32(clamping: op.value)
            body.message = WireMessage(message)
            kind = .lost(body)
        case .signalChanged(let op, let message, let snr, let level):
            var body = Sotto_Exchange_V1_SignalChanged()
            body.opID = UInt32(clamping: op.value)
            body.message = WireMessage(message)
            body.snrDb = snr
            body.levelDbfs = level
            kind = .signalChanged(body)
        case .expired(let op):
            var body = Sotto_Exchange_V1_Expired()
            body.opID = UInt32(clamping: op.value)
            kind = .expired(body)
        case .invalidToken(let token):
            var body = Sotto_Exchange_V1_TokenStatus()
            body.token = Data(token)
            body.valid = false
            kind = .tokenStatus(body)
        case .accepted(let op, let visible):
            kind = .opStatus(.accepted(UInt32(clamping: op.value), visible: visible))
        case .rejected(let op, let error):
            kind = .opStatus(.rejected(UInt32(clamping: op.value), error))
        case .turns(let offsets, let follow, let alias):
            var body = Sotto_Exchange_V1_BroadcastTurns()
            if let alias { body.roomAlias = UInt32(alias) }
            func milliseconds(_ seconds: Double) -> UInt32 {
                seconds.isFinite ? UInt32((min(max(seconds, 0), 4e6) * 1000).rounded()) : 0
            }
            body.slotOffsetsMs = offsets.map(milliseconds)
            body.followMs = milliseconds(follow)
            kind = .turns(body)
        case .profile(let profile):
            var body = Sotto_Exchange_V1_BroadcastProfile()
            body.profile = profile == .robust ? .robust : .default
            kind = .profile(body)
        case .connected, .disconnected, .failed:
            break  // the link's own state, never sent
        }
    }

    /// The notice a client reads from this frame (nil for a welcome or an unknown frame).
    public var notice: MatcherNotice? {
        switch kind {
        case .token(let body): return .token(Array(body.token))
        case .found(let body): return .found(OperationID(Int(body.opID)), body.message.delivered)
        case .lost(let body): return .lost(OperationID(Int(body.opID)), body.message.delivered)
        case .signalChanged(let body):
            return .signalChanged(OperationID(Int(body.opID)), body.message.delivered, snr: body.snrDb, level: body.levelDbfs)
        case .expired(let body): return .expired(OperationID(Int(body.opID)))
        case .tokenStatus(let body): return body.valid ? nil : .invalidToken(Array(body.token))
        case .opStatus(let body):
            switch body.state {
            case .active: return .accepted(OperationID(Int(body.opID)), visible: body.visible.map(\.delivered))
            case .rejected: return .rejected(OperationID(Int(body.opID)), body.wireError.exchangeError)
            case .ended, .UNRECOGNIZED: return nil
            }
        case .turns(let body):
            // Bounded whatever the service says: a damaged or hostile frame cannot mute the token for long.
            let follow = min(Double(body.followMs) / 1000, ExchangeLimits.maxTurnsFollow)
            let offsets = body.slotOffsetsMs.prefix(ExchangeLimits.maxTurnsSlots).map { Double($0) / 1000 }.filter { $0 <= follow }
            // An alias out of range is no alias: the token is played in those slots.
            let alias = body.hasRoomAlias && body.roomAlias <= UInt32(Payload.maxRoomAlias) ? UInt16(body.roomAlias) : nil
            return .turns(slotOffsets: offsets, followFor: follow, alias: alias)
        case .profile(let body):
            switch body.profile {
            case .default: return .profile(.standard)
            case .robust: return .profile(.robust)
            case .UNRECOGNIZED: return nil  // a profile of a later service: keep playing the current one
            }
        case .welcome, .error, .none: return nil
        }
    }
}

extension ClientFrame {
    /// The frame a client sends for a request.
    public init(_ request: MatcherRequest) {
        self.init()
        switch request {
        case .publish(let op, let message, let strategy):
            var body = Sotto_Exchange_V1_Publish()
            body.opID = UInt32(clamping: op.value)
            body.message = WireMessage(message)
            body.strategy = Sotto_Exchange_V1_Strategy(strategy)
            kind = .publish(body)
        case .unpublish(let op):
            var body = Sotto_Exchange_V1_Unpublish()
            body.opID = UInt32(clamping: op.value)
            kind = .unpublish(body)
        case .subscribe(let op, let filter, let strategy, let lostTimeout):
            var body = Sotto_Exchange_V1_Subscribe()
            body.opID = UInt32(clamping: op.value)
            body.includes = filter.orderedIncludes.map(Sotto_Exchange_V1_FilterInclude.init)
            body.strategy = Sotto_Exchange_V1_Strategy(strategy)
            body.lostTimeoutMs = lostTimeout.isFinite ? UInt32(max(0, min(lostTimeout * 1000, 4e9)).rounded()) : 0
            kind = .subscribe(body)
        case .unsubscribe(let op):
            var body = Sotto_Exchange_V1_Unsubscribe()
            body.opID = UInt32(clamping: op.value)
            kind = .unsubscribe(body)
        case .observe(let sightings):
            var body = Sotto_Exchange_V1_Observe()
            body.sightings = sightings.map { sighting in
                var wire = Sotto_Exchange_V1_Sighting()
                wire.frame = Data(sighting.payload.frameBytes)
                wire.snrDb = sighting.snr
                wire.levelDbfs = sighting.level
                return wire
            }
            kind = .observe(body)
        case .takeTurns(let airtime, let aliasAirtime):
            var body = Sotto_Exchange_V1_TakeTurns()
            func milliseconds(_ seconds: Double) -> UInt32 {
                seconds.isFinite ? UInt32(min((max(0, seconds) * 1000).rounded(.up), Double(UInt32.max))) : 0
            }
            body.frameAirtimeMs = milliseconds(airtime)
            body.aliasFrameAirtimeMs = aliasAirtime.map(milliseconds) ?? 0
            kind = .takeTurns(body)
        }
    }
}
