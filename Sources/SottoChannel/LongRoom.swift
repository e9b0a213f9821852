import RealModule
import SottoDSP

/// An impulse response described by what a measurement reports rather than by a room's geometry: a
/// direct path, a diffuse tail decaying exponentially with one reverberation time across the whole band,
/// scaled to a direct-to-reverberant ratio, and discrete reflections at chosen delays.
///
/// It makes the rooms the shoebox model (``Room``) cannot: reverberation times of seconds at 18-20 kHz
/// (halls with little air absorption, long "creative" responses), a direct sound weaker than the tail,
/// strong reflections later than the coherent detector's room model (about 74 ms), and notches across
/// the band (a strong reflection at delay d notches every 1 / d Hz). All times are in seconds, levels in
/// dB; the direct path has gain 1.
public struct LongRoom: Sendable, Hashable, Codable {
    /// One discrete reflection: its delay after the direct path (s) and its amplitude relative to it.
    public struct Reflection: Sendable, Hashable, Codable {
        public var delay: Double
        public var gain: Double
        public init(delay: Double, gain: Double) {
            self.delay = delay
            self.gain = gain
        }
    }

    /// Reverberation time of the tail (s): its energy falls 60 dB in this time.
    public var rt60: Double
    /// Energy of the direct path over the energy of the diffuse tail (dB).
    public var directToReverberantDB: Double
    /// Length of the response after the direct path (s); the tail is faded out over its last tenth.
    public var length: Double
    /// Delay of the direct path from the response's start (s).
    public var directDelay: Double
    /// Discrete reflections (not counted in the direct-to-reverberant ratio).
    public var reflections: [Reflection]

    /// Time over which the tail grows from zero after the direct path (s).
    static let tailOnset = 0.002
    /// Share of the length over which the tail is faded out (a cut end would echo the input).
    static let fadeOutShare = 0.1

    public init(rt60: Double, directToReverberantDB: Double, length: Double, directDelay: Double = 0.005,
                reflections: [Reflection] = []) {
        self.rt60 = rt60
        self.directToReverberantDB = directToReverberantDB
        self.length = length
        self.directDelay = directDelay
        self.reflections = reflections
    }

    /// A response like the measured one of the receiver issue: 3.4 s long, direct-to-reverberant ratio
    /// -2.8 dB, with an in-band reverberation time `rt60` (s).
    public static func issueRoom(rt60: Double) -> LongRoom {
        LongRoom(rt60: rt60, directToReverberantDB: -2.8, length: 3.4)
    }

    /// The impulse response at `sampleRate` (Hz), seeded by `rng`.
    public func impulseResponse(sampleRate: Double, rng: inout SeededRandom) -> [Float] {
        let start = Int((directDelay * sampleRate).rounded())
        let count = max(1, Int((length * sampleRate).rounded()))
        var h = [Float](repeating: 0, count: start + count)
        h[start] = 1
        // Diffuse tail: white Gaussian noise under an exponential amplitude envelope (-60 dB of energy
        // over rt60), grown in over `tailOnset` and faded out over the last `fadeOutShare` of the length.
        let decay = 6.907755 / (rt60 * sampleRate)
        let onset = max(1, Int(Self.tailOnset * sampleRate))
        let fade = max(1, Int(Self.fadeOutShare * Double(count)))
        var tail = [Double](repeating: 0, count: count)
        var energy = 0.0
        for i in 1..<max(1, count) {
            var g = Double.exp(-decay * Double(i))
            if i < onset { g *= Double(i) / Double(onset) }
            if i >= count - fade {
                let w = Double(count - 1 - i) / Double(fade)
                g *= 0.5 - 0.5 * Double.cos(Double.pi * w)
            }
            tail[i] = g * rng.gaussian()
            energy += tail[i] * tail[i]
        }
        let gain = energy > 0 ? (Double.pow(10, -directToReverberantDB / 10) / energy).squareRoot() : 0
        for i in 1..<max(1, count) { h[start + i] += Float(gain * tail[i]) }
        for reflection in reflections {
            let index = start + Int((reflection.delay * sampleRate).rounded())
            if index >= 0 && index < h.count { h[index] += Float(reflection.gain) }
        }
        return h
    }
}
