import Foundation
import SottoAudio
import SottoModem
import SottoSupport
import Synchronization

/// Plays frames on an ALSA device on a schedule until the schedule ends or ``stop()`` is called: what
/// `sotto send`, `sotto beacon` and `sotto publish` do on a sound card, for any program.
///
/// The frame may change over time (a rotating beacon ID): `frameAt(t)` gives the frame bytes for time `t`
/// (s) of the frame clock, which reads `clockAtStart` at the start (Unix time for a rotating beacon, so that
/// its periods fall on the slots a matcher computes), and a new ``Broadcaster`` plays each period of
/// `changesEvery` seconds of that clock (periods start at its multiples). Time is
/// counted on the schedule (frames sent x interval), not on the wall clock, because a device takes frames
/// ahead of playing them. With a
/// self-check device, a ``Listener`` runs on it at the same time (full duplex) and each transmission not
/// heard back within ``Broadcaster/selfCheckDeadline`` is reported.
public final class FramePlayer: Sendable {
    /// When frames are sent.
    public struct Schedule: Sendable {
        /// From the start of one frame to the start of the next (s).
        public var interval: Double
        /// Uniform random extra delay per frame, 0...jitter (s).
        public var jitter: Double
        /// Frames to send; nil for no limit (until `duration` or ``FramePlayer/stop()``).
        public var count: Int?
        /// Seconds to send for; nil for no limit.
        public var duration: Double?

        /// The jitter every transmitting command uses unless told otherwise (s): `send`, `publish`, `beacon` and
        /// `daemon`, capped at their interval when that is shorter (``defaultJitter(interval:)``).
        public static let defaultJitter = 0.25

        /// The default jitter for frames `interval` seconds apart (s): ``defaultJitter``, or `interval` when shorter.
        /// - Parameter interval: from the start of one frame to the start of the next (s).
        public static func defaultJitter(interval: Double) -> Double { min(defaultJitter, max(0, interval)) }

        public init(interval: Double, jitter: Double = 0, count: Int? = nil, duration: Double? = nil) {
            self.interval = interval; self.jitter = jitter; self.count = count; self.duration = duration
        }
    }

    /// What happens while playing, in order.
    public enum Event: Sendable {
        /// The device is open (the first time only).
        case started(NegotiatedFormat)
        /// The device failed; `willRetry` when it is reopened every second until it is back.
        case deviceError(ALSAError, willRetry: Bool)
        /// The device is back.
        case reopened(NegotiatedFormat)
        /// The self-check did not hear this many transmissions in a row.
        case ownTokenNotHeard(consecutive: Int)
    }

    /// What was played.
    public struct Summary: Sendable, Equatable {
        /// Frames sent.
        public var sent: Int
        /// Underruns recovered.
        public var underruns: Int
        /// With a self-check: transmissions not heard in a row at the end (0: the last one was heard).
        public var ownTokenMissed: Int?
    }

    private let configuration: PCMConfiguration
    private let profile: Profile
    private let level: Double
    private let frameAt: @Sendable (Double) -> [UInt8]
    private let changesEvery: Double?
    private let clockAtStart: Double
    private let selfCheck: PCMConfiguration?
    private let stopped = StopFlag()
    private let current = Current()

    /// - Parameters:
    ///   - configuration: the playback PCM (its rate is raised to what the profile needs).
    ///   - profile: the waveform profile of the frames.
    ///   - level: peak level (dBFS).
    ///   - frameAt: the frame bytes to send at time `t` of the frame clock.
    ///   - changesEvery: the period (s) at which `frameAt` may change; nil when it never does.
    ///   - clockAtStart: the frame clock at the start (s; 0: time since the start).
    ///   - selfCheck: a capture PCM to hear the own frames on (only for a frame that does not change).
    public init(configuration: PCMConfiguration, profile: Profile = .standard, level: Double = Modulator.defaultLevel,
                frameAt: @escaping @Sendable (Double) -> [UInt8], changesEvery: Double? = nil, clockAtStart: Double = 0,
                selfCheck: PCMConfiguration? = nil) throws(FramePlayer.ParameterError) {
        guard changesEvery == nil || selfCheck == nil else {
            throw ParameterError("a self-check needs a frame that does not change")
        }
        if let changesEvery, !(changesEvery.isFinite && changesEvery > 0) {
            throw ParameterError("the period of a changing frame must be positive, got \(changesEvery) s")
        }
        self.configuration = configuration
        self.profile = profile
        self.level = level
        self.frameAt = frameAt
        self.changesEvery = changesEvery
        self.clockAtStart = clockAtStart.isFinite ? clockAtStart : 0
        self.selfCheck = selfCheck
    }

