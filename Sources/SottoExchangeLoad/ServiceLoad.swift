import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import SottoExchange
import SottoExchangeCore
import SottoExchangeWire
import Synchronization

/// A load generator for the matcher service: many simulated devices, each with a session, a publication
/// and a subscription, in clusters that hear each other; each device reports sightings of its neighbours'
/// tokens at a total rate. Measures sessions held, sightings per second, and the latency from the first
/// report of a pair of neighbours to each one's `found` (median, p99).
public enum ServiceLoad {
    public struct Configuration: Sendable {
        /// The service; several nodes of one service (sharing a PostgreSQL) take the devices in turn, so
        /// neighbours sit on different nodes.
        public var addresses: [MatcherAddress]
        public var address: MatcherAddress { addresses[0] }
        public var apiKey: String
        public var trustRoots: String?
        public var tls = false
        /// Simulated devices (one session each).
        public var sessions = 1_000
        /// Devices that hear each other.
        public var clusterSize = 5
        /// Sightings reported per second, over all devices.
        public var sightingsPerSecond = 1_000.0
        /// How long sightings are reported (s), after every session is open.
        public var duration = 20.0
        /// HTTP/2 connections the sessions share.
        public var connections = 8
        /// Bytes of each device's message.
        public var messageBytes = 64
        /// The noisy neighbour: a key (of another project) whose sessions report random beacon IDs, 64 per
        /// frame, while the load is measured; nil for none.
        public var noisyKey: String?
        /// Sessions of the noisy key.
        public var noisySessions = 4
        /// Frames per second the noisy sessions send in all (each with 64 sightings, the most a report may
        /// carry).
        public var noisyFramesPerSecond = 1_000.0

        public init(address: MatcherAddress, apiKey: String) {
            self.init(addresses: [address], apiKey: apiKey)
        }

        public init(addresses: [MatcherAddress], apiKey: String) {
            precondition(!addresses.isEmpty, "a load needs at least one address")
            self.addresses = addresses
            self.apiKey = apiKey
        }
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var sessionsRequested: Int
        public var sessionsOpen: Int
        public var openSeconds: Double
        public var sightingsSent: Int
        public var sightingSeconds: Double
        public var found: Int
        public var expectedFound: Int
        public var foundLatencies: [Double]
        public var errors: [String: Int]
        /// Pairs of neighbours heard at least once.
        public var pairs = 0
        /// The noisy neighbour's frames sent.
        public var noisyFrames = 0
        /// Rate-limit notices the noisy neighbour received (the service sends at most one a second per session,
        /// whatever it refused: its `sotto_rate_limited_total` counts the refused frames).
        public var noisyRefused = 0

        func percentile(_ p: Double) -> Double? {
            guard !foundLatencies.isEmpty else { return nil }
            let sorted = foundLatencies.sorted()
            return sorted[min(sorted.count - 1, Int((p * Double(sorted.count - 1)).rounded()))]
        }

        public var medianLatency: Double? { percentile(0.5) }
        public var p99Latency: Double? { percentile(0.99) }

        public var description: String {
            let ms = { (x: Double?) in x.map { String(format: "%.1f ms", $0 * 1000) } ?? "-" }
            var lines = [
                "sessions: \(sessionsOpen) of \(sessionsRequested) open (in \(String(format: "%.1f", openSeconds)) s)",
                "sightings: \(sightingsSent) in \(String(format: "%.1f", sightingSeconds)) s = \(String(format: "%.0f", Double(sightingsSent) / max(sightingSeconds, 1e-9)))/s",
                "found: \(found) of \(expectedFound) expected (\(pairs) pairs heard, found again after a lost included); latency from the first report of a pair not found: median \(ms(medianLatency)), p99 \(ms(p99Latency)), max \(ms(percentile(1)))",
            ]
            if noisyFrames > 0 {
                lines.append("noisy neighbour: \(noisyFrames) frames of \(ExchangeLimits.maxSightingsPerReport) sightings sent, \(noisyRefused) rate-limit notices received (at most one a second per session)")
            }
            if !errors.isEmpty { lines.append("errors: " + errors.sorted { $0.key < $1.key }.map { "\($0.key) x\($0.value)" }.joined(separator: ", ")) }
            return lines.joined(separator: "\n")
        }
    }

