import CoreMetrics
import Foundation
import Logging
import NIOCore
import Synchronization

/// Keeps the connections of the process's exchange listeners within ``TransportLimits``, as one budget: the gRPC
/// listener's and the web listener's connections count against the same caps (in all and per address), since they
/// share the process's descriptors. Admits or refuses each accepted connection (``ConnectionTable``), counts the
/// streams each gRPC connection holds, and sheds the oldest idle gRPC connections when the process runs out of
/// descriptors or a newcomer needs the room; a web connection holds a page's session or a request under way, and
/// is never shed. Called from the NIO event loops of the listeners.
final class ConnectionGuard: Sendable {
    private struct State {
        var table: ConnectionTable
        var channels: [UInt64: any Channel] = [:]
        var ids: [ObjectIdentifier: UInt64] = [:]
        /// The web listener's connections (the rest are gRPC connections).
        var web: Set<UInt64> = []
        var grpcCount: Int { table.count - web.count }
    }

    let limits: TransportLimits
    /// The connection cap, the descriptor limit counted.
    let maxConnections: Int
    private let state: Mutex<State>
    private let metrics: TransportMetrics
    private let refusals: LogThrottle
    private let exhaustion: LogThrottle
    private let logger: Logger

    init(limits: TransportLimits, metrics: TransportMetrics, logger: Logger, descriptorLimit: Int? = nil) {
        self.limits = limits
        maxConnections = limits.effectiveMaxConnections(descriptorLimit: descriptorLimit)
        state = Mutex(State(table: ConnectionTable(maxConnections: maxConnections, maxPerAddress: limits.maxConnectionsPerAddress)))
        self.metrics = metrics
        self.logger = logger
        refusals = LogThrottle(interval: 60)
        exhaustion = LogThrottle(interval: 60)
    }

    /// Connections held, gRPC and web.
    var count: Int { state.withLock { $0.table.count } }

    /// A connection was accepted: true to let it in (it is then tracked until it closes); false when it was
    /// refused and closed. An idle connection may be closed to make room for it.
    func admit(_ channel: any Channel) -> Bool {
        let address = channel.remoteAddress?.ipAddress
        let (admission, evicted, total) = state.withLock { state -> (ConnectionTable.Admission, (any Channel)?, Int) in
            let admission = state.table.arrive(address: address, now: Self.now())
            var evicted: (any Channel)?
            switch admission {
            case .admit(let id):
                state.channels[id] = channel
                state.ids[ObjectIdentifier(channel)] = id
            case .admitEvicting(let id, let old):
                evicted = state.channels.removeValue(forKey: old)
                if let evicted { state.ids[ObjectIdentifier(evicted)] = nil }
                state.channels[id] = channel
                state.ids[ObjectIdentifier(channel)] = id
            case .refuse:
                break
            }
            return (admission, evicted, state.grpcCount)
        }
        metrics.connections.record(total)
        switch admission {
        case .refuse(let refusal):
            channel.close(promise: nil)
            metrics.connectionsRefused.increment()
            refusals.log { suppressed in
                logger.warning("refused a connection from \(address ?? "a Unix socket"): \(refusal)\(suppressed > 0 ? " (\(suppressed) more refused since the last line)" : "")")
            }
            return false
        case .admit(let id), .admitEvicting(let id, _):
            if let evicted {
                evicted.close(promise: nil)
                metrics.connectionsShed.increment()
            }
            channel.closeFuture.whenComplete { [self] _ in closed(id, channel: channel) }
            return true
        }
    }

    private func closed(_ id: UInt64, channel: any Channel) {
        let total = state.withLock { state -> Int in
            if state.ids[ObjectIdentifier(channel)] == id {
                state.ids[ObjectIdentifier(channel)] = nil
                state.channels[id] = nil
                state.table.close(id)
            }
            return state.grpcCount
        }
        metrics.connections.record(total)
    }

    /// A connection of the web listener from `address` (nil: a Unix-socket peer) arrived: its number, counted busy
    /// until ``closeWeb(_:)`` (never shed for a newer one), or why it is refused. An idle gRPC connection may be
    /// closed to make room for it. The caller closes a refused connection.
    func admitWeb(address: String?) -> Result<UInt64, ConnectionTable.Refusal> {
        let (result, evicted, webCount, grpcCount) = state.withLock { state -> (Result<UInt64, ConnectionTable.Refusal>, (any Channel)?, Int, Int) in
            var evicted: (any Channel)?
            let result: Result<UInt64, ConnectionTable.Refusal>
            switch state.table.arrive(address: address, now: Self.now()) {
            case .admit(let id):
                result = .success(id)
            case .admitEvicting(let id, let old):
                // Only gRPC connections are ever idle: web ones count busy from their start.
                evicted = state.channels.removeValue(forKey: old)
                if let evicted { state.ids[ObjectIdentifier(evicted)] = nil }
                result = .success(id)
            case .refuse(let refusal):
                result = .failure(refusal)
            }
            if case .success(let id) = result {
                state.table.streamOpened(id)
                state.web.insert(id)
            }
            return (result, evicted, state.web.count, state.grpcCount)
        }
        metrics.webConnections.record(webCount)
        if let evicted {
            evicted.close(promise: nil)
            metrics.connectionsShed.increment()
            metrics.connections.record(grpcCount)
        }
        if case .failure = result { metrics.connectionsRefused.increment() }
        return result
    }

    /// A web connection admitted by ``admitWeb(address:)`` closed.
    func closeWeb(_ id: UInt64) {
        let webCount = state.withLock { state -> Int in
            if state.web.remove(id) != nil { state.table.close(id) }
            return state.web.count
        }
        metrics.webConnections.record(webCount)
    }

