import RealModule

/// Windowed-sinc FIR design with a Kaiser window (Kaiser's formulas for length and beta).
public enum KaiserFIR {
    /// Zeroth-order modified Bessel function of the first kind, by its power series.
    static func besselI0(_ x: Double) -> Double {
        var sum = 1.0
        var term = 1.0
        let halfX = x / 2
        var k = 1.0
        while term > 1e-12 * sum {
            term *= (halfX / k) * (halfX / k)
            sum += term
            k += 1
        }
        return sum
    }

    /// Kaiser beta for a stopband attenuation (dB).
    public static func beta(attenuationDB a: Double) -> Double {
        if a > 50 { return 0.1102 * (a - 8.7) }
        if a >= 21 { return 0.5842 * Double.pow(a - 21, 0.4) + 0.07886 * (a - 21) }
        return 0
    }

    /// Odd number of taps for a transition width (fraction of the sample rate) and attenuation (dB).
    public static func tapCount(transitionWidth: Double, attenuationDB a: Double) -> Int {
        let n = Int(((a - 7.95) / (14.36 * transitionWidth)).rounded(.up)) + 1
        return n | 1
    }

    /// Low-pass taps with cut-off `cutoff` (fraction of the sample rate, 0 < cutoff < 0.5), unit DC gain,
    /// `taps` long (odd, so the delay is a whole number of samples: (taps - 1) / 2).
    public static func lowpass(cutoff: Double, taps: Int, attenuationDB: Double) -> [Float] {
        precondition(taps > 0 && cutoff > 0 && cutoff < 0.5)
        let b = beta(attenuationDB: attenuationDB)
        let i0b = besselI0(b)
        let center = Double(taps - 1) / 2
        var h = [Double](repeating: 0, count: taps)
        for n in 0..<taps {
            let m = Double(n) - center
            let sinc = m == 0 ? 2 * cutoff : Double.sin(2 * Double.pi * cutoff * m) / (Double.pi * m)
            let r = center > 0 ? m / center : 0
            h[n] = sinc * besselI0(b * max(0, 1 - r * r).squareRoot()) / i0b
        }
        let sum = h.reduce(0, +)
        return h.map { Float($0 / sum) }
    }
}
