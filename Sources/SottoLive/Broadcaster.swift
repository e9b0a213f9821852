import Foundation
import SottoAudio
import SottoModem
import SottoSupport
import Synchronization

/// What a broadcaster reports about its device while it runs.
public enum BroadcastStatus: Sendable {
    /// The device failed; `willRetry` is true when the broadcaster keeps trying to reopen it.
    case deviceError(ALSAError, willRetry: Bool)
    /// The device is back after an error; sending goes on with the next frame.
    case reopened(NegotiatedFormat)
}

/// Plays a token on an ALSA device over and over, one frame every `interval` seconds plus a uniform
/// random delay of up to `jitter` seconds (so that two broadcasters do not collide every time), until
/// stopped or `count` frames are sent. Gaps are played as silence, so timing follows the device's
/// sample clock. Runs on its own thread; `stop()` returns within one period. When the device disappears
/// or fails, the broadcaster reports it and reopens it every `retryInterval` seconds until it is back
/// (a frame cut off by the failure is not counted as sent); a suspension is resumed in place.
public final class Broadcaster: @unchecked Sendable {
    private let configuration: PCMConfiguration
    private let token: [UInt8]
    private let profile: Profile
    private let level: Double
    private let lock = NSLock()
    private let stopped = StopFlag()
    /// Opens when the sending thread has ended. stop() (a signal handler's thread) and wait() (the player)
    /// may wait at the same time: every waiter gets through (a semaphore signalled once let only one).
    private let finished = Latch()
    private let started = StopFlag()
    // The open device and the frame synthesised at its rate; replaced only by the broadcast thread.
    private var playback: PCMPlayback
    private var burst: [Float]
    private var earlierUnderruns = 0

    /// Frames sent so far.
    public var sent: Int { lock.withLock { sentCount } }
    private var sentCount = 0
    /// Underruns recovered so far (over every reopened device).
    public var underruns: Int { lock.withLock { earlierUnderruns + playback.underruns } }
    /// What the device was opened with (the latest device, after a reopen).
    public var negotiated: NegotiatedFormat { lock.withLock { playback.negotiated } }

    public init(configuration: PCMConfiguration, token: [UInt8], profile: Profile = .standard,
                level: Double = Modulator.defaultLevel) throws {
        var configuration = configuration
        configuration.acceptableRates = max(configuration.acceptableRates.lowerBound, profile.minimumSampleRate)...max(configuration.acceptableRates.upperBound, profile.minimumSampleRate)
        self.configuration = configuration
        self.token = token
        self.profile = profile
        self.level = level
        playback = try PCMPlayback(configuration: configuration)
        burst = try Modulator(profile: profile, sampleRate: playback.negotiated.sampleRate, level: level).modulate(token)
    }

    /// Airtime of one frame (s).
    public var airtime: Double { lock.withLock { Double(burst.count) / playback.negotiated.sampleRate } }

    /// Airtime of another frame of `payloadBytes` bytes on this broadcaster's profile (s).
    /// - Parameter payloadBytes: the frame's length (bytes).
    public func airtime(payloadBytes: Int) -> Double { profile.airtime(payloadBytes: payloadBytes) }

    /// Airtime of an alias frame on this broadcaster's profile (s; `Profile.aliasAirtime`).
    public var aliasAirtime: Double { profile.aliasAirtime }

    /// How long after a frame is queued it must have been decoded back by a self-check (s): its airtime, one
    /// device buffer, and ``SelfCheck/decodingMargin``.
    public var selfCheckDeadline: Double {
        let negotiated = self.negotiated
        return airtime + Double(negotiated.bufferFrames) / negotiated.sampleRate + SelfCheck.decodingMargin
    }

    /// Starts sending. `onSent(index)` runs after each frame has been queued; `onStatus` when the device
    /// fails or comes back; `onEnd` once at the end with the error that stopped it, if any (a device error
    /// that reopening cannot cure, or one while `retryInterval` is nil).
    public func start<G: RandomNumberGenerator & Sendable>(interval: Double, jitter: Double, count: Int? = nil, generator: G,
                                                            retryInterval: Double? = 1,
                                                            onSent: @escaping @Sendable (Int) -> Void = { _ in },
                                                            onStatus: @escaping @Sendable (BroadcastStatus) -> Void = { _ in },
                                                            onEnd: @escaping @Sendable ((any Error)?) -> Void = { _ in }) {
        var generator = generator
        run(retryInterval: retryInterval, onStatus: onStatus, onEnd: onEnd) { [self] in
            try send(interval: interval, jitter: jitter, count: count, generator: &generator, onSent: onSent)
        }
    }

