import Foundation
import SottoAudio
import SottoLive
import SottoModem
import SottoExchange
import SottoExchangeCore
import Synchronization

/// An audio device problem, as the exchange reports it to the app.
public enum AudioDeviceError: Error, Sendable, Equatable {
    case noDevice(String)
    case busy(String)
    case permissionDenied(String)
    case gone(String)
    case other(String)

    init(_ error: ALSAError) {
        switch error {
        case .noSuchDevice(let name): self = .noDevice(name)
        case .deviceBusy(let name): self = .busy(name)
        case .permissionDenied(let name): self = .permissionDenied(name)
        case .deviceGone(let name): self = .gone(name)
        default: self = .other(error.description)
        }
    }

    init(_ error: ListenerError) {
        switch error {
        case .device(let device): self.init(device)
        case .receiverUnavailable: self = .other(error.description)
        }
    }
}

/// Connects a `MessageManager` to the sound card: listens on a capture device and feeds every decoded
/// frame to the manager, plays what the manager wants broadcast (its token and audio-bytes publications)
/// on a playback device on the sender's rules (listen before talk, an interval that grows with the devices
/// heard: `TransmitScheduler`) or with plain jittered repetition, checks that it hears its own token, and
/// reports device problems. The token frames are played in the profile the matcher directs the session to
/// (`MessageManager.broadcastProfile`, link adaptation: the default profile or the robust one); audio-bytes
/// publications in the default profile. Time is the monotonic clock from `start`.
public final class AudioRadio: Sendable {
    public let manager: MessageManager
    private let capture: PCMConfiguration
    private let playback: PCMConfiguration?
    private let interval: Double
    private let jitter: Double
    private let rules: TransmitScheduler.Rules?
    /// Carrier sense for the sender's rules, as long as the radio lives: one transform per captured block for every
    /// sender, and a broadcast that starts later knows the band's history and how far the capture lags the air.
    private let carrierSense = CarrierSense()
    /// The manager's time (its `now`, s, for ticks and heard frames alike): monotonic, on the injected clock
    /// since the radio was made, plus how long before that its time zero was.
    private let time: Stopwatch
    private let originLead: Double

    /// What changes while the radio runs, written by the caller, the ticker, the listener's pump and the scanner.
    private struct State {
        /// The sender's rules of each frame broadcast now, fed by the capture thread.
        var accesses: [MediumAccess] = []
        /// The sender's rules of the session's token frame, which follow the matcher's turns; nil while no token
        /// is broadcast on the sender's rules.
        var tokenAccess: MediumAccess?
        /// The airtime (s) this radio last told the manager its token frames take for the matcher's turns (0: none).
        var turnsAirtime = 0.0
        /// The matcher's last turns, in this process's clock: given again to a token sender that replaces the one
        /// they were for (a new publication or a rotated token restarts the broadcasters).
        var lastTurns: Turns?
        var listener: Listener?
        var broadcasters: [Broadcaster] = []
        var planned: [Payload] = []
        /// The profile the token broadcaster plays (the matcher's link adaptation, as last read from the manager).
        var plannedProfile = BroadcastProfile.standard
        var ticker: Task<Void, Never>?
        var pump: Task<Void, Never>?
        var selfCheck: SelfCheck?
        var scanner: Task<Void, Never>?
        /// Set by ``stop()``: the scanner opens nothing more.
        var stopped = false
        /// Listening windows opened so far (the first one included).
        var opened = 0
        var scanning: ScanDutyCycle?
        var onDeviceError: (@Sendable (AudioDeviceError) -> Void)?
        var onDeviceRecovered: (@Sendable () -> Void)?
        var onOwnTokenNotHeard: (@Sendable (Int) -> Void)?
    }
    /// The matcher's turns as this process's clock places them.
    private typealias Turns = (slots: [ContinuousClock.Instant], until: ContinuousClock.Instant, alias: [UInt8]?, number: UInt16?)
    private let state = Mutex(State())

