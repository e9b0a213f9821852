import SottoExchange
import SottoExchangeCore

/// Duty-cycled listening, the low-power scan of a subscription that prefers low power
/// (`Strategy/lowPower`, the seeds' `lowPowerPreferred`): the capture device is open for the first
/// ``listen`` seconds of every ``period`` seconds of the radio's clock, and closed (no capture, no decoding)
/// for the rest. A frame is heard only inside a window, so a find comes up to `period - listen` s later than
/// with continuous listening, and a listen window should hold a whole repetition of what is looked for (a
/// beacon's interval plus its frame's airtime).
public struct ScanDutyCycle: Sendable, Hashable {
    /// Seconds of listening at the start of every period.
    public let listen: Double
    /// Seconds from one listening window to the next.
    public let period: Double

    /// The low-power default: 3 s of every 10 s (a beacon repeating every 1-1.25 s with frames of up to
    /// 1.5 s is heard whole in every window). Measured in the README, "Earshot and distance".
    public static let lowPower = ScanDutyCycle(checkedListen: 3, period: 10)

    /// The longest period (s), 59: a subscription's lost timeout (at most the matcher's 60 s) must cover a
    /// period and a second.
    public static let maximumPeriod = ExchangeLimits.lostTimeoutRange.upperBound - 1

    /// - Parameters:
    ///   - listen: seconds of listening per period, above 0 and below `period`.
    ///   - period: seconds per period, up to ``maximumPeriod``.
    /// - Throws: ``InvalidScanDutyCycle`` when the numbers do not make a duty cycle.
    public init(listen: Double, period: Double) throws(InvalidScanDutyCycle) {
        guard listen.isFinite, period.isFinite, listen > 0, period <= Self.maximumPeriod else {
            throw InvalidScanDutyCycle(description: "a listening window of \(listen) s every \(period) s: the window must be above 0 s and the period at most \(Int(Self.maximumPeriod)) s")
        }
        guard listen < period else {
            throw InvalidScanDutyCycle(description: "a listening window of \(listen) s every \(period) s: the window must be shorter than the period (or listen all the time)")
        }
        self.init(checkedListen: listen, period: period)
    }

    private init(checkedListen listen: Double, period: Double) {
        self.listen = listen
        self.period = period
    }

    /// Whether the capture device should be open at `time` (s on the radio's clock).
    public func listens(at time: Double) -> Bool {
        guard time.isFinite, time >= 0 else { return true }
        return time.truncatingRemainder(dividingBy: period) < listen
    }

    /// The fraction of the time spent listening (0...1).
    public var dutyFraction: Double { listen / period }

    /// The shortest lost timeout (s) that does not flap between windows: two sightings of a frame repeated
    /// all along are at most a period and a window apart (early in one window, late in the next); and a second.
    public var shortestLostTimeout: Double { period + listen + 1 }

    /// The longest a frame repeated continuously waits for a window (s): `period - listen`.
    public var longestAddedLatency: Double { period - listen }
}

/// Numbers that do not make a ``ScanDutyCycle``.
public struct InvalidScanDutyCycle: Error, Sendable, CustomStringConvertible {
    /// What is wrong, for the user.
    public let description: String
}
