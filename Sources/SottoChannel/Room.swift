import RealModule
import SottoDSP

/// A synthetic room impulse response: the direct path, first-order reflections of a shoebox room, and a
/// diffuse exponential tail whose decay depends on frequency.
///
/// Model: Sabine's formula with air absorption. The mid-frequency (1 kHz) `rt60` fixes the walls'
/// absorption area A = 0.161 V / RT60 - 4 m(1 kHz) V; at frequency f, RT60(f) = 0.161 V / (A + 4 m(f) V),
/// which makes a 0.5 s room (60 m^3) about 0.2 s at 19 kHz, as measured rooms are (CHANNEL.md §4.4).
/// The diffuse energy relative to the direct path in each band is (distance / critical distance)^2 with
/// the critical distance 0.057 sqrt(Q V / RT60(f)) (m), Q being the source's directivity factor on axis.
/// The direct path has gain 1 at delay distance / c.
public struct Room: Sendable, Hashable, Codable {
    /// Reverberation time at mid frequencies (s).
    public var rt60: Double
    /// Source to microphone distance (m).
    public var distance: Double
    /// Room volume (m^3).
    public var volume: Double
    /// Directivity factor Q of the source towards the microphone (1 = omnidirectional). Small speakers
    /// are directional at 18-20 kHz (ka of about 3 for a 1 cm radius, directivity index 6-9 dB):
    /// the default of 4 (6 dB) is a conservative value for a phone or laptop speaker aimed at the listener.
    public var directivity: Double

    public init(rt60: Double, distance: Double, volume: Double = 60, directivity: Double = 4) {
        self.rt60 = rt60
        self.distance = distance
        self.volume = volume
        self.directivity = directivity
    }

    /// Speed of sound (m/s).
    static let speedOfSound = 343.0

    /// Air absorption 4m (1/m) at 20 degrees C, 50% relative humidity, by frequency (Hz), interpolated
    /// on a log-frequency axis (ISO 9613-1 values, rounded).
    static let airAbsorption: [(frequency: Double, fourM: Double)] = [
        (125, 0.0002), (250, 0.0004), (500, 0.0011), (1_000, 0.0030), (2_000, 0.0075),
        (4_000, 0.024), (8_000, 0.087), (12_000, 0.18), (16_000, 0.30), (20_000, 0.45), (24_000, 0.60),
    ]

    static func fourM(at frequency: Double) -> Double {
        let table = airAbsorption
        if frequency <= table[0].frequency { return table[0].fourM }
        for i in 1..<table.count where frequency <= table[i].frequency {
            let (f0, m0) = table[i - 1], (f1, m1) = table[i]
            let w = Double.log(frequency / f0) / Double.log(f1 / f0)
            return m0 + w * (m1 - m0)
        }
        return table[table.count - 1].fourM
    }

    /// RT60 (s) at `frequency` (Hz).
    public func rt60(at frequency: Double) -> Double {
        let area = max(0.01, 0.161 * volume / rt60 - Self.fourM(at: 1_000) * volume)
        return 0.161 * volume / (area + Self.fourM(at: frequency) * volume)
    }

    /// Critical distance (m) at `frequency` (Hz): where direct and diffuse energy are equal.
    public func criticalDistance(at frequency: Double) -> Double {
        0.057 * (directivity * volume / rt60(at: frequency)).squareRoot()
    }

