/// A named set of waveform parameters: band, tones, symbol time, preamble and code.
///
/// Every profile is 16-ary GFSK (4 bits per symbol, one tone at a time, tone spacing = 1 / symbol time so
/// tones are orthogonal for a noncoherent receiver), preceded by an up-chirp and a down-chirp across the
/// band. Profiles with more than one sub-band hop: symbol k uses sub-band k mod `subBands`, so a tone is
/// not reused on consecutive symbols and the previous symbol's reverberant tail falls into other bins.
public struct Profile: Sendable, Hashable, CustomStringConvertible {
    /// Short name used on the command line (`default`, `fast`, `robust`, `audible`).
    public let name: String
    /// 2-bit identifier carried in the frame header (0...3).
    public let identifier: UInt8
    /// One-line description for the profiles table.
    public let summary: String
    /// Centre of the band (Hz).
    public let centerFrequency: Double
    /// Spacing between adjacent tones (Hz); the symbol time is its inverse.
    public let toneSpacing: Double
    /// Tones per sub-band (16: one symbol carries 4 bits).
    public let tonesPerSubBand: Int
    /// Number of sub-bands symbols hop between.
    public let subBands: Int
    /// Duration of each of the two preamble chirps (s).
    public let chirpDuration: Double
    /// Raised-cosine fade at the start and end of the burst (s).
    public let fadeDuration: Double
    /// Gaussian filter bandwidth-time product of the frequency transitions (GFSK BT).
    public let bandwidthTime: Double

    /// Bits carried per symbol.
    public var bitsPerSymbol: Int { 4 }
    /// Symbol time (s).
    public var symbolTime: Double { 1 / toneSpacing }
    /// Total number of tones.
    public var toneCount: Int { tonesPerSubBand * subBands }
    /// Frequency of tone `index` in `0..<toneCount` (Hz).
    public func toneFrequency(_ index: Int) -> Double {
        centerFrequency + (Double(index) - Double(toneCount - 1) / 2) * toneSpacing
    }
    /// Frequency of the symbol with value `value` (0..<16) at position `symbolIndex` in the frame (Hz).
    public func toneFrequency(symbolIndex: Int, value: Int) -> Double {
        toneFrequency((symbolIndex % subBands) * tonesPerSubBand + value)
    }
    /// Lowest frequency the chirps reach (Hz): half a tone spacing under the lowest tone.
    public var lowFrequency: Double { toneFrequency(0) - toneSpacing / 2 }
    /// Highest frequency the chirps reach (Hz).
    public var highFrequency: Double { toneFrequency(toneCount - 1) + toneSpacing / 2 }
    /// The band the burst occupies (Hz).
    public var band: ClosedRange<Double> { lowFrequency...highFrequency }
    /// The lowest sample rate this profile can be sent or decoded at (Hz): twice the top of the band plus
    /// room for the anti-alias filter.
    public var minimumSampleRate: Double { 2 * highFrequency + 200 }
    /// Highest sample rate any device uses (Hz); beyond it a rate is taken as a mistake.
    public static let maximumSampleRate = 768_000.0

    /// True when a stream at `sampleRate` (Hz) can carry this profile: a finite rate from
    /// `minimumSampleRate` to `Profile.maximumSampleRate`. The one rule behind sending, decoding and
    /// listening.
    public func isCarried(atSampleRate sampleRate: Double) -> Bool {
        sampleRate.isFinite && sampleRate >= minimumSampleRate && sampleRate <= Self.maximumSampleRate
    }

    /// The profiles of `profiles` (in their order) that a stream at `sampleRate` (Hz) can carry: an 8 kHz
    /// file holds none (the audible profile needs 8.2 kHz), a 16 kHz one only the audible profile, 44.1 kHz
    /// and up every profile, an absurd rate none.
    public static func carried(atSampleRate sampleRate: Double, among profiles: [Profile] = all) -> [Profile] {
        profiles.filter { $0.isCarried(atSampleRate: sampleRate) }
    }

    /// Number of symbols in a frame carrying `payloadBytes` bytes.
    public func symbolCount(payloadBytes: Int) -> Int { FrameFormat.symbolCount(payloadBytes: payloadBytes) }
    /// Airtime of a frame carrying `payloadBytes` bytes, preamble and fades included (s).
    public func airtime(payloadBytes: Int) -> Double {
        2 * chirpDuration + Double(symbolCount(payloadBytes: payloadBytes)) * symbolTime + fadeDuration
    }
    /// Net bit rate for `payloadBytes` bytes: payload bits over airtime (bit/s).
    public func netBitRate(payloadBytes: Int) -> Double { Double(8 * payloadBytes) / airtime(payloadBytes: payloadBytes) }

    public var description: String { name }

    /// 18.0-20.0 kHz, 16 tones 112.5 Hz apart, 8.9 ms symbols: inaudible to most adults, passes the
    /// anti-alias filters of 44.1 kHz devices; about 0.5 s for 8 bytes.
    public static let standard = Profile(
        name: "default", identifier: 0,
        summary: "inaudible, general purpose",
        centerFrequency: 19_000, toneSpacing: 112.5, tonesPerSubBand: 16, subBands: 1,
        chirpDuration: 0.040, fadeDuration: 0.005, bandwidthTime: 2.0)

    /// 17.5-20.5 kHz, 16 tones 187.5 Hz apart, 5.3 ms symbols: short range, fastest; needs devices that
    /// pass 20.5 kHz (48 kHz devices usually do, many 44.1 kHz ones do not).
    public static let fast = Profile(
        name: "fast", identifier: 1,
        summary: "inaudible, short range, needs flat response to 20.5 kHz",
        centerFrequency: 19_000, toneSpacing: 187.5, tonesPerSubBand: 16, subBands: 1,
        chirpDuration: 0.016, fadeDuration: 0.003, bandwidthTime: 2.0)

    /// 18.0-20.0 kHz, two hopped sub-bands of 16 tones 56.25 Hz apart, 17.8 ms symbols: for large
    /// reverberant rooms; about 1 s for 8 bytes.
    public static let robust = Profile(
        name: "robust", identifier: 2,
        summary: "inaudible, reverberant rooms, hops between two sub-bands",
        centerFrequency: 19_000, toneSpacing: 56.25, tonesPerSubBand: 16, subBands: 2,
        chirpDuration: 0.060, fadeDuration: 0.005, bandwidthTime: 2.0)

    /// 2-4 kHz, two hopped sub-bands of 16 tones 62.5 Hz apart, 16 ms symbols: for speakers and
    /// microphones that cannot do 18 kHz, and for debugging by ear.
    public static let audible = Profile(
        name: "audible", identifier: 3,
        summary: "audible 2-4 kHz, for any speaker, debugging by ear",
        centerFrequency: 3_000, toneSpacing: 62.5, tonesPerSubBand: 16, subBands: 2,
        chirpDuration: 0.050, fadeDuration: 0.005, bandwidthTime: 2.0)

    /// All profiles, in identifier order.
    public static let all: [Profile] = [.standard, .fast, .robust, .audible]

    /// The profile named `name` (case-insensitive), or nil.
    public static func named(_ name: String) -> Profile? {
        all.first { $0.name.lowercased() == name.lowercased() }
    }
}
