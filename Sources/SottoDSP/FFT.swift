#if !SOTTO_PORTABLE_FFT
import CFFTW
import Synchronization
#endif
#if canImport(Glibc)
import Glibc
#elseif hasFeature(Embedded)
@_extern(c, "sin") func sin(_ x: Double) -> Double
@_extern(c, "cos") func cos(_ x: Double) -> Double
#endif

// FFTW backs ComplexFFT, RealFFT and InverseRealFFT; with SOTTO_PORTABLE_FFT (the WebAssembly build,
// scripts/build-wasm) PortableFFT.swift does, in Swift. The rest of this file is shared.
#if !SOTTO_PORTABLE_FFT

/// FFTW's planner is not thread-safe: every plan creation and destruction goes through this lock
/// (only `fftwf_execute*` may run concurrently), which also holds how plans are made.
let fftwPlannerLock = Mutex(FFTPlanner())

/// How transforms are planned: from FFTW's estimate of the fastest algorithm (`FFTW_ESTIMATE`), or, where
/// FFTW has wisdom for the transform (measured plans: see ``FFTWisdom``), from that wisdom. Either way
/// without timing anything, so a machine plans the same transforms the same way every run. Only
/// ``FFTWisdom/measuring(_:)`` times them.
struct FFTPlanner {
    /// FFTW planner flags for the next plan.
    var flags = UInt32(FFTW_ESTIMATE)
    private var systemWisdomRead = false

    /// A plan made by `make` with the current flags, under the planner lock, after `prepare()`; nil when FFTW
    /// could not make one (out of memory).
    static func plan(_ make: (_ flags: UInt32) -> OpaquePointer?) -> OpaquePointer? {
        fftwPlannerLock.withLock { planner in
            planner.prepare()
            return make(planner.flags)
        }
    }

    /// Before the first plan: reads the system's wisdom (`FFTWisdom.systemPath`) and the user's
    /// (`FFTWisdom.userPath`), where there is any.
    mutating func prepare() {
        guard !systemWisdomRead else { return }
        systemWisdomRead = true
        _ = fftwf_import_system_wisdom()
        if let path = FFTWisdom.userPath(), access(path, R_OK) == 0 { _ = fftwf_import_wisdom_from_filename(path) }
    }
}

/// FFTW's wisdom: measured plans, which FFTW uses in place of its estimates (on this machine: a 4 096-point
/// real transform 1.17 -> 0.89 ns a point, though the decoder now takes its block spectrum from a complex
/// one, `PartialRealFFT`; 512-point complex ones 0.69 -> 0.57, 432-point ones 1.48 ->
/// 0.98). Every plan made in the process uses the system's wisdom (``systemPath``) and the user's
/// (``userPath(environment:)``; both read before the first plan; a file FFTW does not accept is
/// ignored), and whatever was measured since. Wisdom changes which algorithm runs, so results move
/// within float round-off: the same on every run of one machine, as without it.
public enum FFTWisdom {
    /// Where FFTW reads the system's single-precision wisdom from (`fftwf_import_system_wisdom`).
    public static let systemPath = "/etc/fftw/wisdomf"
    /// Environment variable naming the user's wisdom file, in place of the default one (``userPath(environment:)``).
    public static let environmentVariable = "SOTTO_FFTW_WISDOM"

    /// The user's wisdom file, read after the system's and written by `sotto tune`: the file named by
    /// ``environmentVariable`` when set, else `$XDG_CACHE_HOME/sotto/fftw-wisdomf` (by default
    /// `~/.cache/sotto/fftw-wisdomf`); nil without a home directory.
    /// - Parameter environment: the environment to read; nil for the process's.
    /// - Returns: the path, or nil.
    public static func userPath(environment: [String: String]? = nil) -> String? {
        func variable(_ name: String) -> String? {
            if let environment { return environment[name] }
            return getenv(name).map { String(cString: $0) }
        }
        if let path = variable(environmentVariable), !path.isEmpty { return path }
        if let cache = variable("XDG_CACHE_HOME"), cache.hasPrefix("/") { return cache + "/sotto/fftw-wisdomf" }
        guard let home = variable("HOME"), home.hasPrefix("/") else { return nil }
        return home + "/.cache/sotto/fftw-wisdomf"
    }