    /// The impulse response at `sampleRate` (Hz), seeded by `rng`.
    /// - Throws: `FFTError` when the diffuse tail's transforms cannot be allocated or planned (out of memory).
    public func impulseResponse(sampleRate: Double, rng: inout SeededRandom) throws(FFTError) -> [Float] {
        let directDelay = distance / Self.speedOfSound * sampleRate
        let longest = rt60(at: 250)
        let length = Int((directDelay + 1.2 * longest * sampleRate).rounded(.up)) + 1
        var h = [Float](repeating: 0, count: length)
        let start = Int(directDelay.rounded())
        h[min(start, length - 1)] = 1

        // First-order reflections of a shoebox room with proportions 1.6 : 1.25 : 1 (random positions).
        let height = Double.pow(volume / 2.0, 1.0 / 3.0)
        let dimensions = [1.6 * height, 1.25 * height, height]
        let reflection = (1 - min(0.9, 0.161 * volume / rt60 / (2 * (dimensions[0] * dimensions[1] + dimensions[1] * dimensions[2] + dimensions[0] * dimensions[2])))).squareRoot()
        for axis in 0..<3 {
            for _ in 0..<2 {
                // Extra path length of an image source: twice a random distance to a wall on that axis.
                let wall = rng.uniform() * dimensions[axis] / 2 + 0.2
                let path = (distance * distance + 4 * wall * wall).squareRoot()
                let delay = Int((path / Self.speedOfSound * sampleRate).rounded())
                if delay < length { h[delay] += Float(reflection * distance / path) * (rng.uniform() < 0.5 ? -1 : 1) }
            }
        }

        // Diffuse tail: white noise split into bands, each with its own decay and level.
        let edges: [Double] = [0, 500, 1_000, 2_000, 4_000, 8_000, 12_000, 16_000, 18_000, 20_000, sampleRate / 2]
        let tailStart = start + Int(0.002 * sampleRate)
        let tailLength = length - tailStart
        guard tailLength > 16 else { return h }
        let size = fastFFTSize(atLeast: tailLength)
        let noise = try RealFFT(checkedSize: size)
        for i in 0..<size { noise.input[i] = Float(rng.gaussian()) }
        noise.execute()
        let inverse = try InverseRealFFT(checkedSize: size)
        var tail = [Float](repeating: 0, count: tailLength)
        for b in 0..<(edges.count - 1) where edges[b] < sampleRate / 2 {
            let low = edges[b], high = min(edges[b + 1], sampleRate / 2)
            let center = low == 0 ? 250 : (low * high).squareRoot()
            for k in 0...(size / 2) {
                let f = Double(k) * sampleRate / Double(size)
                let keep: Float = (f >= low && f < high) ? 1 : 0
                inverse.input[2 * k] = noise.output[2 * k] * keep
                inverse.input[2 * k + 1] = noise.output[2 * k + 1] * keep
            }
            inverse.execute()
            let decay = 6.907755 / (rt60(at: center) * sampleRate)  // amplitude: -60 dB over RT60
            // Energy of band noise x decaying envelope, scaled to (distance / critical distance)^2 of the direct path.
            var energy = 0.0
            for i in 0..<tailLength {
                let v = Double(inverse.output[i]) * Double.exp(-decay * Double(i))
                energy += v * v
            }
            let bandShare = (high - low) / (sampleRate / 2)
            let ratio = Double.pow(distance / criticalDistance(at: center), 2) * bandShare
            let gain = energy > 0 ? (ratio / energy).squareRoot() : 0
            for i in 0..<tailLength {
                tail[i] += Float(gain * Double(inverse.output[i]) * Double.exp(-decay * Double(i)))
            }
        }
        // Fade the tail in over 2 ms so that it grows out of the early reflections.
        let fadeIn = Int(0.002 * sampleRate)
        for i in 0..<tailLength {
            let g: Float = i < fadeIn ? Float(i) / Float(fadeIn) : 1
            h[tailStart + i] += g * tail[i]
        }
        // Fade the response out over its last 0.2 RT60(250 Hz) (from -60 to -72 dB). Cut abruptly, its end
        // is an edge that convolution turns into a copy of the input delayed by the response's length:
        // faint, but a matched filter finds it (a second frame at 2.58 s after one at 0.10 s with
        // RT60 = 2 s, and the only one at 10 m with RT60 = 3 s).
        let fadeOut = min(tailLength, Int(0.2 * longest * sampleRate))
        for i in 0..<fadeOut {
            let w = 0.5 - 0.5 * Double.cos(Double.pi * Double(i) / Double(fadeOut))
            h[length - 1 - i] *= Float(w)
        }
        return h
    }
}