    /// Runs `sending` on the broadcast thread, reopening the device after transient errors while
    /// `retryInterval` allows, until it returns or fails for good.
    private func run(retryInterval: Double?, onStatus: @escaping @Sendable (BroadcastStatus) -> Void,
                     onEnd: @escaping @Sendable ((any Error)?) -> Void, sending: @escaping () throws -> Void) {
        started.set()
        nonisolated(unsafe) let sending = sending
        let thread = Thread { [self] in
            var failure: (any Error)?
            while !isStopped {
                do {
                    try sending()
                    break
                } catch let error as ALSAError {
                    let retry = error.isTransient && retryInterval != nil
                    onStatus(.deviceError(error, willRetry: retry))
                    guard retry, let retryInterval, let format = reopen(every: retryInterval) else {
                        if !isStopped { failure = error }
                        break
                    }
                    onStatus(.reopened(format))
                } catch {
                    failure = error
                    break
                }
            }
            onEnd(failure)
            finished.open()
        }
        thread.name = "sotto-broadcast"
        thread.start()
    }

    /// Starts sending on the sender's rules: before every device period `access` says whether the frame
    /// starts now (listen before talk, an interval that grows with the room). `onSent`, `onStatus` and `onEnd`
    /// as in ``start(interval:jitter:count:generator:retryInterval:onSent:onStatus:onEnd:)``.
    public func start(access: MediumAccess, count: Int? = nil, retryInterval: Double? = 1,
                      onSent: @escaping @Sendable (Int) -> Void = { _ in },
                      onStatus: @escaping @Sendable (BroadcastStatus) -> Void = { _ in },
                      onEnd: @escaping @Sendable ((any Error)?) -> Void = { _ in }) {
        run(retryInterval: retryInterval, onStatus: onStatus, onEnd: onEnd) { [self] in
            try sendWhenAllowed(by: access, count: count, onSent: onSent)
        }
    }

    /// The loop on the sender's rules: silence a period at a time until `access` allows the frame (or, in a slot
    /// of the matcher's turns that names one, the room alias's frame, synthesised once per alias).
    private func sendWhenAllowed(by access: MediumAccess, count: Int?, onSent: (Int) -> Void) throws {
        let (playback, burst) = lock.withLock { (self.playback, self.burst) }
        let silence = [Float](repeating: 0, count: playback.negotiated.periodFrames)
        var alternate: (frame: [UInt8], burst: [Float])?
        var aliasBurst: (alias: UInt16, burst: [Float])?
        try silence.withUnsafeBufferPointer { (silence) throws in
            try burst.withUnsafeBufferPointer { (burst) throws in
                while !isStopped {
                    if let count, sent >= count { break }
                    switch access.decide() {
                    case .silence:
                        try playback.write(silence)
                        continue
                    case .ownFrame:
                        try playback.write(burst)
                    case .frame(let frame):
                        if alternate?.frame != frame {
                            let modulator = try Modulator(profile: profile, sampleRate: playback.negotiated.sampleRate, level: level)
                            alternate = (frame, try modulator.modulate(frame))
                        }
                        try alternate!.burst.withUnsafeBufferPointer { try playback.write($0) }
                    case .alias(let alias):
                        if aliasBurst?.alias != alias {
                            let modulator = try Modulator(profile: profile, sampleRate: playback.negotiated.sampleRate, level: level)
                            aliasBurst = (alias, try modulator.modulate(alias: alias))
                        }
                        try aliasBurst!.burst.withUnsafeBufferPointer { try playback.write($0) }
                    }
                    let index = lock.withLock { () -> Int in sentCount += 1; return sentCount }
                    onSent(index)
                }
            }
        }
        playback.drain()
    }