    /// Plans every transform made while `body` runs by timing FFTW's candidates (`FFTW_MEASURE`: tens of
    /// milliseconds a transform, the first time a size is planned), adding them to the process's wisdom.
    /// Transforms made meanwhile on other threads are measured too. Their buffers hold zeros afterwards.
    public static func measuring<T>(_ body: () throws -> T) rethrows -> T {
        fftwPlannerLock.withLock { $0.prepare(); $0.flags = UInt32(FFTW_MEASURE) }
        defer { fftwPlannerLock.withLock { $0.flags = UInt32(FFTW_ESTIMATE) } }
        return try body()
    }

    /// The process's wisdom in FFTW's text format: what was read and measured so far.
    public static func exported() -> String {
        fftwPlannerLock.withLock { planner -> String in
            planner.prepare()
            guard let text = fftwf_export_wisdom_to_string() else { return "" }
            defer { free(text) }
            return String(cString: text)
        }
    }
}
#endif

/// A transform FFTW could not make: its buffers could not be allocated, or no plan made (out of memory,
/// or a size beyond what FFTW takes).
public struct FFTError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Points of the transform asked for.
    public let size: Int
    /// What failed.
    public let description: String

    static func allocation(_ size: Int) -> FFTError {
        FFTError(size: size, description: "cannot allocate the buffers of a \(size)-point FFT (out of memory)")
    }

    static func planning(_ size: Int) -> FFTError {
        FFTError(size: size, description: "FFTW cannot plan a \(size)-point FFT (out of memory?)")
    }

    /// Checks a size before any allocation: positive and within FFTW's 32-bit sizes.
    static func check(_ size: Int) throws(FFTError) {
        guard size > 0, size <= Int(Int32.max) / 2 else {
            throw FFTError(size: size, description: "a \(size)-point FFT is outside the sizes FFTW takes (1...\(Int(Int32.max) / 2))")
        }
    }
}

/// Ends the program for a transform of a size fixed by the code (not by its input) that cannot be made: as
/// Swift does when any other allocation fails.
func fixedSizeFailure(_ error: FFTError) -> Never {
    preconditionFailure("\(error)")
}

/// The direction of a complex transform. Both directions are unnormalised (FFTW's convention):
/// a forward transform followed by an inverse one multiplies the data by the size.
public enum FFTDirection: Sendable {
    case forward
    case inverse
}
#if !SOTTO_PORTABLE_FFT

