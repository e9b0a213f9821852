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

/// ``Resampler/resample(_:ratio:)`` block by block, for signals of any length: feed the input in pieces with
/// ``process(_:)``, then call ``finish()``; the outputs joined are the same samples, bit for bit (the same
/// kernel and sums, output by output). Memory: the kernel's reach of input (about 100 samples at ratio >= 1).
///
/// One owner; not for concurrent use.
public struct StreamingResampler: Sendable {
    /// Output rate / input rate.
    public let ratio: Double
    private let scale: Double
    private let reach: Double
    /// Input samples kept, the first being input sample `base`.
    private var input: [Float] = []
    private var base = 0
    /// Input samples taken so far.
    private var received = 0
    /// Index of the next output sample.
    private var next = 0

    /// - Parameter ratio: output rate / input rate (positive, finite).
    /// - Precondition: `ratio` positive and finite.
    public init(ratio: Double) {
        precondition(ratio > 0 && ratio.isFinite, "resampling ratio must be positive")
        self.ratio = ratio
        scale = min(1, ratio) * Resampler.cutoff
        reach = Double(Resampler.halfWidth) / scale
    }

    /// Takes the next input samples; returns the output samples whose kernel they complete.
    /// - Parameter samples: the next samples of the signal.
    public mutating func process(_ samples: some Collection<Float>) -> [Float] {
        input += samples
        received += samples.count
        return produce(total: nil)
    }

    /// Ends the input: returns the remaining output samples (`Int((inputCount * ratio).rounded())` in all).
    public mutating func finish() -> [Float] {
        produce(total: received)
    }

    /// Outputs from `next` on: those whose last input sample has arrived, or, with `total`, all of them.
    private mutating func produce(total: Int?) -> [Float] {
        let outCount = total.map { $0 == 0 ? 0 : Int((Double($0) * ratio).rounded()) } ?? Int.max
        var y: [Float] = []
        let table = Resampler.table
        input.withUnsafeBufferPointer { kept in
            table.withUnsafeBufferPointer { kernel in
                while next < outCount {
                    let m = next
                    let t = Double(m) / ratio
                    let first = max(0, Int((t - reach).rounded(.up)))
                    let wanted = Int((t + reach).rounded(.down))
                    if total == nil && wanted >= received { break }
                    let last = min((total ?? received) - 1, wanted)
                    var value: Float = 0
                    if first <= last {
                        var acc: Float = 0
                        for k in first...last {
                            let position = abs(t - Double(k)) * scale * Double(Resampler.oversampling)
                            let index = Int(position)
                            let fraction = Float(position - Double(index))
                            guard index + 1 < kernel.count else { continue }
                            acc += kept[k - base] * (kernel[index] + fraction * (kernel[index + 1] - kernel[index]))
                        }
                        value = acc * Float(scale)
                    }
                    y.append(value)
                    next += 1
                }
            }
        }
        // Drop the input no later output reaches.
        let keepFrom = min(received, max(base, Int((Double(next) / ratio - reach).rounded(.up))))
        if keepFrom > base {
            input.removeFirst(keepFrom - base)
            base = keepFrom
        }
        if total != nil { input.removeAll(); base = received }
        return y
    }
}