    /// One simulated device's stream.
    final class Device: Sendable {
        let index: Int
        let outbound: AsyncStream<ClientFrame>.Continuation
        let outboundStream: AsyncStream<ClientFrame>
        let token = Mutex<[UInt8]?>(nil)
        let welcomed = Atomic<Bool>(false)
        /// Set when the device's stream ended (refused, unreachable, or stopped).
        let ended = Atomic<Bool>(false)
        /// When this device last sent a sighting (s on the tally's clock): heartbeats only fill silences.
        let lastSent = Mutex(0.0)

        init(index: Int) {
            self.index = index
            (outboundStream, outbound) = AsyncStream.makeStream(of: ClientFrame.self)
        }
    }

    /// Shared measurements.
    final class Tally: Sendable {
        struct State {
            /// Per directed pair (subscriber << 32 | publisher): when it was first reported heard while not found.
            var pending: [Int64: Double] = [:]
            /// Directed pairs found and not lost.
            var visible: Set<Int64> = []
            var pairsHeard: Set<Int64> = []
            var latencies: [Double] = []
            var found = 0
            var expected = 0
            var errors: [String: Int] = [:]
            var stopping = false
            var noisyFrames = 0
            var noisyRefused = 0
        }
        let state = Mutex(State())
        /// The service's heartbeat interval (s), from its Welcome.
        let heartbeatInterval = Mutex(5.0)
        let started = ContinuousClock.now
        var now: Double {
            return (ContinuousClock.now - started).inSeconds
        }
        static func directed(_ subscriber: Int, _ publisher: Int) -> Int64 { Int64(subscriber) << 32 | Int64(publisher) }
        func error(_ what: String) { state.withLock { if !$0.stopping { $0.errors[what, default: 0] += 1 } } }

        /// `observer` reported hearing `source`: both subscriptions of the pair should find (earshot either way).
        func sighting(_ observer: Int, _ source: Int, at now: Double) {
            state.withLock { state in
                for key in [Self.directed(observer, source), Self.directed(source, observer)] where !state.visible.contains(key) && state.pending[key] == nil {
                    state.pending[key] = now
                    state.expected += 1
                }
                state.pairsHeard.insert(Self.directed(min(observer, source), max(observer, source)))
            }
        }

        func found(_ subscriber: Int, _ publisher: Int, at now: Double) {
            state.withLock { state in
                state.found += 1
                let key = Self.directed(subscriber, publisher)
                state.visible.insert(key)
                if let first = state.pending.removeValue(forKey: key) { state.latencies.append(now - first) }
            }
        }

        func lost(_ subscriber: Int, _ publisher: Int) {
            _ = state.withLock { $0.visible.remove(Self.directed(subscriber, publisher)) }
        }
    }

