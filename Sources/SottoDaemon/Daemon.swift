import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoExchangeRadio
import SottoLive
import SottoModem
import SottoSupport
import SottoTools
import Synchronization

/// How the daemon scans (the seeds' low-power preference): always, or `listen` seconds every `period` seconds.
public enum ScanPolicy: Sendable, Equatable {
    /// The capture device stays open: lowest discovery latency.
    case continuous
    /// The capture device is open `listen` s out of every `period` s: less CPU, up to `period - listen` s
    /// more discovery latency. Lost timeouts are raised to at least `period + 1` s so that finds do not flap.
    case dutyCycled(listen: Double, period: Double)
}

/// How the daemon is set up: its files, the user's consent, the devices, and its matcher.
public struct DaemonConfiguration: Sendable {
    /// The matcher the daemon's operations use.
    public enum Matcher: Sendable {
        /// The embedded core: audio-bytes messages only (up to 10 bytes, in the frame itself).
        case embedded
        /// A `sotto serve` service: `connect` returns a manager linked to it (connected), with the given
        /// default lost timeout (s), that reports its connection changes to the handler it is given;
        /// `description` names it in logs.
        case service(description: String,
                     connect: @Sendable (_ lostTimeout: Double, _ onNotice: @escaping @Sendable (MatcherNotice) -> Void) async throws -> MessageManager)
    }

    /// Runtime and state directories.
    public var paths: DaemonPaths
    /// The user's consent.
    public var consent: Consent
    /// The capture device shared by every operation.
    public var capture: PCMConfiguration
    /// The playback device shared by every operation.
    public var playback: PCMConfiguration
    /// Repetition of each broadcast frame (s), plus 0...``jitter`` s.
    public var interval: Double
    /// The random part of the repetition (s).
    public var jitter: Double
    /// The matcher.
    public var matcher: Matcher
    /// Seconds between attempts to reopen a failed device or reach the matcher again.
    public var retryInterval: Double
    /// The process environment (socket activation: `LISTEN_PID`, `LISTEN_FDS`).
    public var environment: [String: String]
    /// Continuous or duty-cycled scanning.
    public var scanning: ScanPolicy = .continuous

    /// - Parameters:
    ///   - paths: runtime and state directories.
    ///   - consent: the user's consent.
    ///   - capture: the capture device.
    ///   - playback: the playback device.
    ///   - interval: repetition of broadcast frames (s).
    ///   - jitter: random extra delay per frame (s; `FramePlayer.Schedule.defaultJitter`, as every transmitting command).
    ///   - matcher: embedded or a service.
    ///   - retryInterval: seconds between attempts to recover a device or matcher.
    ///   - environment: the process environment.
    public init(paths: DaemonPaths = DaemonPaths(), consent: Consent = Consent(), capture: PCMConfiguration, playback: PCMConfiguration,
                interval: Double = 1.5, jitter: Double = FramePlayer.Schedule.defaultJitter, matcher: Matcher = .embedded, retryInterval: Double = 1,
                environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.paths = paths
        self.consent = consent
        self.capture = capture
        self.playback = playback
        self.interval = interval
        self.jitter = jitter
        self.matcher = matcher
        self.retryInterval = retryInterval
        self.environment = environment
    }
}

