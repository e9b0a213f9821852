/// Errors of the modem API: every one says what was wrong and what is allowed.
public enum ModemError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A token must be 1...16 bytes.
    case invalidTokenLength(Int)
    /// The sample rate (Hz) is too low for the profile's band, or absurd.
    case sampleRateTooLow(rate: Double, profile: String, minimum: Double)
    /// A sample rate that is not a positive finite number or is beyond what any device uses.
    case invalidSampleRate(Double)
    /// An output level (dBFS) outside -120...0.
    case invalidLevel(Double)
    /// The receiver's transforms could not be made (FFTW could not allocate or plan them: out of memory),
    /// with FFTW's reason.
    case transformFailed(String)
    /// An alias frame carries 0...4095 (12 bits).
    case invalidAlias(Int)

    public var description: String {
        switch self {
        case .invalidTokenLength(let n):
            return "a token must be \(FrameFormat.payloadBytes.lowerBound) to \(FrameFormat.payloadBytes.upperBound) bytes, got \(n)"
        case .sampleRateTooLow(let rate, let profile, let minimum):
            return "sample rate \(formatHz(rate)) is too low for profile '\(profile)': it needs at least \(formatHz(minimum)) (twice its top frequency)"
        case .invalidSampleRate(let rate):
            return "invalid sample rate \(rate) Hz: expected a positive rate up to 768 kHz"
        case .invalidLevel(let level):
            return "invalid level \(level) dBFS: expected a value from -120 to 0"
        case .transformFailed(let reason):
            return "cannot prepare the receiver: \(reason)"
        case .invalidAlias(let alias):
            return "an alias must be 0 to \(FrameFormat.maxAlias), got \(alias)"
        }
    }
}

func formatHz(_ hz: Double) -> String {
    hz >= 1000 ? "\((hz / 100).rounded() / 10) kHz" : "\(Int(hz)) Hz"
}

/// Checks a sample rate (Hz) against a profile's band.
func validate(sampleRate: Double, for profile: Profile) throws(ModemError) {
    guard sampleRate.isFinite, sampleRate > 0, sampleRate <= Profile.maximumSampleRate else { throw .invalidSampleRate(sampleRate) }
    guard profile.isCarried(atSampleRate: sampleRate) else {
        throw .sampleRateTooLow(rate: sampleRate, profile: profile.name, minimum: profile.minimumSampleRate)
    }
}
