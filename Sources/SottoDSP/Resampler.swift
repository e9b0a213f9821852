import RealModule

/// Arbitrary-ratio resampling with a Kaiser-windowed sinc kernel (table-driven, linear interpolation
/// between table points): pass band to about 0.47 of the lower rate, stop band about 90 dB down.
public enum Resampler {
    /// Kernel half-width in input samples (at ratio >= 1).
    static let halfWidth = 48
    /// Kernel table points per input sample.
    static let oversampling = 512
    static let beta = KaiserFIR.beta(attenuationDB: 95)
    /// Cut-off as a fraction of the lower Nyquist frequency.
    static let cutoff = 0.95

    static let table: [Float] = {
        let n = halfWidth * oversampling
        let i0b = KaiserFIR.besselI0(beta)
        return (0...n + 1).map { i -> Float in
            let t = Double(i) / Double(oversampling)
            guard t < Double(halfWidth) else { return 0 }
            let sinc = t == 0 ? 1 : Double.sin(Double.pi * t) / (Double.pi * t)
            let r = t / Double(halfWidth)
            return Float(sinc * KaiserFIR.besselI0(beta * (1 - r * r).squareRoot()) / i0b)
        }
    }()

    /// Resamples `x` by `ratio` = output rate / input rate (> 0); the output has about x.count * ratio samples.
    public static func resample(_ x: [Float], ratio: Double) -> [Float] {
        precondition(ratio > 0 && ratio.isFinite, "resampling ratio must be positive")
        guard !x.isEmpty else { return [] }
        let outCount = Int((Double(x.count) * ratio).rounded())
        // Below 1, the kernel widens to filter at the output's Nyquist frequency.
        let scale = min(1, ratio) * cutoff
        let reach = Double(halfWidth) / scale
        let table = Self.table
        var y = [Float](repeating: 0, count: outCount)
        x.withUnsafeBufferPointer { input in
            table.withUnsafeBufferPointer { kernel in
                for m in 0..<outCount {
                    let t = Double(m) / ratio
                    let first = max(0, Int((t - reach).rounded(.up)))
                    let last = min(input.count - 1, Int((t + reach).rounded(.down)))
                    guard first <= last else { continue }
                    var acc: Float = 0
                    for k in first...last {
                        let position = abs(t - Double(k)) * scale * Double(oversampling)
                        let index = Int(position)
                        let fraction = Float(position - Double(index))
                        guard index + 1 < kernel.count else { continue }
                        acc += input[k] * (kernel[index] + fraction * (kernel[index + 1] - kernel[index]))
                    }
                    y[m] = acc * Float(scale)
                }
            }
        }
        return y
    }
}