    /// Called with capture and playback device problems (on a background thread).
    public var onDeviceError: (@Sendable (AudioDeviceError) -> Void)? {
        get { state.withLock { $0.onDeviceError } }
        set { state.withLock { $0.onDeviceError = newValue } }
    }
    /// Called when the capture device works again after a fault (reopened by the listener).
    public var onDeviceRecovered: (@Sendable () -> Void)? {
        get { state.withLock { $0.onDeviceRecovered } }
        set { state.withLock { $0.onDeviceRecovered = newValue } }
    }
    /// Called when this device's own token has not been heard for that many transmissions in a row.
    public var onOwnTokenNotHeard: (@Sendable (Int) -> Void)? {
        get { state.withLock { $0.onOwnTokenNotHeard } }
        set { state.withLock { $0.onOwnTokenNotHeard = newValue } }
    }
    /// Duty-cycled listening (a low-power scan); nil (the default) listens all the time. Set before
    /// ``start()``.
    public var scanning: ScanDutyCycle? {
        get { state.withLock { $0.scanning } }
        set { state.withLock { $0.scanning = newValue } }
    }
    /// Listening windows opened so far (the first one included), for tests and measurements.
    public var windowsOpened: Int { state.withLock { $0.opened } }

    /// - Parameters:
    ///   - manager: the exchange this radio hears and broadcasts for.
    ///   - capture: the capture device and the format asked of it.
    ///   - playback: nil for a scan-only device.
    ///   - interval: repetition of each broadcast frame (s): every `interval` plus 0...`jitter`.
    ///   - jitter: the random part of the repetition (s), so that two devices do not keep colliding.
    ///   - rules: the sender's rules (`TransmitScheduler/Rules/crowd` by default, with `interval` and `jitter`
    ///     as its shortest interval and jitter); nil for plain repetition every `interval` + 0...`jitter` s
    ///     whatever is heard.
    ///   - clockOrigin: the instant the manager's time counts from (its `now` 0, as the caller used it when
    ///     publishing or subscribing); by default the radio's creation. Read once: the time after it is `clock`'s.
    ///   - clock: the monotonic clock of the manager's time (never the wall clock, which can jump).
    public init(manager: MessageManager, capture: PCMConfiguration, playback: PCMConfiguration?,
                interval: Double = 1.0, jitter: Double = 0.25, rules: TransmitScheduler.Rules? = .crowd,
                clockOrigin: Date = Date(), clock: any Clock<Duration> = ContinuousClock()) {
        self.manager = manager
        self.time = Stopwatch(clock)
        self.originLead = Date().timeIntervalSince(clockOrigin)
        self.capture = capture
        self.playback = playback
        self.interval = interval
        self.jitter = jitter
        if var rules {
            rules.interval = interval
            rules.jitter = jitter
            self.rules = rules
        } else {
            self.rules = nil
        }
    }

    private var now: Double { originLead + time.elapsed() }