/// The per-user daemon (`sotto daemon`): owns the devices (one capture and one playback path through
/// `AudioRadio`, shared by every operation), the matcher connection, and every publication, subscription
/// and beacon clients hand it over the control socket. Device faults are reported and the operations
/// resume when the device returns; consent is enforced and its revocation stops everything at once;
/// persistent operations are saved and restored with their remaining time to live.
public actor Daemon: ControlHandler {
    private let configuration: DaemonConfiguration
    private let log: @Sendable (String) -> Void
    private let store: OperationStore

    private struct Handles {
        var publication: PublicationHandle?
        var subscription: SubscriptionHandle?
        var pump: Task<Void, Never>?
        var beacon: Broadcaster?
    }

    /// The shared exchange: one manager for every publication and subscription, and the radio feeding it.
    private final class Engine: @unchecked Sendable {
        let manager: MessageManager
        /// The manager's time: monotonic seconds since the engine was made (the radio's too, from ``origin``).
        let time = Stopwatch(ContinuousClock())
        var radio: AudioRadio?
        var lastAttempt = Date.distantPast
        init(manager: MessageManager) { self.manager = manager }
        var now: Double { time.elapsed() }
        /// The instant the manager's time counts from, for the radio (which then keeps time on its own clock).
        var origin: Date { Date(timeIntervalSinceNow: -time.elapsed()) }
    }

    private final class Watcher: @unchecked Sendable {
        let connection: ControlConnection
        let operation: String?
        private let lock = NSLock()
        private var queue: [ControlReply] = []
        private let ready = DispatchSemaphore(value: 0)
        private var ended = false
        static let limit = 1024

        init(connection: ControlConnection, operation: String?) {
            self.connection = connection
            self.operation = operation
            let thread = Thread { [self] in
                while true {
                    ready.wait()
                    let next = lock.withLock { () -> ControlReply? in ended ? nil : (queue.isEmpty ? nil : queue.removeFirst()) }
                    if lock.withLock({ ended }) { return }
                    guard let next else { continue }
                    if !connection.send(next) { end(); return }
                }
            }
            thread.name = "sotto-watch"
            thread.start()
        }

        func enqueue(_ reply: ControlReply) {
            lock.withLock {
                if queue.count >= Self.limit { queue.removeFirst() }
                queue.append(reply)
            }
            ready.signal()
        }

        func end() {
            lock.withLock { ended = true }
            ready.signal()
        }
    }

    /// The operations' bookkeeping (pure); their running handles are here.
    private var book: OperationBook
    private var handles: [String: Handles] = [:]
    private var engine: Engine?
    private var engineTask: Task<Engine, any Error>?
    private var deviceFault: String?
    private var sinks: [any DaemonEventSink] = []
    private var streams: [UUID: AsyncStream<DaemonEvent>.Continuation] = [:]
    private var watchers: [ObjectIdentifier: Watcher] = [:]
    private var lastWaitingRetry = Date.distantPast

    /// - Parameters:
    ///   - configuration: files, consent, devices and matcher.
    ///   - log: receives the daemon's log lines (warnings, faults, refusals).
    public init(configuration: DaemonConfiguration, log: @escaping @Sendable (String) -> Void) {
        self.configuration = configuration
        self.log = log
        self.store = OperationStore(file: configuration.paths.operations)
        self.book = OperationBook(consentGranted: configuration.consent.isGranted)
    }

    // MARK: Events

    /// Adds a sink that receives every event from now on.
    /// - Parameter sink: the receiver (desktop notifications, a journal).
    public func add(sink: any DaemonEventSink) { sinks.append(sink) }

    /// Every event from now on, as a stream (ends when the daemon stops).
    public func events() -> AsyncStream<DaemonEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: DaemonEvent.self, bufferingPolicy: .bufferingNewest(1024))
        let key = UUID()
        streams[key] = continuation
        continuation.onTermination = { [weak self] _ in Task { await self?.dropStream(key) } }
        return stream
    }

    private func dropStream(_ key: UUID) { streams.removeValue(forKey: key) }

    private func emit(_ event: DaemonEvent) {
        for sink in sinks { sink.receive(event) }
        for continuation in streams.values { continuation.yield(event) }
        guard !watchers.isEmpty else { return }
        let reply = event.reply
        for watcher in watchers.values where watcher.operation == nil || event.operation == nil || watcher.operation == event.operation {
            watcher.enqueue(reply)
        }
    }

    private func emit(_ kind: DaemonEvent.Kind) {
        emit(DaemonEvent(kind: kind))
    }

    /// Does what the bookkeeping asks, in order (activations are awaited one after the other).
    private func perform(_ actions: [OperationBook.Action]) async {
        for action in actions {
            switch action {
            case .activate(let id): _ = await activate(id, forClient: false)
            case .stopHandles(let id): if let running = handles.removeValue(forKey: id) { await stop(running) }
            case .save(let saved): do { try store.save(saved) } catch { log("warning: \(error)") }
            case .emit(let kind, let operation, let group): emit(DaemonEvent(kind: kind, operation: operation, group: group))
            case .log(let line): log(line)
            case .teardownEngine: await teardownEngine()
            }
        }
    }

    // MARK: Running

    /// Runs the daemon until `stop` is set: takes the per-user lock, listens on the control socket (or the
    /// one systemd passed), restores persistent operations, and serves. Ends cleanly: the socket is removed,
    /// persistent operations stay saved, the devices are closed.
    /// - Parameters:
    ///   - stop: set to end (SIGINT, SIGTERM).
    ///   - onReady: called once the socket accepts clients, with its description.
    /// - Throws: ``DaemonError`` when another daemon runs for this user or the socket cannot be made.
    public func run(until stop: StopFlag, onReady: @Sendable (String) -> Void = { _ in }) async throws(DaemonError) {
        let paths = configuration.paths
        try paths.prepareRuntime()
        let lock = try DaemonLock(path: paths.lock)
        let server: ControlServer
        let log = self.log
        var place = paths.socket.path
        if let activated = ControlServer(activatedBy: configuration.environment, handler: self, log: log) {
            server = activated
            place = "the socket passed by systemd"
        } else {
            server = try ControlServer(path: paths.socket, handler: self, log: log)
        }
        await restore()
        server.start()
        onReady(place)
        var nextTick = Date()
        // Duty-cycled scanning switches the microphone on time (100 ms); otherwise the loop only watches for
        // the stop flag and the next tick (250 ms: less wake-ups for an idle daemon).
        let poll: Duration = configuration.scanning == .continuous ? .milliseconds(250) : .milliseconds(100)
        while !stop.isSet {
            try? await Task.sleep(for: poll)
            await scheduleScan()
            // On a task of its own: a tick that waits for the matcher must not keep SIGTERM waiting.
            if Date() >= nextTick && !ticking {
                ticking = true
                Task { await self.tick(); await self.ticked() }
                nextTick = Date(timeIntervalSinceNow: 1)
            }
        }
        stopping = true
        server.stop()
        for watcher in watchers.values { watcher.end() }
        watchers = [:]
        // Bounded: a matcher or device that does not answer cannot keep the daemon from ending (what must
        // survive is already saved).
        let stopped = StopFlag()
        Task { await self.stopEverything(); stopped.set() }
        let deadline = Date(timeIntervalSinceNow: Self.stopTimeout)
        while !stopped.isSet && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        if !stopped.isSet { log("warning: the devices or the matcher did not close within \(Int(Self.stopTimeout)) s; stopping anyway") }
        for continuation in streams.values { continuation.finish() }
        withExtendedLifetime(lock) {}
    }

    /// How long a stop waits for operations, devices and the matcher to close (s).
    public static let stopTimeout = 5.0

    private func stopEverything() async {
        for id in book.order { if let running = handles.removeValue(forKey: id) { await stop(running) } }
        await teardownEngine()
    }

    private var ticking = false
    /// Set once the daemon is shutting down: nothing starts any more.
    private var stopping = false
    private func ticked() { ticking = false }

    /// Once a second: consent changes, expiries, device and matcher recovery.
    private func tick() async {
        guard !stopping else { return }
        await checkConsent()
        let now = Date()
        if let engine {
            if engine.radio == nil {
                if case .embedded = configuration.matcher { await engine.manager.tick(now: engine.now) }
                if now.timeIntervalSince(engine.lastAttempt) >= configuration.retryInterval { startRadio(engine) }
            }
        }
        let retry = book.consentGranted && now.timeIntervalSince(lastWaitingRetry) >= configuration.retryInterval
        if retry { lastWaitingRetry = now }
        // Expiries, retries of waiting operations, and the engine closed when nothing live needs it.
        await perform(book.step(.tick(now: now, retry: retry)))
    }

    /// Duty-cycled scanning: opens the capture device for the first `listen` seconds of every period.
    private func scheduleScan() async {
        guard case .dutyCycled(let listen, let period) = configuration.scanning, let engine, let radio = engine.radio else { return }
        let phase = engine.now.truncatingRemainder(dividingBy: period)
        let wanted = phase < listen
        guard wanted != radio.isListening else { return }
        if wanted {
            do { try radio.resumeListening() } catch { deviceProblem("\(error)") }
        } else {
            await radio.pauseListening()
        }
    }

    // MARK: Consent

    private func checkConsent() async {
        await perform(book.step(.consent(granted: configuration.consent.isGranted)))
    }

    // MARK: Operations

    /// Starts an operation for a client.
    private func start(_ spec: OperationSpec) async throws(DaemonError) -> OperationRecord {
        await checkConsent()
        guard book.consentGranted else { throw DaemonError(ConsentGate.decide(configuration.consent.state, interactive: false).message) }
        try check(spec)
        let id = OperationID.make()
        for action in book.step(.start(id: id, spec: spec, now: Date())) {
            // Only the save of a persistent operation: its failure is the client's answer.
            guard case .save(let saved) = action else { await perform([action]); continue }
            do { try store.save(saved) } catch {
                await perform(book.step(.saveFailed(id: id)))
                throw error
            }
        }
        // A device that fails may come back: the operation then waits for it (reported, retried); any other
        // failure ends it and is the client's answer.
        if let error = await activate(id, forClient: true) { throw error }
        guard let started = book.entries[id] else { throw DaemonError("the operation ended at once") }
        emit(DaemonEvent(kind: .operation(status: "started", detail: nil), operation: id, group: started.group))
        return OperationBook.record(started, deviceFault: deviceFault, now: Date())
    }

    private func stop(_ handles: Handles) async {
        if let subscription = handles.subscription { await subscription.cancel() }
        handles.pump?.cancel()
        if let publication = handles.publication { await publication.cancel() }
        handles.beacon?.stop()
    }

    /// Checks what needs no device: the message, filter and strategy the matcher would take.
    private func check(_ spec: OperationSpec) throws(DaemonError) {
        do throws(ExchangeError) {
            _ = try plan(spec, ttl: spec.ttl)
        } catch { throw DaemonError(error.description) }
    }

    private enum Plan {
        case publish(Message, Strategy)
        case subscribe(MessageFilter, Strategy, lostTimeout: Double?)
        case beacon([UInt8])
    }

    /// The subscription's lost timeout, at least a scan period and a second when scanning is duty-cycled.
    private func lostTimeout(_ spec: OperationSpec) -> Double? {
        guard case .dutyCycled(_, let period) = configuration.scanning else { return spec.lostTimeout }
        return min(600, max(spec.lostTimeout ?? 10, period + 1))
    }

    private var embedded: Bool { if case .embedded = configuration.matcher { true } else { false } }

    private func plan(_ spec: OperationSpec, ttl: Int?) throws(ExchangeError) -> Plan {
        let mode = spec.discoveryMode ?? .both
        switch spec.kind {
        case .publish:
            let content = spec.contentBytes ?? []
            let strategy = try Strategy(discoveryMode: mode, ttl: .seconds(ttl ?? ExchangeLimits.defaultTTL))
            if embedded {
                guard spec.namespace == nil && spec.type == nil else {
                    throw .unavailable("namespaces and types need a matcher: start the daemon with --server")
                }
                return .publish(try AudioBytes.message(content), strategy)
            }
            return .publish(try Message(namespace: spec.namespace ?? "", type: spec.type ?? "", content: content), strategy)
        case .subscribe:
            // The daemon keeps each subscription's time itself (it may be restored with less left).
            let strategy = try Strategy(discoveryMode: mode, ttl: .infinite)
            if embedded {
                guard spec.namespace == nil && spec.type == nil && !spec.beacons else {
                    throw .unavailable("namespaces, types and beacons need a matcher: start the daemon with --server")
                }
                return .subscribe(try MessageFilter((1...ExchangeLimits.maxAudioBytes).map { .audioBytes($0) }), strategy, lostTimeout: lostTimeout(spec))
            }
            var includes: [MessageFilter.Include] = []
            if let namespace = spec.namespace, let type = spec.type { includes = [.namespacedType(namespace: namespace, type: type)] } else { includes = [.allMyTypes] }
            if spec.beacons { includes.append(.beaconIDs) }
            return .subscribe(try MessageFilter(includes), strategy, lostTimeout: lostTimeout(spec))
        case .beacon:
            guard let bytes = spec.contentBytes, (1...15).contains(bytes.count) else { throw .invalidBeaconID(spec.contentBytes?.count ?? 0) }
            return .beacon(bytes)
        }
    }

    /// Starts an operation the bookkeeping marked starting, and reports the outcome to it: it stays marked
    /// while this awaits the engine, so a tick or a consent change meanwhile does not start it a second time
    /// (two subscriptions under one id), and a cancellation or revocation meanwhile stops the new handles.
    /// Returns the error a client's start answers with (not a device's: the operation waits for it).
    private func activate(_ id: String, forClient: Bool) async -> DaemonError? {
        guard let entry = book.entries[id], case .starting = entry.phase else { return nil }
        do {
            let made = try await makeHandles(id, entry)
            handles[id] = made
            await perform(book.step(.activated(id: id, now: Date())))
            return nil
        } catch {
            await perform(book.step(.activationFailed(id: id, reason: error.description, device: error.isDevice, forClient: forClient)))
            return forClient && !error.isDevice ? error : nil
        }
    }

    /// The running parts of an operation (devices, matcher); throws when it cannot run now.
    private func makeHandles(_ id: String, _ entry: OperationBook.Entry) async throws(DaemonError) -> Handles {
        let left = entry.expiresAt.map { max(1, Int($0.timeIntervalSinceNow.rounded(.up))) }
        let planned: Plan
        do throws(ExchangeError) { planned = try plan(entry.spec, ttl: left) } catch { throw DaemonError(error.description) }
        var handles = Handles()
        switch planned {
        case .beacon(let bytes):
            let broadcaster: Broadcaster
            do { broadcaster = try Broadcaster(configuration: configuration.playback, token: Payload.beacon(bytes).frameBytes) } catch {
                deviceProblem("\(error)")
                throw DaemonError(device: "\(error)")
            }
            broadcaster.start(interval: configuration.interval, jitter: configuration.jitter, generator: SystemRandomNumberGenerator(),
                              retryInterval: configuration.retryInterval,
                              onStatus: { [weak self] status in
                                  guard let self else { return }
                                  if case .deviceError(let error, _) = status { Task { await self.deviceProblem("\(error)") } }
                              })
            handles.beacon = broadcaster
        case .publish(let message, let strategy):
            let engine = try await ensureEngine()
            do throws(ExchangeError) {
                handles.publication = try await engine.manager.publish(message, strategy: strategy, now: engine.now)
            } catch { throw DaemonError(error.description) }
        case .subscribe(let filter, let strategy, let lostTimeout):
            let engine = try await ensureEngine()
            let subscription: SubscriptionHandle
            do throws(ExchangeError) {
                subscription = try await engine.manager.subscribe(filter: filter, strategy: strategy, lostTimeout: lostTimeout, now: engine.now)
            } catch { throw DaemonError(error.description) }
            handles.subscription = subscription
            handles.pump = Task { [weak self] in
                for await event in subscription.events {
                    guard let self else { return }
                    await self.subscriptionEvent(id, event)
                }
            }
        }
        return handles
    }

    private func subscriptionEvent(_ id: String, _ event: SubscriptionEvent) {
        guard let entry = book.entries[id] else { return }
        if case .expired = event { return }  // the daemon keeps the time (see plan)
        emit(DaemonEvent(kind: .subscription(event, time: Date().timeIntervalSince(entry.started)), operation: id, group: entry.group))
    }

    // MARK: Engine and devices

    private func ensureEngine() async throws(DaemonError) -> Engine {
        if let engine { return engine }
        let task: Task<Engine, any Error>
        if let engineTask { task = engineTask } else {
            let matcher = configuration.matcher
            task = Task {
                switch matcher {
                case .embedded: return Engine(manager: MessageManager(appID: "sotto-daemon", broadcasts: false, now: 0))
                case .service(_, let connect):
                    return Engine(manager: try await connect(10) { [weak self] notice in
                        guard let self else { return }
                        Task { await self.matcherNotice(notice) }
                    })
                }
            }
            engineTask = task
        }
        let made: Engine
        do { made = try await task.value } catch {
            engineTask = nil
            throw DaemonError("matcher: \(error)")
        }
        if let engine { return engine }
        guard !stopping else {
            await made.manager.close(now: made.now)
            throw DaemonError("the daemon is stopping")
        }
        engine = made
        startRadio(made)
        return made
    }

    private func startRadio(_ engine: Engine) {
        engine.lastAttempt = Date()
        let radio = AudioRadio(manager: engine.manager, capture: configuration.capture, playback: configuration.playback,
                               interval: configuration.interval, jitter: configuration.jitter, clockOrigin: engine.origin)
        radio.onDeviceError = { [weak self] error in
            guard let self else { return }
            Task { await self.deviceProblem("\(error)") }
        }
        radio.onDeviceRecovered = { [weak self] in
            guard let self else { return }
            Task { await self.deviceRecovered() }
        }
        do {
            try radio.start()
            engine.radio = radio
            deviceRecovered()
        } catch {
            engine.radio = nil
        }
    }

    private func matcherNotice(_ notice: MatcherNotice) {
        switch notice {
        case .connected(let resumed): emit(.matcher(status: "connected", detail: resumed ? "session resumed" : nil))
        case .disconnected(let reason): emit(.matcher(status: "disconnected", detail: reason))
        case .failed(let error): emit(.matcher(status: "failed", detail: "\(error)"))
        default: break
        }
    }

    private func deviceProblem(_ description: String) {
        guard deviceFault != description else { return }
        deviceFault = description
        log("device fault: \(description) (operations resume when it is back)")
        emit(.device(fault: description))
    }

    private func deviceRecovered() {
        guard deviceFault != nil else { return }
        deviceFault = nil
        log("device working again")
        emit(.device(fault: nil))
    }

    private func teardownEngine() async {
        let current = engine
        engine = nil
        engineTask = nil
        guard let current else { return }
        if let radio = current.radio { await radio.stop() } else { await current.manager.close(now: current.now) }
    }

    // MARK: Persistence

    private func restore() async {
        let loaded = store.load()
        if let warning = loaded.warning { log("warning: \(warning)") }
        await perform(book.step(.restore(loaded.operations, now: Date())))
    }

    // MARK: Requests

    static func summary(_ spec: OperationSpec) -> String {
        switch spec.kind {
        case .publish:
            let content = spec.contentBytes ?? []
            let text = JSONLines.printable(content).map { "\"\($0)\"" } ?? spec.content ?? ""
            if let namespace = spec.namespace, let type = spec.type { return "\(namespace)/\(type) \(text)" }
            return text
        case .subscribe:
            var what = spec.namespace.map { "\($0)/\(spec.type ?? "")" } ?? "all messages"
            if spec.beacons { what += " and beacons" }
            return what
        case .beacon:
            return "beacon \(spec.content ?? "")"
        }
    }

    /// Handles one control request (the ``ControlHandler`` of the daemon's socket).
    /// - Parameters:
    ///   - request: the client's request.
    ///   - connection: where the replies go.
    public func handle(_ request: ControlRequest, from connection: ControlConnection) async {
        switch request {
        case .start(let spec):
            do { connection.send(ControlReply(reply: "operation", operation: try await start(spec))) } catch {
                connection.send(.failure(error.description))
            }
        case .list:
            let now = Date()
            connection.send(ControlReply(reply: "operations", operations: book.operations.map { OperationBook.record($0, deviceFault: deviceFault, now: now) }))
        case .cancel(let id):
            guard book.entries[id] != nil else { connection.send(.failure("no operation \(id)")); return }
            await perform(book.step(.cancel(id: id, now: Date())))
            connection.send(.ok)
        case .watch(let id):
            if let id, book.entries[id] == nil { connection.send(.failure("no operation \(id)")); return }
            connection.send(.ok)
            let watcher = Watcher(connection: connection, operation: id)
            let key = ObjectIdentifier(watcher)
            watchers[key] = watcher
            connection.onClose { [weak self] in
                watcher.end()
                Task { await self?.dropWatcher(key) }
            }
            if let deviceFault { watcher.enqueue(DaemonEvent(kind: .device(fault: deviceFault)).reply) }
        case .consentChanged:
            await checkConsent()
            connection.send(.ok)
        }
    }

    private func dropWatcher(_ key: ObjectIdentifier) { watchers.removeValue(forKey: key) }
}

private extension DaemonError {
    init(device: String) { self.init("device: \(device)") }
    var isDevice: Bool { description.hasPrefix("device: ") }
}

private extension ConsentGate.Decision {
    var message: String {
        if case .refuse(let message) = self { return message }
        return ConsentGate.hint
    }
}