    /// An HTTP/2 stream opened on one of the connections (its parent channel): counted until it closes.
    func streamOpened(_ stream: any Channel) {
        guard let parent = stream.parent else { return }
        let key = ObjectIdentifier(parent)
        guard let id = state.withLock({ state -> UInt64? in
            guard let id = state.ids[key] else { return nil }
            state.table.streamOpened(id)
            return id
        }) else { return }
        stream.closeFuture.whenComplete { [self] _ in state.withLock { $0.table.streamClosed(id, now: Self.now()) } }
    }

    /// Closes the connections idle (no stream) for longer than the idle time-out and a second: the peers
    /// that ignored gRPC's GOAWAY at the time-out (it waits for a PING acknowledgement a silent peer never
    /// sends).
    func closeIdle() {
        let deadline = Self.now() - limits.idleTimeout - 1
        let expired = state.withLock { state -> [any Channel] in
            state.table.expireIdle(before: deadline).compactMap { id in
                guard let channel = state.channels.removeValue(forKey: id) else { return nil }
                state.ids[ObjectIdentifier(channel)] = nil
                return channel
            }
        }
        for channel in expired { channel.close(promise: nil) }
        if !expired.isEmpty { metrics.connections.record(state.withLock { $0.grpcCount }) }
    }

    /// Runs ``closeIdle()`` on `loop` every second (or quarter of the idle time-out, if shorter) until `until`
    /// completes (the listener closed).
    func sweepIdle(on loop: any EventLoop, until: EventLoopFuture<Void>) {
        let interval = TimeAmount.nanoseconds(Int64(min(1, limits.idleTimeout / 4) * 1e9))
        let task = loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [self] _ in closeIdle() }
        until.whenComplete { _ in task.cancel() }
    }

    /// Seconds on a monotonic clock.
    static func now() -> Double {
        let elapsed = ContinuousClock.now - origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }
    private static let origin = ContinuousClock.now

    /// `accept` failed for want of descriptors (EMFILE, ENFILE): the listener backs off (NIO pauses
    /// accepting for a second); here the oldest idle connections are closed to free descriptors, once per
    /// failure, and it is counted and logged (once a minute at most).
    func descriptorsExhausted(_ error: IOError) {
        let shed = state.withLock { state -> [any Channel] in
            var shed: [any Channel] = []
            while shed.count < 8, let id = state.table.oldestIdle(where: { _ in true }) {
                state.table.close(id)
                if let channel = state.channels.removeValue(forKey: id) {
                    state.ids[ObjectIdentifier(channel)] = nil
                    shed.append(channel)
                }
            }
            return shed
        }
        for channel in shed { channel.close(promise: nil) }
        metrics.descriptorExhaustion.increment()
        metrics.connectionsShed.increment(by: shed.count)
        let connections = count
        exhaustion.log { suppressed in
            logger.error("""
                out of file descriptors (\(error)): accepting paused, \(shed.count) idle connections closed; \
                \(connections) connections held, descriptor limit \(TransportLimits.descriptorLimit())\
                \(suppressed > 0 ? " (\(suppressed) more times since the last line)" : "")
                """)
        }
    }
}

/// At most one log line per interval; the lines in between are counted and the count handed to the next.
final class LogThrottle: Sendable {
    private let interval: Double
    private let state = Mutex<(last: ContinuousClock.Instant?, suppressed: Int)>((nil, 0))

    /// - Parameter interval: seconds between two lines at least.
    init(interval: Double) { self.interval = interval }

    /// Calls `body` with the number of lines suppressed since the last one, unless a line went out less than
    /// the interval ago (then counts this one).
    func log(_ body: (Int) -> Void) {
        let now = ContinuousClock.now
        let suppressed = state.withLock { state -> Int? in
            if let last = state.last, now - last < .seconds(interval) {
                state.suppressed += 1
                return nil
            }
            let suppressed = state.suppressed
            state = (now, 0)
            return suppressed
        }
        if let suppressed { body(suppressed) }
    }
}

/// First handler of the listening channel: lets each accepted connection through ``ConnectionGuard`` and
/// notices `accept` failing for want of descriptors.
final class AdmissionHandler: ChannelInboundHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    private let connections: ConnectionGuard

    init(connections: ConnectionGuard) { self.connections = connections }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if connections.admit(unwrapInboundIn(data)) { context.fireChannelRead(data) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? IOError, error.errnoCode == EMFILE || error.errnoCode == ENFILE {
            connections.descriptorsExhausted(error)
        }
        context.fireErrorCaught(error)
    }
}

/// Closes a connection that has not delivered the 24-byte HTTP/2 client preface (after its TLS handshake,
/// if any) within the timeout, then steps out of the pipeline.
final class PrefaceDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// Length of `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (bytes).
    static let prefaceLength = 24
    private let timeout: Double
    private let onTimeout: @Sendable () -> Void
    private var received = 0
    private var timer: Scheduled<Void>?

    /// - Parameters:
    ///   - timeout: seconds from the handler's addition.
    ///   - onTimeout: called when it closes a connection.
    init(timeout: Double, onTimeout: @escaping @Sendable () -> Void) {
        self.timeout = timeout
        self.onTimeout = onTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        let onTimeout = self.onTimeout
        timer = context.eventLoop.scheduleTask(in: .nanoseconds(Int64(timeout * 1e9))) {
            onTimeout()
            channel.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        received += unwrapInboundIn(data).readableBytes
        context.fireChannelRead(data)
        if received >= Self.prefaceLength, timer != nil {
            timer?.cancel()
            timer = nil
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }
}
