import Foundation
import SottoTools

/// The daemon's control protocol: frames of a 4-byte big-endian length and that many bytes of JSON (a
/// ``ControlRequest`` from a client, a ``ControlReply`` from the daemon), each carrying the protocol
/// version. Frames are bounded by ``maxFrameBytes``.
public enum ControlProtocol {
    /// The version this build speaks; a request of another version is refused with an error reply.
    public static let version = 1
    /// The largest frame payload (bytes): a publication of 102 400 bytes as hex, with room to spare.
    public static let maxFrameBytes = 256 * 1024

    /// `payload` with its length prefix.
    public static func frame(_ payload: Data) -> Data {
        var length = UInt32(payload.count).bigEndian
        var data = Data(bytes: &length, count: 4)
        data.append(payload)
        return data
    }

    /// `value` encoded as a frame.
    public static func frame(_ value: some Encodable) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return frame((try? encoder.encode(value)) ?? Data())
    }
}

/// A control-protocol failure: the frame or its request was not acceptable (the message says why).
public struct ControlError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, for the peer and the log.
    public let description: String
    /// - Parameter description: what was wrong.
    public init(_ description: String) { self.description = description }
}

/// Splits a byte stream into frames: bytes are appended as they arrive, complete payloads are taken out.
/// A length of zero or above ``ControlProtocol/maxFrameBytes`` is an error (the stream cannot be resynchronised).
public struct ControlFrameDecoder: Sendable {
    private var buffer: [UInt8] = []
    private let limit: Int

    /// - Parameter limit: the largest payload accepted (bytes).
    public init(limit: Int = ControlProtocol.maxFrameBytes) { self.limit = limit }

    /// Whether part of a frame is buffered (a client that stops here is mid-frame).
    public var hasPartialFrame: Bool { !buffer.isEmpty }

    /// Adds bytes read from the stream.
    /// - Parameter bytes: the next bytes of the stream.
    public mutating func append(_ bytes: some Sequence<UInt8>) { buffer.append(contentsOf: bytes) }

    /// The next complete payload, or nil until more bytes arrive.
    /// - Throws: ``ControlError`` for an empty or oversized frame.
    public mutating func next() throws(ControlError) -> [UInt8]? {
        guard buffer.count >= 4 else { return nil }
        let length = buffer[0..<4].reduce(0) { $0 << 8 | Int($1) }
        guard length > 0 else { throw ControlError("empty frame") }
        guard length <= limit else { throw ControlError("frame of \(length) bytes is over the limit of \(limit) bytes") }
        guard buffer.count >= 4 + length else { return nil }
        let payload = Array(buffer[4..<(4 + length)])
        buffer.removeFirst(4 + length)
        return payload
    }
}

/// What a client asks of the daemon.
public enum ControlRequest: Sendable, Equatable {
    /// Start an operation; the reply carries its record (with its id).
    case start(OperationSpec)
    /// The operations, as records.
    case list
    /// End one operation by id.
    case cancel(String)
    /// Stream events (of one operation, or all with nil) until the client disconnects.
    case watch(String?)
    /// The consent file changed (sent by `sotto consent`): re-read it now.
    case consentChanged

    private struct Envelope: Codable {
        var version: Int
        var request: String
        var operation: OperationSpec?
        var id: String?
    }

    /// The request as a frame payload.
    public var payload: Data {
        let envelope: Envelope
        switch self {
        case .start(let spec): envelope = Envelope(version: ControlProtocol.version, request: "start", operation: spec)
        case .list: envelope = Envelope(version: ControlProtocol.version, request: "list")
        case .cancel(let id): envelope = Envelope(version: ControlProtocol.version, request: "cancel", id: id)
        case .watch(let id): envelope = Envelope(version: ControlProtocol.version, request: "watch", id: id)
        case .consentChanged: envelope = Envelope(version: ControlProtocol.version, request: "consent-changed")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(envelope)) ?? Data()
    }

    /// Decodes and checks a frame payload.
    /// - Parameter payload: one frame's bytes.
    /// - Throws: ``ControlError`` for malformed JSON, another version, an unknown request or a bad operation.
    public init(payload: [UInt8]) throws(ControlError) {
        let envelope: Envelope
        do { envelope = try JSONDecoder().decode(Envelope.self, from: Data(payload)) } catch {
            throw ControlError("malformed request: not a JSON object with a version and a request")
        }
        guard envelope.version == ControlProtocol.version else {
            throw ControlError("unsupported protocol version \(envelope.version) (this daemon speaks \(ControlProtocol.version))")
        }
        switch envelope.request {
        case "start":
            guard let spec = envelope.operation else { throw ControlError("start needs an operation") }
            try spec.validate()
            self = .start(spec)
        case "list": self = .list
        case "cancel":
            guard let id = envelope.id, OperationID.isValid(id) else { throw ControlError("cancel needs an operation id") }
            self = .cancel(id)
        case "watch":
            if let id = envelope.id, !OperationID.isValid(id) { throw ControlError("malformed operation id") }
            self = .watch(envelope.id)
        case "consent-changed": self = .consentChanged
        default: throw ControlError("unknown request '\(envelope.request.prefix(40))'")
        }
    }
}

/// What the daemon answers: one reply per request, and for `watch` a stream of event replies.
public struct ControlReply: Codable, Sendable {
    /// The protocol version.
    public var version = ControlProtocol.version
    /// ok, error, operation, operations or event.
    public var reply: String
    /// Why a request failed (error replies).
    public var error: String?
    /// The operation started (operation replies).
    public var operation: OperationRecord?
    /// Every operation (operations replies).
    public var operations: [OperationRecord]?
    /// A subscription event of an operation (event replies with a found, lost, signal or expired event).
    public var event: EventRecord?
    /// A status change of the daemon or an operation (event replies without a subscription event).
    public var notice: NoticeRecord?

    /// A plain acknowledgement.
    public static let ok = ControlReply(reply: "ok")
    /// A refusal with its reason.
    /// - Parameter message: why the request failed.
    public static func failure(_ message: String) -> ControlReply { ControlReply(reply: "error", error: message) }

    /// Decodes a frame payload from the daemon.
    /// - Parameter payload: one frame's bytes.
    /// - Throws: ``ControlError`` for malformed JSON or another version.
    public static func decode(_ payload: [UInt8]) throws(ControlError) -> ControlReply {
        let reply: ControlReply
        do { reply = try JSONDecoder().decode(ControlReply.self, from: Data(payload)) } catch {
            throw ControlError("malformed reply from the daemon")
        }
        guard reply.version == ControlProtocol.version else {
            throw ControlError("the daemon speaks protocol version \(reply.version), this client \(ControlProtocol.version): restart it")
        }
        return reply
    }
}
