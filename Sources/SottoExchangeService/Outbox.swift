import DequeModule
import Dispatch
import SottoExchangeCore
import SottoExchangeWire
import Synchronization

/// The frames waiting to be written to one session's stream, bounded in count and bytes: the matcher never
/// waits for a client, and a client that does not read is cut off (its memory bounded) instead of slowing
/// the others down.
public final class Outbox: Sendable {
    /// Most frames and bytes held for one stream (bytes: namespaces, types, contents and every other text a
    /// frame carries, plus its framing: at least what the frames take on the wire).
    public struct Limits: Sendable {
        public var frames: Int
        public var bytes: Int
        public init(frames: Int = 4_096, bytes: Int = 4 << 20) {
            self.frames = frames
            self.bytes = bytes
        }
    }

    private struct State {
        var frames = Deque<ServerFrame>()
        var bytes = 0
        var waiter: CheckedContinuation<ServerFrame?, Never>?
        var finished = false
        var cutOff: CutOff?
    }
    private let state = Mutex(State())
    private let limits: Limits
    /// When the client last sent a frame (DispatchTime uptime, ns): written by the stream's reader for every
    /// frame (heartbeats need no trip through the matcher), read by the host's silence check.
    private let lastActivity = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)

    /// The client sent a frame now.
    public func touch() { lastActivity.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed) }

    /// Seconds since the client last sent a frame.
    public var silence: Double {
        let last = lastActivity.load(ordering: .relaxed), now = DispatchTime.now().uptimeNanoseconds
        return now > last ? Double(now - last) * 1e-9 : 0
    }
    /// Bytes counted per frame beyond the texts and bytes it carries (field tags, lengths, numbers, gRPC's
    /// 5-byte message prefix and HTTP/2 framing), and per message inside a frame. Both are at least what
    /// protobuf spends on them, so the count is an upper bound of the bytes written.
    static let frameOverhead = 64
    static let messageOverhead = 16

    public init(limits: Limits = Limits()) { self.limits = limits }

    /// Bytes a message takes in a frame: namespace, type and content (UTF-8) plus its framing.
    static func size(of message: WireMessage) -> Int {
        messageOverhead + message.namespace.utf8.count + message.type.utf8.count + message.content.count
    }

    /// Bytes counted for a frame: every text and byte string it carries (namespaces, types, contents, tokens,
    /// error texts) plus its framing; at least its serialized size.
    static func size(of frame: ServerFrame) -> Int {
        switch frame.kind {
        case .found(let body): return frameOverhead + size(of: body.message)
        case .lost(let body): return frameOverhead + size(of: body.message)
        case .signalChanged(let body): return frameOverhead + size(of: body.message)
        case .opStatus(let body):
            return frameOverhead + body.message.utf8.count + body.detail.utf8.count + body.visible.reduce(0) { $0 + size(of: $1) }
        case .error(let body): return frameOverhead + body.message.utf8.count + body.detail.utf8.count
        case .welcome(let body): return frameOverhead + body.sessionID.utf8.count + body.project.utf8.count + body.resumeSecret.count
        case .token(let body): return frameOverhead + body.token.count
        case .tokenStatus(let body): return frameOverhead + body.token.count
        case .turns(let body): return frameOverhead + 4 * body.slotOffsetsMs.count + (body.hasRoomAlias ? 4 : 0)
        case .expired, .profile, .none: return frameOverhead
        }
    }

    /// Bytes queued now: every text and byte string of the frames plus their framing (at least their size on
    /// the wire).
    public var queuedBytes: Int { state.withLock { $0.bytes } }

    /// Queues a frame. Returns false (and queues nothing) when the stream is over its limits: the caller cuts
    /// the session off.
    public func push(_ frame: ServerFrame) -> Bool {
        enum Outcome { case handOver(CheckedContinuation<ServerFrame?, Never>), queued, overflow }
        let size = Self.size(of: frame)
        let outcome: Outcome = state.withLock { state in
            if state.finished { return .queued }  // nobody will read it; not the client's fault
            if let waiter = state.waiter {
                state.waiter = nil
                return .handOver(waiter)
            }
            guard state.frames.count < limits.frames, state.bytes + size <= limits.bytes else { return .overflow }
            state.frames.append(frame)
            state.bytes += size
            return .queued
        }
        switch outcome {
        case .handOver(let waiter):
            waiter.resume(returning: frame)
            return true
        case .queued: return true
        case .overflow: return false
        }
    }

    /// The next frame to write; nil once finished and drained.
    public func next() async -> ServerFrame? {
        await withCheckedContinuation { continuation in
            let ready: ServerFrame?? = state.withLock { state in
                if let frame = state.frames.popFirst() {
                    state.bytes -= Self.size(of: frame)
                    return .some(frame)
                }
                if state.finished { return .some(nil) }
                state.waiter = continuation
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Ends the stream after the frames already queued (or at once, dropping them, when cut off).
    public func finish(cutOff: CutOff? = nil) {
        let waiter: CheckedContinuation<ServerFrame?, Never>? = state.withLock { state in
            guard !state.finished else { return nil }
            state.finished = true
            state.cutOff = cutOff
            if cutOff != nil {
                state.frames.removeAll()
                state.bytes = 0
            }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Why the service ended this stream, if it did.
    public var cutOff: CutOff? { state.withLock { $0.cutOff } }

    /// Frames waiting.
    public var count: Int { state.withLock { $0.frames.count } }
}