/// A complex single-precision FFT of a fixed size, planned once (FFTW, without timing: see `FFTPlanner`,
/// so results are repeatable) and executed many times on its own aligned buffers.
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

    /// A transform whose size is fixed by the program: ends it if FFTW cannot allocate or plan it, as Swift
    /// does when any allocation fails. For a size that depends on the input, use ``init(checkedSize:direction:)``.
    /// - Parameters:
    ///   - size: complex points (positive).
    ///   - direction: forward or inverse.
    public convenience init(size: Int, direction: FFTDirection) {
        do { try self.init(checkedSize: size, direction: direction) } catch { fixedSizeFailure(error) }
    }

    /// A transform of `size` complex points, or an error when FFTW cannot allocate its buffers or plan it.
    /// - Parameters:
    ///   - size: complex points (positive).
    ///   - direction: forward or inverse.
    public init(checkedSize size: Int, direction: FFTDirection) throws(FFTError) {
        try FFTError.check(size)
        self.size = size
        self.direction = direction
        guard let inRaw = fftwf_alloc_complex(size) else { throw .allocation(size) }
        guard let outRaw = fftwf_alloc_complex(size) else { fftwf_free(inRaw); throw .allocation(size) }
        let sign: Int32 = direction == .forward ? FFTW_FORWARD : FFTW_BACKWARD
        guard let made = FFTPlanner.plan({ flags in fftwf_plan_dft_1d(Int32(size), inRaw, outRaw, sign, flags) }) else {
            fftwf_free(inRaw)
            fftwf_free(outRaw)
            throw .planning(size)
        }
        plan = made
        // After planning: a measured plan overwrites both buffers.
        let inFloats = UnsafeMutableRawPointer(inRaw).bindMemory(to: Float.self, capacity: 2 * size)
        let outFloats = UnsafeMutableRawPointer(outRaw).bindMemory(to: Float.self, capacity: 2 * size)
        inFloats.initialize(repeating: 0, count: 2 * size)
        outFloats.initialize(repeating: 0, count: 2 * size)
        input = UnsafeMutableBufferPointer(start: inFloats, count: 2 * size)
        output = UnsafeMutableBufferPointer(start: outFloats, count: 2 * size)
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

    /// A transform whose size is fixed by the program: ends it if FFTW cannot allocate or plan it, as Swift
    /// does when any allocation fails. For a size that depends on the input, use ``init(checkedSize:)``.
    /// - Parameter size: real input points (positive).
    public convenience init(size: Int) {
        do { try self.init(checkedSize: size) } catch { fixedSizeFailure(error) }
    }

    /// A transform of `size` real points, or an error when FFTW cannot allocate its buffers or plan it.
    /// - Parameter size: real input points (positive).
    public init(checkedSize size: Int) throws(FFTError) {
        try FFTError.check(size)
        self.size = size
        let bins = size / 2 + 1
        guard let inFloats = fftwf_alloc_real(size) else { throw .allocation(size) }
        guard let outRaw = fftwf_alloc_complex(bins) else { fftwf_free(inFloats); throw .allocation(size) }
        guard let made = FFTPlanner.plan({ flags in fftwf_plan_dft_r2c_1d(Int32(size), inFloats, outRaw, flags) }) else {
            fftwf_free(inFloats)
            fftwf_free(outRaw)
            throw .planning(size)
        }
        plan = made
        // After planning: a measured plan overwrites both buffers.
        let outFloats = UnsafeMutableRawPointer(outRaw).bindMemory(to: Float.self, capacity: 2 * bins)
        inFloats.initialize(repeating: 0, count: size)
        outFloats.initialize(repeating: 0, count: 2 * bins)
        input = UnsafeMutableBufferPointer(start: inFloats, count: size)
        output = UnsafeMutableBufferPointer(start: outFloats, count: 2 * bins)
    }

    /// Transforms `input` into `output`.
    public func execute() { fftwf_execute(plan) }

    deinit {
        fftwPlannerLock.withLock { _ in fftwf_destroy_plan(plan) }
        fftwf_free(input.baseAddress)
        fftwf_free(output.baseAddress)
    }
}
#endif

/// The spectrum of a real block at chosen bins only: FFTW's complex transform of the block taken as
/// `size / 2` complex values (even samples the real parts, odd ones the imaginary parts), then, for the
/// bins asked for, the two half-spectra joined into the block's own bins. Same layout and scale as
/// `RealFFT` (bins 0...size/2, interleaved re, im, unnormalised); bins not asked for are left as they were.
///
/// For a band extractor that reads a third of the bins: FFTW's real transform of 4 096 points (planned
/// without timing, as every plan here) cost 4.6 us, 60 % of it joining its half-spectra over every bin,
/// against 1.7 us for the complex transform of 2 048 points (measured in C on this machine). One owner; not
/// for concurrent use.
public final class PartialRealFFT {
    /// Number of real input points (even).
    public let size: Int
    /// `size` Floats: the real block (also the complex transform's interleaved input).
    public let input: UnsafeMutableBufferPointer<Float>
    /// `2 * (size / 2 + 1)` Floats, interleaved (re, im): the bins of `bins` after `execute()`, every bin
    /// after `executeAll()`.
    public let output: UnsafeMutableBufferPointer<Float>
    /// The bins `execute()` computes: sorted, disjoint, non-empty ranges within 0...size/2.
    public let bins: [Range<Int>]
    private let half: ComplexFFT
    /// Per bin k, h_k = -i W^k / 2 (W = exp(-2 pi i / size)) in the layout of the interleaved complex
    /// product (as `StreamingCorrelator`'s spectra): `twiddleReal[2k] = twiddleReal[2k+1] = Re h_k`,
    /// `twiddleImaginary[2k] = -Im h_k`, `twiddleImaginary[2k+1] = Im h_k`.
    private let twiddleReal: UnsafeMutableBufferPointer<Float>
    private let twiddleImaginary: UnsafeMutableBufferPointer<Float>

