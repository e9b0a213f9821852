import Foundation

/// Distance (m) from a sighting's in-band SNR (dB), Nearby's `Distance` with accuracy LOW: audio has no
/// calibrated transmit power on the air, so the estimate assumes the nominal speaker (the modulator's
/// default level) and a quiet room, whose direct sound arrives ``referenceSNRAt1m`` above the noise at 1 m.
///
/// Model: the received power in a room is the direct sound, falling as 1 / distance^2, plus the diffuse
/// sound, the same everywhere (Sabine): SNR(d) = S1 + 10 log10(1/d^2 + 1/dc^2), dc being the critical
/// distance. Beyond a few critical distances the SNR no longer falls, so the estimate is capped at
/// ``farthest``. Errors measured against the simulator's true distance: `sotto bench sweep earshot`
/// (README, "Earshot and distance").
public struct AudioDistance: Sendable, Hashable {
    /// In-band SNR (dB) of the nominal speaker's direct sound at 1 m in the nominal quiet room: 20 dB
    /// full band (the simulator's convention) plus 11.2 dB for the default profile's band at 48 kHz.
    public static let referenceSNRAt1m = 31.2
    /// Critical distance (m) of the nominal room: about 1-2.3 m in living rooms and offices at 19 kHz
    /// (CHANNEL.md 4.4).
    public static let nominalCriticalDistance = 2.0
    /// The largest distance reported (m): beyond it the SNR says nothing more.
    public static let farthest = 10.0

    /// In-band SNR of the direct sound at 1 m (dB).
    public var snrAt1m: Double
    /// Critical distance (m); infinity for a free field (no room).
    public var criticalDistance: Double

    /// An estimator for a speaker whose direct sound arrives `snrAt1m` dB above the noise at 1 m, in a room of
    /// critical distance `criticalDistance` (m; infinity: free field).
    public init(snrAt1m: Double = AudioDistance.referenceSNRAt1m, criticalDistance: Double = AudioDistance.nominalCriticalDistance) {
        self.snrAt1m = snrAt1m
        self.criticalDistance = criticalDistance
    }

    /// The estimated distance (m) for an in-band SNR of `snr` (dB), within 0.1...``farthest``; NaN for a NaN SNR.
    public func meters(snr: Double) -> Double {
        guard !snr.isNaN else { return .nan }
        let diffuse = criticalDistance.isFinite ? 1 / (criticalDistance * criticalDistance) : 0
        let direct = pow(10, (snr - snrAt1m) / 10) - diffuse
        guard direct > 0 else { return Self.farthest }
        return min(Self.farthest, max(0.1, 1 / direct.squareRoot()))
    }

    /// The in-band SNR (dB) this model expects at `meters` (m).
    public func snr(atMeters meters: Double) -> Double {
        let diffuse = criticalDistance.isFinite ? 1 / (criticalDistance * criticalDistance) : 0
        return snrAt1m + 10 * log10(1 / (meters * meters) + diffuse)
    }
}