/// One complete channel, applied in a fixed order: reverberation (synthetic or measured) -> roll-off ->
/// clock offset -> resampling -> interference -> white noise -> clipping -> 16-bit quantisation.
/// Every stage is off unless set. Seeded: the same model and input give the same output.
public struct ChannelModel: Sendable, Codable, Hashable {
    /// Synthetic room: RT60 at mid frequencies (s); with `distance` and `volume`.
    public var rt60: Double?
    /// Source to microphone distance for the synthetic room (m).
    public var distance: Double = 1
    /// Room volume (m^3).
    public var volume: Double = 60
    /// Source directivity factor Q (see ``Room/directivity``).
    public var directivity: Double = 4
    /// Speaker/microphone roll-off corner (Hz) (``RollOffFilter``).
    public var rollOffCornerHz: Double?
    /// Slope of the roll-off above its corner (dB/octave, a multiple of 12); nil: 24.
    public var rollOffSlopeDBPerOctave: Double?
    /// Receiver clock offset (ppm, positive = receiver fast: the signal arrives stretched).
    public var ppm: Double?
    /// Output sample rate (Hz).
    public var outputRate: Double?
    /// Signal-to-interference ratio (dB) for the interference recording passed to `apply`.
    public var sirDB: Double?
    /// White noise: active signal power over noise power in 0...fs/2 (dB).
    public var snrDB: Double?
    /// Hard clipping level (full scale = 1).
    public var clipLevel: Float?
    /// 16-bit quantisation with TPDF dither.
    public var quantize16 = false
    /// Seed of every random choice.
    public var seed: UInt64

    public init(seed: UInt64 = 1) { self.seed = seed }

    /// Applies the channel to `x` at `sampleRate` (Hz). A measured impulse response (at the same rate) is
    /// normalised so that its largest peak is 1 (the direct path, unless a reflection is stronger). The
    /// interference recording is given at `sampleRate` and follows the signal to `outputRate`. Signal power for SNR and SIR is the active power of the
    /// input (``Channel/activePower(_:sampleRate:)``), so silence around bursts does not count.
    /// - Throws: `FFTError` when the room's transforms cannot be allocated or planned (out of memory).
    public func apply(_ x: [Float], sampleRate: Double, interference: [Float]? = nil,
                      measuredImpulseResponse: [Float]? = nil) throws(FFTError) -> (samples: [Float], sampleRate: Double) {
        var rng = SeededRandom(seed: seed)
        let signalPower = Channel.activePower(x, sampleRate: sampleRate)
        var y = x
        if var response = measuredImpulseResponse, !response.isEmpty {
            let peak = response.map { abs($0) }.max() ?? 1
            if peak > 0 { for i in response.indices { response[i] /= peak } }
            y = try fftConvolve(y, response)
        } else if let rt60 {
            y = try fftConvolve(y, Room(rt60: rt60, distance: distance, volume: volume, directivity: directivity).impulseResponse(sampleRate: sampleRate, rng: &rng))
        }
        if let rollOffCornerHz {
            Channel.rollOff(&y, sampleRate: sampleRate, cornerHz: rollOffCornerHz,
                            slopeDBPerOctave: rollOffSlopeDBPerOctave ?? RollOffFilter.defaultSlope)
        }
        if let ppm, ppm != 0 { y = Channel.clockOffset(y, ppm: ppm) }
        var rate = sampleRate
        if let outputRate, outputRate != sampleRate {
            y = Channel.resample(y, from: sampleRate, to: outputRate)
            rate = outputRate
        }
        if let sirDB, var interference, !interference.isEmpty {
            if rate != sampleRate { interference = Channel.resample(interference, from: sampleRate, to: rate) }
            let offset = Int(rng.uniform() * Double(max(0, interference.count - y.count)))
            let slice = Array(interference[offset..<min(interference.count, offset + y.count)])
            Channel.mix(&y, interference: slice, sirDB: sirDB, signalPower: signalPower)
        }
        if let snrDB { Channel.addWhiteNoise(&y, snrDB: snrDB, signalPower: signalPower, rng: &rng) }
        if let clipLevel { Channel.clip(&y, level: clipLevel) }
        if quantize16 { Channel.quantize16(&y, rng: &rng) }
        return (y, rate)
    }
}
