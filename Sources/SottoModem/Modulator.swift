import RealModule
import SottoDSP

/// Turns tokens into sound: the GFSK burst of one frame, at any sample rate.
public struct Modulator: Sendable {
    /// The waveform parameters.
    public let profile: Profile
    /// Output sample rate (Hz).
    public let sampleRate: Double
    /// Peak level (dBFS). The envelope is constant, so this is also the level of the whole burst.
    public let level: Double

    /// The default output level (dBFS): loud enough for a room, with 6 dB of headroom.
    public static let defaultLevel = -6.0

    /// - Throws: `ModemError` for a rate too low for the profile's band or a level outside -120...0 dBFS.
    public init(profile: Profile = .standard, sampleRate: Double = 48_000, level: Double = Modulator.defaultLevel) throws(ModemError) {
        try validate(sampleRate: sampleRate, for: profile)
        guard level.isFinite, (-120...0).contains(level) else { throw .invalidLevel(level) }
        self.profile = profile
        self.sampleRate = sampleRate
        self.level = level
    }

    /// Peak amplitude (full scale = 1).
    public var amplitude: Float { Float(pow10(level / 20)) }

    /// The preamble's frequency trajectory: up-chirp then down-chirp across the band; for an alias frame
    /// (`alias`), two up-chirps.
    static func preambleSegments(_ profile: Profile, alias: Bool = false) -> [FrequencyTrajectory.Segment] {
        let up = FrequencyTrajectory.Segment.chirp(from: profile.lowFrequency, to: profile.highFrequency, duration: profile.chirpDuration)
        return alias ? [up, up]
            : [up, .chirp(from: profile.highFrequency, to: profile.lowFrequency, duration: profile.chirpDuration)]
    }

    /// The full trajectory of the frame carrying `token`.
    public func trajectory(token: [UInt8]) throws(ModemError) -> FrequencyTrajectory {
        Self.trajectory(symbols: try FrameFormat.symbols(payload: token, profile: profile), profile: profile)
    }

    /// The trajectory of a frame with the given symbol values: preamble (both chirps unless `preamble` says
    /// otherwise), one tone per symbol, and the last tone held through the fade-out so the data symbols keep their
    /// full length.
    static func trajectory(symbols: [Int], profile: Profile, preamble: [FrequencyTrajectory.Segment]? = nil) -> FrequencyTrajectory {
        var segments = preamble ?? preambleSegments(profile)
        for (k, value) in symbols.enumerated() {
            segments.append(.tone(profile.toneFrequency(symbolIndex: k, value: value), duration: profile.symbolTime))
        }
        if let last = symbols.last {
            segments.append(.tone(profile.toneFrequency(symbolIndex: symbols.count - 1, value: last), duration: profile.fadeDuration))
        }
        return FrequencyTrajectory(
            segments: segments,
            smoothingSigma: FrequencyTrajectory.gaussianSigma(bandwidthTime: profile.bandwidthTime, symbolTime: profile.symbolTime),
            fadeDuration: profile.fadeDuration)
    }

    /// The samples of one frame carrying `token` (1...16 bytes).
    public func modulate(_ token: [UInt8]) throws(ModemError) -> [Float] {
        try trajectory(token: token).synthesize(sampleRate: sampleRate, amplitude: amplitude)
    }
}

@inline(__always) func pow10(_ x: Double) -> Double { Double.exp(x * 2.302585092994046) }
