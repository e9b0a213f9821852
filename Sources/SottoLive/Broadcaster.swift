import Foundation
import SottoAudio
import SottoModem

/// Plays a token on an ALSA device over and over, one frame every `interval` seconds plus a uniform
/// random delay of up to `jitter` seconds (so that two broadcasters do not collide every time), until
/// stopped or `count` frames are sent. Gaps are played as silence, so timing follows the device's
/// sample clock. Runs on its own thread; `stop()` returns within one period.
public final class Broadcaster: @unchecked Sendable {
    /// What the device was opened with.
    public let negotiated: NegotiatedFormat
    private let playback: PCMPlayback
    private let burst: [Float]
    private let lock = NSLock()
    private let stopped = StopFlag()
    private let finished = DispatchSemaphore(value: 0)
    private var started = false

    /// Frames sent so far.
    public var sent: Int { lock.withLock { sentCount } }
    private var sentCount = 0
    /// Underruns recovered so far.
    public var underruns: Int { playback.underruns }

    public init(configuration: PCMConfiguration, token: [UInt8], profile: Profile = .standard,
                level: Double = Modulator.defaultLevel) throws {
        var configuration = configuration
        configuration.acceptableRates = max(configuration.acceptableRates.lowerBound, profile.minimumSampleRate)...max(configuration.acceptableRates.upperBound, profile.minimumSampleRate)
        playback = try PCMPlayback(configuration: configuration)
        negotiated = playback.negotiated
        burst = try Modulator(profile: profile, sampleRate: negotiated.sampleRate, level: level).modulate(token)
    }

    /// Airtime of one frame (s).
    public var airtime: Double { Double(burst.count) / negotiated.sampleRate }

    /// Starts sending. `onSent(index)` runs after each frame has been queued; `onEnd` once at the end
    /// with the error that stopped it, if any.
    public func start<G: RandomNumberGenerator & Sendable>(interval: Double, jitter: Double, count: Int? = nil, generator: G,
                                                            onSent: @escaping @Sendable (Int) -> Void = { _ in },
                                                            onEnd: @escaping @Sendable ((any Error)?) -> Void = { _ in }) {
        started = true
        let rate = negotiated.sampleRate, burst = self.burst, playback = self.playback
        let thread = Thread { [self] in
            var generator = generator
            var failure: (any Error)?
            do {
                while !isStopped {
                    try playback.write(burst)
                    let index = lock.withLock { () -> Int in sentCount += 1; return sentCount }
                    onSent(index)
                    if let count, index >= count { break }
                    let gap = max(0, interval - Double(burst.count) / rate) + Double.random(in: 0...max(0, jitter), using: &generator)
                    // Silence in period-sized pieces, so that stop() is honoured within one period.
                    var remaining = Int(gap * rate)
                    let piece = [Float](repeating: 0, count: playback.negotiated.periodFrames)
                    while remaining > 0 && !isStopped {
                        let n = min(remaining, piece.count)
                        try playback.write(Array(piece[0..<n]))
                        remaining -= n
                    }
                }
                playback.drain()
            } catch {
                failure = error
            }
            onEnd(failure)
            finished.signal()
        }
        thread.name = "sotto-broadcast"
        thread.start()
    }

    private var isStopped: Bool { stopped.isSet }

    /// Stops sending and waits for the thread to end.
    public func stop() {
        stopped.set()
        if started { finished.wait(); started = false }
    }

    /// Waits until the broadcaster ends by itself (after `count` frames).
    public func wait() {
        if started { finished.wait(); started = false }
    }
}

/// Checks that a device hears its own broadcasts (full duplex on one card): each transmission must be
/// followed by a decoded own token within a deadline (airtime plus decoding latency); consecutive
/// misses are counted.
public final class SelfCheck: @unchecked Sendable {
    private let lock = NSLock()
    private var lastHeard: Date?
    private var consecutiveMisses = 0
    /// The own token.
    public let token: [UInt8]

    public init(token: [UInt8]) { self.token = token }

    /// Call for every decoded frame.
    public func heard(_ frame: DecodedFrame) {
        guard frame.token == token else { return }
        lock.withLock { lastHeard = Date() }
    }

    /// Call once the deadline of a transmission sent at `sentAt` has passed; returns the number of
    /// consecutive transmissions not heard (0 when this one was).
    @discardableResult
    public func judge(sentAt: Date) -> Int {
        lock.withLock {
            if let lastHeard, lastHeard >= sentAt { consecutiveMisses = 0 } else { consecutiveMisses += 1 }
            return consecutiveMisses
        }
    }

    /// Consecutive transmissions not heard so far.
    public var missed: Int { lock.withLock { consecutiveMisses } }
}
