import RealModule

/// A rectangular room simulated by the image-source method (Allen and Berkley 1979): every wall reflects
/// with one pressure coefficient, chosen so that Sabine's formula gives `rt60`; each image is placed at
/// its delay with a windowed-sinc fractional delay, at amplitude (direct distance / path) x
/// coefficient^reflections, so that the direct path has gain 1. No air absorption and no diffusion: the
/// tail is as long at 19 kHz as at 1 kHz, harsher for the modem than ``Room`` (whose RT60 falls with
/// frequency as measured rooms do). The decay is slower than Sabine's diffuse field: the hall of 20 x 12 x
/// 6 m at a nominal 0.9 s decays as 1.17 s between -5 and -25 dB (Schroeder), its image sources along the
/// length meeting fewer walls per metre.
public struct ShoeboxRoom: Sendable, Hashable {
    /// Length, width and height (m).
    public var size: SIMD3<Double>
    /// The speaker's position (m), inside the room.
    public var source: SIMD3<Double>
    /// The microphone's position (m), inside the room.
    public var microphone: SIMD3<Double>
    /// Reverberation time (s), the same at every frequency.
    public var rt60: Double

    /// - Parameters:
    ///   - size: length, width and height (m).
    ///   - source: the speaker's position (m).
    ///   - microphone: the microphone's position (m).
    ///   - rt60: reverberation time (s).
    public init(size: SIMD3<Double>, source: SIMD3<Double>, microphone: SIMD3<Double>, rt60: Double) {
        self.size = size
        self.source = source
        self.microphone = microphone
        self.rt60 = rt60
    }

    /// The hall of the receiver issue: 20 x 12 x 6 m, RT60 0.9 s.
    public static let hallSize: SIMD3<Double> = [20, 12, 6]
    /// RT60 of the hall (s).
    public static let hallRT60 = 0.9

    /// Speed of sound (m/s).
    public static let speedOfSound = 343.0
    /// Half-length of the fractional-delay kernel (samples).
    static let kernelHalfWidth = 8

    /// Source to microphone distance (m).
    public var distance: Double {
        let d = source - microphone
        return (d * d).sum().squareRoot()
    }

    /// Every wall's pressure reflection coefficient: sqrt(1 - absorption), the absorption from Sabine's
    /// formula RT60 = 24 ln(10) V / (c S absorption).
    public var reflectionCoefficient: Double {
        let volume = size.x * size.y * size.z
        let surface = 2 * (size.x * size.y + size.y * size.z + size.x * size.z)
        let absorption = min(1, 24 * Double.log(10) * volume / (Self.speedOfSound * surface * rt60))
        return (1 - absorption).squareRoot()
    }

    /// A source and microphone `distance` (m) apart at a random horizontal bearing, both at least 1 m from
    /// every wall and 1.2-1.8 m high, drawn from `rng`.
    /// - Parameters:
    ///   - size: length, width and height (m), each more than 2 m and more than 2 m + `distance` along x or y.
    ///   - rt60: reverberation time (s).
    ///   - distance: source to microphone (m).
    ///   - rng: the random positions' generator.
    public static func random(size: SIMD3<Double>, rt60: Double, distance: Double, rng: inout SeededRandom) -> ShoeboxRoom {
        let margin = 1.0
        while true {
            let s: SIMD3<Double> = [margin + rng.uniform() * (size.x - 2 * margin),
                                    margin + rng.uniform() * (size.y - 2 * margin), 1.2 + 0.6 * rng.uniform()]
            let bearing = 2 * Double.pi * rng.uniform()
            let height = 1.2 + 0.6 * rng.uniform()
            let dz = height - s.z
            let across = max(0, distance * distance - dz * dz).squareRoot()
            let m: SIMD3<Double> = [s.x + across * Double.cos(bearing), s.y + across * Double.sin(bearing), height]
            if m.x >= margin, m.x <= size.x - margin, m.y >= margin, m.y <= size.y - margin {
                return ShoeboxRoom(size: size, source: s, microphone: m, rt60: rt60)
            }
        }
    }

    /// The impulse response at `sampleRate` (Hz), from time 0 (the direct path arrives at distance / c),
    /// until paths 1.2 RT60 longer than the direct one (faded out over the last 0.2 RT60).
    /// - Parameter sampleRate: the response's rate (Hz).
    public func impulseResponse(sampleRate: Double) -> [Float] {
        let c = Self.speedOfSound
        let direct = distance
        let fadeStart = direct + c * rt60, longest = direct + c * 1.2 * rt60
        let half = Self.kernelHalfWidth
        let length = Int((longest / c * sampleRate).rounded(.up)) + 2 * half + 1
        var h = [Double](repeating: 0, count: length)
        let beta = reflectionCoefficient
        let logBeta = Double.log(max(beta, 1e-12))
        // Image-source order bounds per axis: an image m cells away is at least 2 |m| L - L away.
        let reach = SIMD3<Int>(Int((longest / (2 * size.x)).rounded(.up)) + 1,
                               Int((longest / (2 * size.y)).rounded(.up)) + 1,
                               Int((longest / (2 * size.z)).rounded(.up)) + 1)
        // Per axis: the images' offsets from the microphone and their reflection counts.
        func axis(_ a: Int) -> [(offset: Double, reflections: Int)] {
            var out: [(Double, Int)] = []
            for m in -reach[a]...reach[a] {
                for q in 0...1 {
                    let image = Double(1 - 2 * q) * source[a] + 2 * Double(m) * size[a]
                    out.append((image - microphone[a], abs(m - q) + abs(m)))
                }
            }
            return out
        }
        let xs = axis(0), ys = axis(1), zs = axis(2)
        var kernel = [Double](repeating: 0, count: 2 * half)
        for x in xs {
            for y in ys {
                let xy = x.offset * x.offset + y.offset * y.offset
                guard xy <= longest * longest else { continue }
                for z in zs {
                    let path = (xy + z.offset * z.offset).squareRoot()
                    guard path <= longest else { continue }
                    var gain = direct / max(path, 1e-3) * Double.exp(logBeta * Double(x.reflections + y.reflections + z.reflections))
                    if path > fadeStart { gain *= 0.5 + 0.5 * Double.cos(Double.pi * (path - fadeStart) / (longest - fadeStart)) }
                    let delay = path / c * sampleRate
                    let whole = Int(delay.rounded(.down)), fraction = delay - Double(whole)
                    // Hann-windowed sinc over 2 x half taps around the delay.
                    var sum = 0.0
                    for k in 0..<(2 * half) {
                        let t = Double(k - half + 1) - fraction
                        let sinc = abs(t) < 1e-9 ? 1 : Double.sin(Double.pi * t) / (Double.pi * t)
                        let window = 0.5 + 0.5 * Double.cos(Double.pi * t / Double(half))
                        kernel[k] = sinc * window
                        sum += kernel[k]
                    }
                    let base = whole - half + 1
                    for k in 0..<(2 * half) where base + k >= 0 && base + k < length {
                        h[base + k] += gain * kernel[k] / sum
                    }
                }
            }
        }
        return h.map { Float($0) }
    }
}