    /// Opens the devices and starts. Device errors are thrown and also reported to `onDeviceError`.
    public func start() throws(AudioDeviceError) {
        try startListening()
        if let scanning { startScanner(scanning) }
        let ticker = Task.detached { [weak self] in
            // The matcher's turns for the token frame, if it gives any (a service that coordinates the room).
            await self?.manager.setTurnsHandler { [weak self] offsets, follow, alias in
                guard let self else { return }
                let now = ContinuousClock.now
                let aliasFrame = alias.map { Payload.roomAlias($0).frameBytes }
                let (access, check) = self.state.withLock { state -> (MediumAccess?, SelfCheck?) in
                    state.lastTurns = (offsets.map { now + .seconds($0) }, now + .seconds(follow), aliasFrame, alias)
                    return (state.tokenAccess, state.selfCheck)
                }
                // The alias counts as the own token for the self-check (it is what some slots play).
                if let aliasFrame { check?.accept(alternate: aliasFrame) }
                access?.follow(slotOffsets: offsets, followFor: follow, aliasFrame: aliasFrame, alias: alias)
            }
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(200))
                guard let self else { return }
                await self.manager.tick(now: self.now)
                await self.updateBroadcasts()
            }
        }
        state.withLock { $0.ticker = ticker }
    }

    /// Opens the capture device and feeds what it hears to the manager.
    private func startListening() throws(AudioDeviceError) {
        let manager = self.manager
        let listener: Listener
        // Carrier sense for the sender's rules, on the capture thread (it must not block: one lock, one FFT).
        let sense: @Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void = { [weak self] block, format in
            self?.carrierSense.captured(block, sampleRate: format.sampleRate)
        }
        // Room aliases arrive as the short alias frame: listened for, and reported as the exchange's payload.
        do { listener = try Listener(configuration: capture, aliasFrames: true, onCapture: rules == nil ? nil : sense) } catch {
            let mapped = AudioDeviceError(error)
            self.onDeviceError?(mapped)
            Task { await manager.setRadio(.failed) }
            throw mapped
        }
        let pump = Task.detached { [weak self, manager] in
            // Starting, then whatever the listener reports, in that order (a separate task could land after
            // `.running` and leave an active operation reported as starting).
            await manager.setRadio(.starting)
            for await event in listener.events {
                guard let self else { return }
                switch event {
                case .started:
                    await self.manager.setRadio(.running)
                case .reopened:
                    await self.manager.setRadio(.running)
                    self.onDeviceRecovered?()
                case .frame(var frame):
                    if let alias = frame.alias { frame.token = Payload.roomAlias(alias).frameBytes }
                    let (check, accesses) = self.state.withLock { ($0.selfCheck, $0.accesses) }
                    check?.heard(frame)
                    for access in accesses { access.heard(frame.token) }
                    await self.manager.heard(frame: frame.token, alias: frame.alias, snr: frame.snr, level: frame.level, now: self.now)
                case .deviceError(let error, _):
                    // Until the capture is back, the band is not sensed (frames go out on the idle time so far).
                    self.carrierSense.captureStopped()
                    await self.manager.setRadio(.failed)
                    self.onDeviceError?(AudioDeviceError(error))
                default: break
                }
            }
            self?.carrierSense.captureStopped()
        }
        state.withLock { $0.listener = listener; $0.pump = pump; $0.opened += 1 }
    }

    /// Opens and closes the capture device on `cycle`, checking every 100 ms. A device that fails to open
    /// is reported (``onDeviceError``) and tried again at the next window, not at every check.
    private func startScanner(_ cycle: ScanDutyCycle) {
        let task = Task.detached { [weak self] in
            var failedWindow: Double?
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                guard let self else { return }
                let now = self.now
                let window = (now / cycle.period).rounded(.down)
                let wanted = cycle.listens(at: now)
                guard wanted != self.isListening, !self.state.withLock({ $0.stopped }) else { continue }
                if wanted {
                    guard failedWindow != window else { continue }
                    do { try self.resumeListening() } catch { failedWindow = window }
                } else {
                    await self.pauseListening()
                }
            }
        }
        state.withLock { $0.scanner = task }
    }

    /// Closes the capture device until ``resumeListening()`` (a duty-cycled scan); playback goes on and the
    /// manager keeps its state (messages found stay found until their lost timeout).
    public func pauseListening() async {
        let (listener, pump) = state.withLock { state -> (Listener?, Task<Void, Never>?) in
            defer { state.listener = nil; state.pump = nil }
            return (state.listener, state.pump)
        }
        // Stopping joins the capture thread (it may be decoding what it captured last): off the cooperative pool.
        if let listener { await Self.offPool { listener.stop() } }
        await pump?.value
        carrierSense.captureStopped()
    }

    /// Runs `body`, which blocks (it joins a device thread), on a thread of its own, never on the
    /// cooperative pool (a duty-cycled scan pauses every period).
    private static func offPool(_ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                body()
                continuation.resume()
            }
        }
    }

    /// Opens the capture device again after ``pauseListening()`` (nothing to do while listening).
    public func resumeListening() throws(AudioDeviceError) {
        guard state.withLock({ $0.listener == nil }) else { return }
        try startListening()
    }

    /// Whether the capture device is open (not paused).
    public var isListening: Bool { state.withLock { $0.listener != nil } }

    /// The modem profile of the token frames for a profile the matcher directs.
    static func modemProfile(_ profile: BroadcastProfile) -> Profile {
        switch profile {
        case .standard: return .standard
        case .robust: return .robust
        }
    }

    /// Restarts the broadcasters when the manager's transmit plan changed (new publication, rotated token) or the
    /// profile of its token frames did (link adaptation).
    private func updateBroadcasts() async {
        guard let playback else { return }
        let plan = await manager.transmitPlan
        let profile = await manager.broadcastProfile
        let current = state.withLock { ($0.planned, $0.plannedProfile) }
        guard plan != current.0 || profile != current.1 else { return }
        let (old, report, reportError) = state.withLock { state in
            defer { state.broadcasters = []; state.accesses = []; state.tokenAccess = nil; state.planned = plan; state.plannedProfile = profile }
            return (state.broadcasters, state.onOwnTokenNotHeard, state.onDeviceError)
        }
        var tokenAirtime = 0.0
        var aliasAirtime: Double?
        let ownFrames = Set(plan.map(\.frameBytes))
        for broadcaster in old { broadcaster.stop() }
        for payload in plan {
            do {
                var isToken = false
                if case .token = payload { isToken = true }
                let broadcaster = try Broadcaster(configuration: playback, token: payload.frameBytes,
                                                  profile: isToken ? Self.modemProfile(profile) : .standard)
                let check: SelfCheck? = isToken ? SelfCheck(token: payload.frameBytes) : nil
                if let check { state.withLock { $0.selfCheck = check } }
                let deadline = broadcaster.selfCheckDeadline
                let onSent: @Sendable (Int) -> Void = { _ in
                    guard let check else { return }
                    check.judgeLater(after: deadline) { missed in
                        if missed >= 2 { report?(missed) }
                    }
                }
                let onStatus: @Sendable (BroadcastStatus) -> Void = { status in
                    if case .deviceError(let error, _) = status { reportError?(AudioDeviceError(error)) }
                }
                let onEnd: @Sendable ((any Error)?) -> Void = { error in
                    // Device errors were reported as they happened (onStatus); anything else ends here.
                    if let error, !(error is ALSAError) { reportError?(.other("\(error)")) }
                }
                if let rules {
                    // The device buffer ahead of the period being written: what the matcher's slots are brought forward by.
                    let format = broadcaster.negotiated
                    let playoutDelay = Double(max(0, format.bufferFrames - format.periodFrames)) / format.sampleRate
                    let access = MediumAccess(rules: rules, airtime: broadcaster.airtime, ownFrames: ownFrames, sense: carrierSense,
                                              playoutDelay: playoutDelay)
                    let turns = state.withLock { state -> Turns? in
                        state.accesses.append(access)
                        if isToken { state.tokenAccess = access }
                        return isToken ? state.lastTurns : nil
                    }
                    if let turns, turns.until > .now {
                        let now = ContinuousClock.now
                        access.follow(slotOffsets: turns.slots.map { ($0 - now).inSeconds }, followFor: (turns.until - now).inSeconds,
                                      aliasFrame: turns.alias, alias: turns.number)
                        if let alias = turns.alias { check?.accept(alternate: alias) }
                    }
                    if isToken {
                        tokenAirtime = broadcaster.airtime
                        aliasAirtime = broadcaster.aliasAirtime
                    }
                    broadcaster.start(access: access, onSent: onSent, onStatus: onStatus, onEnd: onEnd)
                } else {
                    broadcaster.start(interval: interval, jitter: jitter, generator: SystemRandomNumberGenerator(),
                                      onSent: onSent, onStatus: onStatus, onEnd: onEnd)
                }
                state.withLock { $0.broadcasters.append(broadcaster) }
            } catch let error as ALSAError {
                reportError?(AudioDeviceError(error))
            } catch {
                reportError?(.other("\(error)"))
            }
        }
        // The matcher's turns are for the token frame as this radio plays it: say so when that changes.
        let changed = state.withLock { state in
            defer { state.turnsAirtime = tokenAirtime }
            return state.turnsAirtime != tokenAirtime
        }
        if changed { await manager.takeTurns(frameAirtime: tokenAirtime, aliasAirtime: aliasAirtime) }
    }

    /// Stops listening and broadcasting, and ends the manager's session (every found message is lost).
    public func stop() async {
        let (ticker, scanner) = state.withLock { state -> (Task<Void, Never>?, Task<Void, Never>?) in
            state.stopped = true
            return (state.ticker, state.scanner)
        }
        ticker?.cancel()
        scanner?.cancel()
        await scanner?.value
        let (listener, broadcasters, pump) = state.withLock { ($0.listener, $0.broadcasters, $0.pump) }
        await Self.offPool {
            for broadcaster in broadcasters { broadcaster.stop() }
            listener?.stop()
        }
        await pump?.value
        await manager.close(now: now)
    }
}