    /// The sending loop on the current device; returns when `count` frames are sent or on stop.
    private func send<G: RandomNumberGenerator>(interval: Double, jitter: Double, count: Int?, generator: inout G,
                                                onSent: (Int) -> Void) throws {
        let (playback, burst) = lock.withLock { (self.playback, self.burst) }
        let rate = playback.negotiated.sampleRate
        // One period of silence, allocated once: gaps are written from it in period-sized pieces, so that
        // stop() is honoured within one period.
        let silence = [Float](repeating: 0, count: playback.negotiated.periodFrames)
        try silence.withUnsafeBufferPointer { (silence) throws in
            try burst.withUnsafeBufferPointer { (burst) throws in
                while !isStopped {
                    if let count, sent >= count { break }
                    try playback.write(burst)
                    let index = lock.withLock { () -> Int in sentCount += 1; return sentCount }
                    onSent(index)
                    if let count, index >= count { break }
                    let gap = max(0, interval - Double(burst.count) / rate) + Double.random(in: 0...max(0, jitter), using: &generator)
                    var remaining = Int(gap * rate)
                    while remaining > 0 && !isStopped {
                        let n = min(remaining, silence.count)
                        try playback.write(UnsafeBufferPointer(rebasing: silence[0..<n]))
                        remaining -= n
                    }
                }
            }
        }
        playback.drain()
    }

    /// Reopens the device every `interval` seconds until it opens or the broadcaster is stopped; returns
    /// what it was opened with, or nil when stopped.
    private func reopen(every interval: Double) -> NegotiatedFormat? {
        while !isStopped {
            let deadline = Date(timeIntervalSinceNow: max(0.01, interval))
            while Date() < deadline, !isStopped { Thread.sleep(forTimeInterval: min(0.05, interval)) }
            if isStopped { return nil }
            guard let device = try? PCMPlayback(configuration: configuration),
                  let frame = try? Modulator(profile: profile, sampleRate: device.negotiated.sampleRate, level: level).modulate(token)
            else { continue }
            lock.withLock {
                earlierUnderruns += playback.underruns
                playback = device
                burst = frame
            }
            return device.negotiated
        }
        return nil
    }

    private var isStopped: Bool { stopped.isSet }

    /// Stops sending and waits for the thread to end.
    public func stop() {
        stopped.set()
        if started.isSet { finished.wait() }
    }

    /// Waits until the broadcaster ends by itself (after `count` frames).
    public func wait() {
        if started.isSet { finished.wait() }
    }
}

/// Checks that a device hears its own broadcasts (full duplex on one card): each transmission must be
/// followed by a decoded own token within a deadline (airtime plus decoding latency); consecutive
/// misses are counted.
public final class SelfCheck: Sendable {
    private struct State {
        var lastHeard: Date?
        var consecutiveMisses = 0
        /// Another frame of this device's that counts as its own when heard (its room alias), if any.
        var alternate: [UInt8]?
    }
    private let state = Mutex(State())
    /// The own token.
    public let token: [UInt8]

    public init(token: [UInt8]) { self.token = token }

    /// Counts `frame` (the device's room alias, played in some of its slots instead of the token) as the own
    /// token when heard; nil: only the token.
    public func accept(alternate frame: [UInt8]?) { state.withLock { $0.alternate = frame } }

    /// Decoding latency allowed beyond a frame's airtime and the device buffer (s).
    public static let decodingMargin = 0.5

    /// Call for every decoded frame.
    public func heard(_ frame: DecodedFrame) {
        state.withLock { state in
            guard frame.token == token || frame.token == state.alternate else { return }
            state.lastHeard = Date()
        }
    }

    /// Call once the deadline of a transmission sent at `sentAt` has passed; returns the number of
    /// consecutive transmissions not heard (0 when this one was).
    @discardableResult
    public func judge(sentAt: Date) -> Int {
        state.withLock { state in
            if let lastHeard = state.lastHeard, lastHeard >= sentAt { state.consecutiveMisses = 0 } else { state.consecutiveMisses += 1 }
            return state.consecutiveMisses
        }
    }

    /// Consecutive transmissions not heard so far.
    public var missed: Int { state.withLock { $0.consecutiveMisses } }

    /// Judges a transmission queued now once `deadline` (s; ``Broadcaster/selfCheckDeadline``) has passed,
    /// on a background queue, and hands `onJudged` the consecutive misses then (0 when it was heard).
    public func judgeLater(after deadline: Double, onJudged: @escaping @Sendable (Int) -> Void) {
        let sentAt = Date()
        DispatchQueue.global().asyncAfter(deadline: .now() + deadline) { onJudged(self.judge(sentAt: sentAt)) }
    }
}