    /// A transform whose size is fixed by the program: ends it if FFTW cannot allocate or plan it (see
    /// ``init(checkedSize:bins:)``).
    /// - Parameters:
    ///   - size: real input points (even, positive).
    ///   - bins: the bins `execute()` computes (any ranges; clipped to 0...size/2 and merged).
    /// - Precondition: `size` even and positive.
    public convenience init(size: Int, bins: [Range<Int>]) {
        do { try self.init(checkedSize: size, bins: bins) } catch { fixedSizeFailure(error) }
    }

    /// The transform, or an error when FFTW cannot allocate its buffers or plan it.
    /// - Parameters:
    ///   - size: real input points (even, positive).
    ///   - bins: the bins `execute()` computes (any ranges; clipped to 0...size/2 and merged).
    /// - Precondition: `size` even and positive.
    public init(checkedSize size: Int, bins: [Range<Int>]) throws(FFTError) {
        precondition(size > 0 && size % 2 == 0, "a partial real FFT needs an even, positive size")
        self.size = size
        let binCount = size / 2 + 1
        var merged: [Range<Int>] = []
        for range in bins.map({ max(0, $0.lowerBound)..<min(binCount, $0.upperBound) }).filter({ !$0.isEmpty })
            .sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        self.bins = merged
        half = try ComplexFFT(checkedSize: size / 2, direction: .forward)
        input = UnsafeMutableBufferPointer(start: half.input.baseAddress!, count: size)
        output = .allocate(capacity: 2 * binCount)
        output.initialize(repeating: 0)
        twiddleReal = .allocate(capacity: 2 * binCount)
        twiddleImaginary = .allocate(capacity: 2 * binCount)
        for k in 0..<binCount {
            // h_k = -i (cos t - i sin t) / 2 = (-sin t - i cos t) / 2, t = 2 pi k / size.
            let angle = 2 * Double.pi * Double(k) / Double(size)
            let real = Float(-0.5 * sin(angle)), imaginary = Float(-0.5 * cos(angle))
            twiddleReal[2 * k] = real
            twiddleReal[2 * k + 1] = real
            twiddleImaginary[2 * k] = -imaginary
            twiddleImaginary[2 * k + 1] = imaginary
        }
    }

    deinit {
        output.deallocate()
        twiddleReal.deallocate()
        twiddleImaginary.deallocate()
    }

    /// Transforms `input` into `output` at `bins`.
    public func execute() {
        half.execute()
        for range in bins { join(range) }
    }

    /// Transforms `input` into `output` at every bin.
    public func executeAll() {
        half.execute()
        join(0..<(size / 2 + 1))
    }

