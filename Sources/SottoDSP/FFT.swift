import CFFTW
import Synchronization

/// FFTW's planner is not thread-safe: every plan creation and destruction goes through this lock
/// (only `fftwf_execute*` may run concurrently).
let fftwPlannerLock = Mutex<Void>(())

/// The direction of a complex transform. Both directions are unnormalised (FFTW's convention):
/// a forward transform followed by an inverse one multiplies the data by the size.
public enum FFTDirection: Sendable {
    case forward
    case inverse
}

/// A complex single-precision FFT of a fixed size, planned once (FFTW, `FFTW_ESTIMATE`, so results are
/// repeatable) and executed many times on its own aligned buffers.
///
/// `input` and `output` hold `size` complex values interleaved as (re, im) Floats. The transform is
/// out of place. One owner; not for concurrent use.
public final class ComplexFFT {
    /// Number of complex points.
    public let size: Int
    public let direction: FFTDirection
    /// `2 * size` Floats, interleaved (re, im).
    public let input: UnsafeMutableBufferPointer<Float>
    /// `2 * size` Floats, interleaved (re, im).
    public let output: UnsafeMutableBufferPointer<Float>
    private let plan: OpaquePointer

    /// - Precondition: `size > 0` (a programming error otherwise, never input-driven).
    public init(size: Int, direction: FFTDirection) {
        precondition(size > 0, "FFT size must be positive")
        self.size = size
        self.direction = direction
        let inRaw = fftwf_alloc_complex(size)!
        let outRaw = fftwf_alloc_complex(size)!
        let inFloats = UnsafeMutableRawPointer(inRaw).bindMemory(to: Float.self, capacity: 2 * size)
        let outFloats = UnsafeMutableRawPointer(outRaw).bindMemory(to: Float.self, capacity: 2 * size)
        inFloats.initialize(repeating: 0, count: 2 * size)
        outFloats.initialize(repeating: 0, count: 2 * size)
        input = UnsafeMutableBufferPointer(start: inFloats, count: 2 * size)
        output = UnsafeMutableBufferPointer(start: outFloats, count: 2 * size)
        let sign: Int32 = direction == .forward ? FFTW_FORWARD : FFTW_BACKWARD
        var made: OpaquePointer?
        fftwPlannerLock.withLock { _ in
            made = fftwf_plan_dft_1d(Int32(size), inRaw, outRaw, sign, FFTW_ESTIMATE)
        }
        plan = made!
    }

    /// Transforms `input` into `output`.
    @inlinable public func execute() { executePlan() }

    @usableFromInline func executePlan() { fftwf_execute(plan) }

    deinit {
        fftwPlannerLock.withLock { _ in fftwf_destroy_plan(plan) }
        fftwf_free(input.baseAddress)
        fftwf_free(output.baseAddress)
    }
}

/// A real-to-complex forward FFT of a fixed size: `size` real inputs, `size / 2 + 1` complex outputs
/// (interleaved re, im). Unnormalised. One owner; not for concurrent use.
public final class RealFFT {
    /// Number of real input points.
    public let size: Int
    /// `size` Floats.
    public let input: UnsafeMutableBufferPointer<Float>
    /// `2 * (size / 2 + 1)` Floats, interleaved (re, im).
    public let output: UnsafeMutableBufferPointer<Float>
    private let plan: OpaquePointer

    /// - Precondition: `size > 0`.
    public init(size: Int) {
        precondition(size > 0, "FFT size must be positive")
        self.size = size
        let bins = size / 2 + 1
        let inFloats = fftwf_alloc_real(size)!
        let outRaw = fftwf_alloc_complex(bins)!
        let outFloats = UnsafeMutableRawPointer(outRaw).bindMemory(to: Float.self, capacity: 2 * bins)
        inFloats.initialize(repeating: 0, count: size)
        outFloats.initialize(repeating: 0, count: 2 * bins)
        input = UnsafeMutableBufferPointer(start: inFloats, count: size)
        output = UnsafeMutableBufferPointer(start: outFloats, count: 2 * bins)
        var made: OpaquePointer?
        fftwPlannerLock.withLock { _ in
            made = fftwf_plan_dft_r2c_1d(Int32(size), inFloats, outRaw, FFTW_ESTIMATE)
        }
        plan = made!
    }

    /// Transforms `input` into `output`.
    public func execute() { fftwf_execute(plan) }

    deinit {
        fftwPlannerLock.withLock { _ in fftwf_destroy_plan(plan) }
        fftwf_free(input.baseAddress)
        fftwf_free(output.baseAddress)
    }
}

/// A complex-to-real inverse FFT of a fixed size: `size / 2 + 1` complex inputs (interleaved), `size`
/// real outputs. Unnormalised (multiply by `1 / size` to invert `RealFFT`). FFTW's c2r transform
/// destroys its input. One owner; not for concurrent use.
public final class InverseRealFFT {
    /// Number of real output points.
    public let size: Int
    /// `2 * (size / 2 + 1)` Floats, interleaved (re, im). Overwritten by `execute()`.
    public let input: UnsafeMutableBufferPointer<Float>
    /// `size` Floats.
    public let output: UnsafeMutableBufferPointer<Float>
    private let plan: OpaquePointer

    /// - Precondition: `size > 0`.
    public init(size: Int) {
        precondition(size > 0, "FFT size must be positive")
        self.size = size
        let bins = size / 2 + 1
        let inRaw = fftwf_alloc_complex(bins)!
        let inFloats = UnsafeMutableRawPointer(inRaw).bindMemory(to: Float.self, capacity: 2 * bins)
        let outFloats = fftwf_alloc_real(size)!
        inFloats.initialize(repeating: 0, count: 2 * bins)
        outFloats.initialize(repeating: 0, count: size)
        input = UnsafeMutableBufferPointer(start: inFloats, count: 2 * bins)
        output = UnsafeMutableBufferPointer(start: outFloats, count: size)
        var made: OpaquePointer?
        fftwPlannerLock.withLock { _ in
            made = fftwf_plan_dft_c2r_1d(Int32(size), inRaw, outFloats, FFTW_ESTIMATE)
        }
        plan = made!
    }

    /// Transforms `input` into `output` (destroying `input`).
    public func execute() { fftwf_execute(plan) }

    deinit {
        fftwPlannerLock.withLock { _ in fftwf_destroy_plan(plan) }
        fftwf_free(input.baseAddress)
        fftwf_free(output.baseAddress)
    }
}

/// The smallest size >= `n` of the form 2^a 3^b 5^c, for which FFTW is fastest.
public func fastFFTSize(atLeast n: Int) -> Int {
    var candidate = max(1, n)
    while !isSmoothFFTSize(candidate) { candidate += 1 }
    return candidate
}

/// True when `n` (positive) is of the form 2^a 3^b 5^c.
func isSmoothFFTSize(_ n: Int) -> Bool {
    var m = n
    for p in [2, 3, 5] { while m % p == 0 { m /= p } }
    return m == 1
}