    /// Runs the load against a running service and reports what it measured.
    /// - Parameters:
    ///   - configuration: the service, the key, and the load (sessions, rate, duration).
    ///   - progress: called with a line of progress now and then.
    ///   - onOpen: called once every session is open (before sightings start), e.g. to read memory.
    ///   - onSightingsDone: called when the last sighting was sent (before the wait for the last found events
    ///     and the sessions' close), e.g. to read memory and CPU time under load.
    public static func run(_ configuration: Configuration, progress: @escaping @Sendable (String) -> Void = { _ in },
                           onOpen: @escaping @Sendable () -> Void = {},
                           onSightingsDone: @escaping @Sendable () -> Void = {}) async throws -> Report {
        let targets: [any ResolvableTarget] = configuration.addresses.map { address in
            switch address {
            case .tcp(let host, let port):
                return host.first?.isNumber == true ? .ipv4(address: host, port: port) : .dns(host: host, port: port)
            case .unix(let path): return .unixDomainSocket(path: path)
            }
        }
        var clients: [GRPCClient<HTTP2ClientTransport.Posix>] = []
        // Connections alternate between the nodes: device i uses connection i % count.
        for index in 0..<max(1, configuration.connections) * targets.count {
            let target = targets[index % targets.count]
            let security: HTTP2ClientTransport.Posix.TransportSecurity = configuration.tls || configuration.trustRoots != nil
                ? .tls { config in
                    if let roots = configuration.trustRoots { config.trustRoots = .certificates([.file(path: roots, format: .pem)]) }
                } : .plaintext
            clients.append(GRPCClient(transport: try HTTP2ClientTransport.Posix(target: target, transportSecurity: security)))
        }
        let devices = (0..<configuration.sessions).map(Device.init)
        let tally = Tally()
        let clusterSize = max(2, configuration.clusterSize)
        func cluster(of index: Int) -> Range<Int> {
            let start = index / clusterSize * clusterSize
            return start..<min(start + clusterSize, configuration.sessions)
        }
        var report = Report(sessionsRequested: configuration.sessions, sessionsOpen: 0, openSeconds: 0, sightingsSent: 0,
                            sightingSeconds: 0, found: 0, expectedFound: 0, foundLatencies: [], errors: [:])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in clients { group.addTask { try await client.runConnections() } }
            // The service holds few streams per connection that have not said Hello (8): each connection
            // opens its sessions a few at a time, the next once one is welcomed.
            let openers = clients.map { _ in OpenLimiter(slots: 8) }
            for device in devices {
                let client = clients[device.index % clients.count]
                let opener = openers[device.index % clients.count]
                group.addTask {
                    await opener.acquire()
                    await session(device, client: client, configuration: configuration, tally: tally, opened: { opener.release() })
                }
            }
            // Wait for the sessions to open (and get their tokens).
            let openStart = tally.now
            var open = 0
            // A stream that ended (service unreachable, key refused) will not open: stop waiting for it.
            while tally.now - openStart < 120 {
                open = devices.filter { $0.token.withLock { $0 } != nil }.count
                let ended = devices.filter { $0.ended.load(ordering: .acquiring) && $0.token.withLock { $0 } == nil }.count
                if open + ended == devices.count { break }
                progress("sessions open: \(open) of \(devices.count)")
                // Sessions open early stay alive while the others open (the service cuts off silent ones).
                var beat = ClientFrame()
                beat.kind = .heartbeat(Sotto_Exchange_V1_Heartbeat())
                let interval = tally.heartbeatInterval.withLock { $0 }, now = tally.now
                for device in devices where device.welcomed.load(ordering: .relaxed) && now - device.lastSent.withLock({ $0 }) > interval * 0.5 {
                    device.outbound.yield(beat)
                    device.lastSent.withLock { $0 = now }
                }
                try await Task.sleep(for: .milliseconds(500))
            }
            report.sessionsOpen = open
            report.openSeconds = tally.now - openStart
            guard open > 0 else {
                for device in devices { device.outbound.finish() }
                for client in clients { client.beginGracefulShutdown() }
                group.cancelAll()
                let errors = tally.state.withLock { $0.errors }
                let why = errors.isEmpty ? "none opened in \(Int(report.openSeconds)) s"
                    : errors.sorted { $0.key < $1.key }.map { "\($0.key) x\($0.value)" }.joined(separator: ", ")
                throw LoadError(description: "no session opened on \(configuration.addresses.map(\.description).joined(separator: ", ")): \(why)")
            }
            onOpen()
            if let noisyKey = configuration.noisyKey {
                let noisy = (0..<max(1, configuration.noisySessions)).map { Device(index: -1 - $0) }
                for device in noisy {
                    let client = clients[(-device.index) % clients.count]
                    group.addTask { await noisySession(device, key: noisyKey, client: client, tally: tally) }
                }
                let perSession = configuration.noisyFramesPerSecond / Double(noisy.count), duration = configuration.duration
                group.addTask { await sendNoise(noisy, framesPerSecond: perSession, duration: duration, tally: tally) }
            }
            progress("sessions open: \(open) of \(devices.count) in \(String(format: "%.1f", report.openSeconds)) s; reporting sightings")
            // Sightings: a random device reports a random neighbour's token, at the configured rate.
            var generator = SystemRandomNumberGenerator()
            let start = tally.now
            var sent = 0
            var skipped = 0
            let tokens = devices.map { $0.token.withLock { $0 } }
            // Heartbeats as devices send them, spread evenly: every device once per interval, from this loop
            // (one timer, not one per device).
            var beat = ClientFrame()
            beat.kind = .heartbeat(Sotto_Exchange_V1_Heartbeat())
            var beats = 0
            let beatsPerSecond = Double(devices.count) / (tally.heartbeatInterval.withLock { $0 } * 0.8)
            while tally.now - start < configuration.duration {
                let beatsDue = Int((tally.now - start) * beatsPerSecond)
                let now = tally.now
                let interval = tally.heartbeatInterval.withLock { $0 }
                while beats < beatsDue {
                    let device = devices[beats % devices.count]
                    if now - device.lastSent.withLock({ $0 }) > interval * 0.8 { device.outbound.yield(beat) }
                    beats += 1
                }
                var due = Int((tally.now - start) * configuration.sightingsPerSecond) - skipped
                while sent < due {
                    let observer = Int.random(in: 0..<devices.count, using: &generator)
                    let neighbours = cluster(of: observer)
                    // Only sightings really sent are counted: a device alone, or a neighbour without a session, sends nothing.
                    guard neighbours.count > 1 else { skipped += 1; due -= 1; continue }
                    var source = Int.random(in: neighbours, using: &generator)
                    if source == observer { source = neighbours.lowerBound + (source - neighbours.lowerBound + 1) % neighbours.count }
                    guard let token = tokens[source], tokens[observer] != nil else { skipped += 1; due -= 1; continue }
                    tally.sighting(observer, source, at: tally.now)
                    devices[observer].outbound.yield(ClientFrame(.observe([Sighting(payload: .token(token), snr: 15, level: -30)])))
                    devices[observer].lastSent.withLock { $0 = tally.now }
                    sent += 1
                }
                try await Task.sleep(for: .milliseconds(2))
            }
            report.sightingsSent = sent
            report.sightingSeconds = tally.now - start
            onSightingsDone()
            progress("waiting for the last found events")
            try await Task.sleep(for: .seconds(2))
            tally.state.withLock { $0.stopping = true }
            for device in devices { device.outbound.finish() }
            try await Task.sleep(for: .milliseconds(500))
            for client in clients { client.beginGracefulShutdown() }
            group.cancelAll()
        }
        tally.state.withLock { state in
            report.found = state.found
            report.foundLatencies = state.latencies
            report.errors = state.errors
            report.expectedFound = state.expected
            report.pairs = state.pairsHeard.count
            report.noisyFrames = state.noisyFrames
            report.noisyRefused = state.noisyRefused
        }
        return report
    }

    /// A load that could not run (no session opened).
    public struct LoadError: Error, Sendable, CustomStringConvertible {
        /// What happened, for people.
        public let description: String
    }

    /// The device index a load message names ("device N ...").
    static func publisher(of message: WireMessage) -> Int? {
        String(decoding: message.content.prefix(16), as: UTF8.self).split(separator: " ").dropFirst().first.flatMap { Int($0) }
    }

    static func session(_ device: Device, client: GRPCClient<HTTP2ClientTransport.Posix>, configuration: Configuration, tally: Tally,
                        opened: @escaping @Sendable () -> Void = {}) async {
        // `opened` once: at the Welcome, or when the stream ends without one.
        let once = Atomic<Bool>(false)
        let opened: @Sendable () -> Void = { if !once.exchange(true, ordering: .relaxed) { opened() } }
        defer { opened() }
        let content = Array("device \(device.index) ".utf8) + [UInt8](repeating: 0x2e, count: max(0, configuration.messageBytes - 16))
        await stream(device, key: configuration.apiKey, broadcasts: true, clientVersion: "sotto-bench", client: client,
                     tally: tally, errorLabel: "stream") { frame in
            switch frame.kind {
            case .welcome(let welcome):
                opened()
                device.welcomed.store(true, ordering: .relaxed)
                tally.heartbeatInterval.withLock { $0 = max(0.5, Double(welcome.heartbeatIntervalMs) / 1000) }
                let message = try! Message(content: content)
                device.outbound.yield(ClientFrame(.publish(OperationID(1), message, try! Strategy(ttl: .seconds(3_600)))))
                device.outbound.yield(ClientFrame(.subscribe(OperationID(2), .allMyTypes, try! Strategy(ttl: .seconds(3_600)), lostTimeout: 10)))
            case .token(let body):
                device.token.withLock { $0 = Array(body.token) }
            case .found(let body):
                let now = tally.now
                if let other = publisher(of: body.message) { tally.found(device.index, other, at: now) }
            case .lost(let body):
                if let other = publisher(of: body.message) { tally.lost(device.index, other) }
            case .opStatus(let body) where body.state == .rejected:
                tally.error("rejected: \(body.message)")
            case .error(let body):
                tally.error("error: \(body.message)")
            default:
                break
            }
        }
    }

    /// A noisy neighbour's session: says Hello and counts the service's refusals.
    static func noisySession(_ device: Device, key: String, client: GRPCClient<HTTP2ClientTransport.Posix>, tally: Tally) async {
        await stream(device, key: key, broadcasts: false, clientVersion: "sotto-bench-noisy", client: client, tally: tally,
                     errorLabel: "noisy stream") { frame in
            switch frame.kind {
            case .welcome: device.welcomed.store(true, ordering: .relaxed)
            case .error(let body) where body.code == .rateLimited: tally.state.withLock { $0.noisyRefused += 1 }
            default: break
            }
        }
    }

    /// One device's stream: a Hello with `key`, then the frames the device queues (`Device.outbound`); each frame the
    /// service sends goes to `onFrame`. Fails rather than waits when the service cannot be reached; a failure other than
    /// cancellation is tallied as an error named `errorLabel`.
    static func stream(_ device: Device, key: String, broadcasts: Bool, clientVersion: String,
                       client: GRPCClient<HTTP2ClientTransport.Posix>, tally: Tally, errorLabel: String,
                       onFrame: @escaping @Sendable (ServerFrame) -> Void) async {
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = key
        hello.broadcasts = broadcasts
        hello.clientVersion = clientVersion
        var helloFrame = ClientFrame()
        helloFrame.kind = .hello(hello)
        let first = helloFrame
        let exchange = Sotto_Exchange_V1_Exchange.Client(wrapping: client)
        var options = CallOptions.defaults
        // Fail (rather than wait forever) when the service cannot be reached: the load then ends with an error.
        options.waitForReady = false
        defer { device.ended.store(true, ordering: .releasing) }
        do {
            try await exchange.session(options: options, requestProducer: { writer in
                try await writer.write(first)
                for await frame in device.outboundStream { try await writer.write(frame) }
            }, onResponse: { response in
                for try await frame in response.messages { onFrame(frame) }
            })
        } catch let error as RPCError {
            if error.code != .cancelled { tally.error("\(errorLabel): \(error.code)") }
        } catch {
            tally.error("\(errorLabel): \(type(of: error))")
        }
    }

    /// Sends the noisy sessions' reports (random beacon IDs, 64 per frame) at `framesPerSecond` each, for
    /// `duration` seconds, with heartbeats between.
    static func sendNoise(_ devices: [Device], framesPerSecond: Double, duration: Double, tally: Tally) async {
        var generator = SystemRandomNumberGenerator()
        let start = tally.now
        var sent = 0
        while tally.now - start < duration, !Task.isCancelled {
            let due = Int((tally.now - start) * framesPerSecond)
            while sent < due {
                for device in devices where device.welcomed.load(ordering: .relaxed) {
                    let sightings = (0..<ExchangeLimits.maxSightingsPerReport).map { _ in
                        Sighting(payload: .beacon((0..<8).map { _ in UInt8.random(in: 0...255, using: &generator) }), snr: 10, level: -40)
                    }
                    device.outbound.yield(ClientFrame(.observe(sightings)))
                    tally.state.withLock { $0.noisyFrames += 1 }
                }
                sent += 1
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
        for device in devices { device.outbound.finish() }
    }
}

/// At most `slots` sessions of one connection between their stream's opening and their Welcome.
final class OpenLimiter: Sendable {
    private let state: Mutex<(free: Int, waiting: [CheckedContinuation<Void, Never>])>

    init(slots: Int) { state = Mutex((max(1, slots), [])) }

    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.free > 0 {
                    state.free -= 1
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiting.isEmpty {
                state.free += 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