    /// Bins `range` of the real block from the half-length transform Z: with A = Z[k] and B = conj(Z[M - k])
    /// (M = size / 2, indices mod M), the even samples' spectrum is (A + B) / 2 and the odd ones' (A - B) / 2i,
    /// so X[k] = (A + B) / 2 + h_k (A - B). Four bins at a time where Z[k] and Z[M - k] are both inside 1..<M.
    private func join(_ range: Range<Int>) {
        typealias Lanes = SIMD8<Float>
        let m = size / 2
        let z = UnsafePointer(half.output.baseAddress!), x = output.baseAddress!
        let hr = UnsafePointer(twiddleReal.baseAddress!), hi = UnsafePointer(twiddleImaginary.baseAddress!)
        @inline(__always) func joinOne(_ k: Int) {
            let a = k % m, b = (m - k) % m
            let ar = z[2 * a], ai = z[2 * a + 1], br = z[2 * b], bi = -z[2 * b + 1]
            let sr = ar + br, si = ai + bi, dr = ar - br, di = ai - bi
            x[2 * k] = 0.5 * sr + hr[2 * k] * dr + hi[2 * k] * di
            x[2 * k + 1] = 0.5 * si + hr[2 * k + 1] * di + hi[2 * k + 1] * dr
        }
        var k = range.lowerBound
        while k < range.upperBound && k < 1 { joinOne(k); k += 1 }
        // Z[k..<k+4] forwards and Z[m-k-3...m-k] backwards: both inside 1..<m while k + 3 < m.
        let conjugate = Lanes(1, -1, 1, -1, 1, -1, 1, -1)
        while k + 4 <= range.upperBound && k + 3 < m {
            let a = UnsafeRawPointer(z + 2 * k).loadUnaligned(as: Lanes.self)
            let reversed = UnsafeRawPointer(z + 2 * (m - k - 3)).loadUnaligned(as: Lanes.self)
            let b = Lanes(reversed[6], reversed[7], reversed[4], reversed[5], reversed[2], reversed[3], reversed[0], reversed[1]) * conjugate
            let s = a + b, d = a - b
            let swapped = Lanes(d[1], d[0], d[3], d[2], d[5], d[4], d[7], d[6])
            let r = UnsafeRawPointer(hr + 2 * k).loadUnaligned(as: Lanes.self)
            let i = UnsafeRawPointer(hi + 2 * k).loadUnaligned(as: Lanes.self)
            UnsafeMutableRawPointer(x + 2 * k).storeBytes(of: 0.5 * s + r * d + i * swapped, as: Lanes.self)
            k += 4
        }
        while k < range.upperBound { joinOne(k); k += 1 }
    }
}
#if !SOTTO_PORTABLE_FFT

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

    /// A transform whose size is fixed by the program: ends it if FFTW cannot allocate or plan it, as Swift
    /// does when any allocation fails. For a size that depends on the input, use ``init(checkedSize:)``.
    /// - Parameter size: real output points (positive).
    public convenience init(size: Int) {
        do { try self.init(checkedSize: size) } catch { fixedSizeFailure(error) }
    }

    /// A transform to `size` real points, or an error when FFTW cannot allocate its buffers or plan it.
    /// - Parameter size: real output points (positive).
    public init(checkedSize size: Int) throws(FFTError) {
        try FFTError.check(size)
        self.size = size
        let bins = size / 2 + 1
        guard let inRaw = fftwf_alloc_complex(bins) else { throw .allocation(size) }
        guard let outFloats = fftwf_alloc_real(size) else { fftwf_free(inRaw); throw .allocation(size) }
        guard let made = FFTPlanner.plan({ flags in fftwf_plan_dft_c2r_1d(Int32(size), inRaw, outFloats, flags) }) else {
            fftwf_free(inRaw)
            fftwf_free(outFloats)
            throw .planning(size)
        }
        plan = made
        // After planning: a measured plan overwrites both buffers.
        let inFloats = UnsafeMutableRawPointer(inRaw).bindMemory(to: Float.self, capacity: 2 * bins)
        inFloats.initialize(repeating: 0, count: 2 * bins)
        outFloats.initialize(repeating: 0, count: size)
        input = UnsafeMutableBufferPointer(start: inFloats, count: 2 * bins)
        output = UnsafeMutableBufferPointer(start: outFloats, count: size)
    }

    /// Transforms `input` into `output` (destroying `input`).
    public func execute() { fftwf_execute(plan) }

    deinit {
        fftwPlannerLock.withLock { _ in fftwf_destroy_plan(plan) }
        fftwf_free(input.baseAddress)
        fftwf_free(output.baseAddress)
    }
}
#endif

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
