import Foundation
import SottoDSP
import SottoModem

/// Carrier sense on a live capture: a `BandActivityMonitor` fed from the capture thread, remembering when the band
/// was last busy, shared by every ``MediumAccess`` of one device.
///
/// It lives as long as the capture, not as long as one broadcast: one transform per captured block whatever the
/// number of senders, and a sender made later (a new publication, a rotated token) starts with the band's
/// history and floor.
///
/// It also knows how far behind the air it is. The capture thread decodes what it captures; on a loaded machine
/// it falls behind, and the band it senses is the band of a while ago. The samples' own clock says so: each block
/// arrives at about `anchor + samples / rate`, `anchor` the least such offset of the last two seconds (which
/// forgets an overrun's lost samples). While the sense lags the air by more than two blocks and 0.1 s, the band
/// counts as busy now: a device does not talk on what it heard a second ago. Times are on the monotonic clock.
public final class CarrierSense: @unchecked Sendable {
    private let lock = NSLock()
    private var monitor: BandActivityMonitor?
    private var failure: FFTError?
    /// The band sensed (Hz).
    public let band: ClosedRange<Double>
    private var lastBusy: ContinuousClock.Instant?
    private var sensingSince: ContinuousClock.Instant?
    /// Whether a capture feeds the sense (from its first block until ``captureStopped()``).
    private var sensing = false
    /// Samples sensed since the capture (re)started, and the rate of the latest block (Hz).
    private var samples = 0
    private var rate = 0.0
    private var latestBlock = 0.0
    /// The least `arrival - samples / rate` of the current and the previous two-second span.
    private var anchor = AnchorMinimum()

    /// - Parameter band: the band sensed (Hz): by default every inaudible profile's band.
    public init(band: ClosedRange<Double> = MediumAccess.inaudibleBand) {
        self.band = band
    }

    /// Why the band cannot be sensed (its transform could not be made: out of memory), or nil; frames then go
    /// out without carrier sense.
    public var senseFailure: FFTError? { lock.withLock { failure } }

    /// Captured samples at `sampleRate` (Hz), from the capture thread (a ``Listener``'s `onCapture`). A new rate
    /// starts a new noise floor.
    /// - Parameters:
    ///   - block: the samples captured.
    ///   - sampleRate: their rate (Hz).
    ///   - arrival: when the block arrived (monotonic clock); now by default.
    public func captured(_ block: UnsafeBufferPointer<Float>, sampleRate: Double, at arrival: ContinuousClock.Instant = .now) {
        lock.withLock {
            if monitor?.sampleRate != sampleRate {
                guard sampleRate >= 2 * band.upperBound else { monitor = nil; sensing = false; return }
                do throws(FFTError) { monitor = try BandActivityMonitor(band: band, sampleRate: sampleRate); failure = nil } catch {
                    // No carrier sense without its transform (out of memory): said, and frames go out unsensed.
                    monitor = nil
                    failure = error
                    sensing = false
                    return
                }
                samples = 0
                anchor = AnchorMinimum()
            }
            guard let monitor, !block.isEmpty else { return }
            if !sensing { sensing = true; samples = 0; anchor = AnchorMinimum() }
            monitor.process(block)
            samples += block.count
            rate = sampleRate
            latestBlock = Double(block.count) / sampleRate
            anchor.add(arrival.advanced(by: .seconds(-Double(samples) / sampleRate)), at: arrival)
            if sensingSince == nil { sensingSince = arrival }
            if monitor.isBusy { lastBusy = arrival }
        }
    }

    /// The capture closed (paused, failed or stopped): until its next block, the band is not sensed and its
    /// idle time runs on from the last busy block.
    public func captureStopped() {
        lock.withLock { sensing = false }
    }

    /// How far the sense lags the air at `now` (s): the time since the latest sensed sample was on the air (up to
    /// about one block for a capture that keeps up); nil while no capture feeds it.
    /// - Parameter now: the time asked about (monotonic clock).
    public func lag(at now: ContinuousClock.Instant) -> Double? {
        lock.withLock { currentLag(at: now) }
    }

    private func currentLag(at now: ContinuousClock.Instant) -> Double? {
        guard sensing, rate > 0, let anchor = anchor.value else { return nil }
        return seconds(now - anchor.advanced(by: .seconds(Double(samples) / rate)))
    }

    /// How long the band has been idle at `now` (s): since it was last busy, else since sensing started; 0 while the
    /// sense lags the air (busy as far as anyone can tell); nil before any captured audio.
    /// - Parameter now: the time asked about (monotonic clock).
    public func idleFor(at now: ContinuousClock.Instant) -> Double? {
        lock.withLock {
            if let lag = currentLag(at: now), lag > 2 * latestBlock + 0.1 { return 0 }
            guard let since = lastBusy ?? sensingSince else { return nil }
            return max(0, seconds(now - since))
        }
    }
}

/// The least of a quantity over the current and the previous span of two seconds (a running minimum that forgets).
private struct AnchorMinimum {
    private var current: ContinuousClock.Instant?
    private var previous: ContinuousClock.Instant?
    private var spanStart: ContinuousClock.Instant?

    var value: ContinuousClock.Instant? {
        switch (current, previous) {
        case let (c?, p?): return min(c, p)
        default: return current ?? previous
        }
    }

    mutating func add(_ offset: ContinuousClock.Instant, at time: ContinuousClock.Instant) {
        if let start = spanStart, time - start >= .seconds(2) {
            previous = current
            current = nil
            spanStart = time
        }
        if spanStart == nil { spanStart = time }
        current = current.map { min($0, offset) } ?? offset
    }
}

private func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
}