    /// Plays until the schedule ends or ``stop()``; blocks the calling thread. Throws the device error
    /// that ended it (one that reopening cannot cure), or an error opening a device or building a frame.
    public func run(_ schedule: Schedule, onEvent: @escaping @Sendable (Event) -> Void = { _ in }) throws -> Summary {
        guard schedule.interval.isFinite, schedule.interval > 0, schedule.jitter.isFinite, schedule.jitter >= 0 else {
            throw ParameterError("the interval must be positive and the jitter not negative (s), got \(schedule.interval) and \(schedule.jitter)")
        }
        var summary = Summary(sent: 0, underruns: 0, ownTokenMissed: nil)
        var listener: Listener?
        var check: SelfCheck?
        defer { listener?.stop() }
        while !stopped.isSet {
            // Time on the schedule, not the wall clock: a device takes frames ahead of playing them.
            let elapsed = Double(summary.sent) * schedule.interval
            var span = Double.infinity
            if let duration = schedule.duration { span = duration - elapsed }
            let clock = clockAtStart + elapsed
            if let period = changesEvery {
                var phase = clock.truncatingRemainder(dividingBy: period)
                if phase < 0 { phase += period }
                span = min(span, period - phase)
            }
            guard span > 0 else { break }
            var count = schedule.count.map { $0 - summary.sent }
            if span.isFinite { count = min(count ?? .max, max(1, Int(span / schedule.interval + Self.roundingTolerance))) }
            if let count, count <= 0 { break }
            let frame = frameAt(clock)
            let broadcaster = try Broadcaster(configuration: configuration, token: frame, profile: profile, level: level)
            if summary.sent == 0 && check == nil { onEvent(.started(broadcaster.negotiated)) }
            if let selfCheck, check == nil {
                let newCheck = SelfCheck(token: frame)
                let newListener = try Listener(configuration: selfCheck, profiles: [profile])
                let events = newListener.events
                Task.detached { for await event in events { if case .frame(let decoded) = event { newCheck.heard(decoded) } } }
                (check, listener) = (newCheck, newListener)
            }
            current.set(broadcaster)
            if stopped.isSet { break }
            let failure = FailureBox()
            let judged = DispatchGroup()
            let deadline = broadcaster.selfCheckDeadline
            broadcaster.start(interval: schedule.interval, jitter: schedule.jitter, count: count, generator: SystemRandomNumberGenerator(),
                              onSent: { [check] _ in
                                  guard let check else { return }
                                  // Queued now: played within a buffer, decoded within its airtime and the margin.
                                  judged.enter()
                                  check.judgeLater(after: deadline) { missed in
                                      if missed > 0 { onEvent(.ownTokenNotHeard(consecutive: missed)) }
                                      judged.leave()
                                  }
                              }, onStatus: { status in
                                  switch status {
                                  case .deviceError(let error, let retry): onEvent(.deviceError(error, willRetry: retry))
                                  case .reopened(let negotiated): onEvent(.reopened(negotiated))
                                  }
                              }, onEnd: { failure.set($0) })
            broadcaster.wait()
            judged.wait()
            current.set(nil)
            summary.sent += broadcaster.sent
            summary.underruns += broadcaster.underruns
            if let error = failure.get() { throw error }
        }
        summary.ownTokenMissed = check?.missed
        return summary
    }

    /// Ends ``run(_:onEvent:)`` within one device period (from any thread).
    public func stop() {
        stopped.set()
        current.get()?.stop()
    }

    /// Parameters that cannot be played.
    public struct ParameterError: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// Keeps a period that holds a whole number of intervals (1 s / 0.1 s) from losing one to rounding.
    static let roundingTolerance = 1e-9

    /// The broadcaster playing now, for ``stop()``.
    private final class Current: Sendable {
        private let value = Mutex<Broadcaster?>(nil)
        func set(_ broadcaster: Broadcaster?) { value.withLock { $0 = broadcaster } }
        func get() -> Broadcaster? { value.withLock { $0 } }
    }

    /// The error a broadcaster ended with, set on its thread.
    private final class FailureBox: Sendable {
        private let value = Mutex<(any Error)?>(nil)
        func set(_ error: (any Error)?) { value.withLock { $0 = error } }
        func get() -> (any Error)? { value.withLock { $0 } }
    }
}
