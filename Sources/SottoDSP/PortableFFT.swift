#if canImport(Glibc)
import Glibc
#endif

/// A complex single-precision FFT written in Swift, for where FFTW is not (the WebAssembly build,
/// `scripts/build-wasm`, compiles SottoDSP with `SOTTO_PORTABLE_FFT`, and ``ComplexFFT``, ``RealFFT`` and
/// ``InverseRealFFT`` run on it). Natively it is compiled too, so that its tests compare it bin by bin with
/// FFTW; the native transforms stay FFTW's.
///
/// Why written here: FFTW does not build for `wasm32-unknown-none-wasm` with Embedded Swift (no libc threads, its
/// codelets are C we would vendor), no FFT package is among the Swift packages this project may use (the machines'
/// offline registry holds none), npm is not reachable, and Debian ships KISS FFT as a built library and headers
/// only (no `deb-src` sources to compile to wasm). The receiver needs a handful of sizes, all 2^a 3^b 5^c, so a
/// Stockham FFT of those radices is small (this file) and is checked against FFTW natively: complex transforms
/// of every smooth size up to 16 384 and the real forward and inverse transforms the wasm `RealFFT` and
/// `InverseRealFFT` run (`PortableFFTTests`).
///
/// Stockham's self-sorting algorithm (decimation in frequency, out of place between two buffers, no bit
/// reversal), one pass per factor of the size: radix 4, 2, 3 and 5 by hand-written butterflies (the
/// receiver's sizes are all 2^a 3^b 5^c: `fastFFTSize`), any other prime factor by a direct DFT of that
/// radix (correct, O(n p)). Twiddles computed in Double once, stored as Float. Same convention as FFTW:
/// unnormalised, forward with exp(-2 pi i jk / n). `input` and `output` hold `size` complex values
/// interleaved (re, im). One owner; not for concurrent use.
final class PortableFFT {
    /// Number of complex points.
    let size: Int
    let direction: FFTDirection
    /// `2 * size` Floats, interleaved (re, im).
    let input: UnsafeMutableBufferPointer<Float>
    /// `2 * size` Floats, interleaved (re, im).
    let output: UnsafeMutableBufferPointer<Float>
    /// Two work buffers of `2 * size` Floats: the passes between the first and the last go back and forth between them.
    private let work: (UnsafeMutableBufferPointer<Float>, UnsafeMutableBufferPointer<Float>)
    /// The passes, in order: radix and where its twiddles start in `twiddles`.
    private let passes: [(radix: Int, twiddleOffset: Int)]
    /// Per pass of length n = m p: w_n^(j t) for j in 0..<m, t in 1..<p, interleaved (re, im), j major.
    private let twiddles: UnsafeMutableBufferPointer<Float>
    /// Per generic radix p: exp(-+2 pi i r / p) for r in 0..<p, interleaved (re, im).
    private let roots: [Int: [Float]]

    /// A transform of `size` complex points (positive).
    /// - Parameters:
    ///   - size: complex points.
    ///   - direction: forward or inverse.
    init(size: Int, direction: FFTDirection) {
        precondition(size > 0, "an FFT needs a positive size")
        self.size = size
        self.direction = direction
        let sign: Double = direction == .forward ? -1 : 1
        var radices: [Int] = []
        var rest = size
        while rest % 4 == 0 { radices.append(4); rest /= 4 }
        for p in [2, 3, 5] { while rest % p == 0 { radices.append(p); rest /= p } }
        var p = 7
        while rest > 1 {
            while rest % p == 0 { radices.append(p); rest /= p }
            p += 2
            if p * p > rest && rest > 1 { radices.append(rest); rest = 1 }
        }
        var passes: [(radix: Int, twiddleOffset: Int)] = []
        var table: [Float] = []
        var roots: [Int: [Float]] = [:]
        var n = size
        for radix in radices {
            let m = n / radix
            passes.append((radix, table.count))
            for j in 0..<m {
                for t in 1..<radix {
                    let angle = sign * 2 * Double.pi * Double(j * t) / Double(n)
                    table.append(Float(cos(angle)))
                    table.append(Float(sin(angle)))
                }
            }
            if radix > 5 && roots[radix] == nil {
                var values: [Float] = []
                for r in 0..<radix {
                    let angle = sign * 2 * Double.pi * Double(r) / Double(radix)
                    values.append(Float(cos(angle)))
                    values.append(Float(sin(angle)))
                }
                roots[radix] = values
            }
            n = m
        }
        self.passes = passes
        self.roots = roots
        twiddles = .allocate(capacity: max(1, table.count))
        _ = twiddles.initialize(from: table)
        input = .allocate(capacity: 2 * size)
        input.initialize(repeating: 0)
        output = .allocate(capacity: 2 * size)
        output.initialize(repeating: 0)
        let a = UnsafeMutableBufferPointer<Float>.allocate(capacity: 2 * size)
        a.initialize(repeating: 0)
        let b = UnsafeMutableBufferPointer<Float>.allocate(capacity: 2 * size)
        b.initialize(repeating: 0)
        work = (a, b)
    }

    deinit {
        input.deallocate()
        output.deallocate()
        work.0.deallocate()
        work.1.deallocate()
        twiddles.deallocate()
    }

    /// Transforms `input` into `output`.
    func execute() {
        // The first pass reads `input`, the last writes `output`, the others go between the work buffers (no
        // copies: in Embedded Swift a copy of Floats was an outlined call per element, 13 % of the decoder).
        guard !passes.isEmpty else {
            output[0] = input[0]
            output[1] = input[1]
            return
        }
        var x = input.baseAddress!
        var n = size, stride = 1
        for (index, pass) in passes.enumerated() {
            let y = index == passes.count - 1 ? output.baseAddress! : (index % 2 == 0 ? work.0.baseAddress! : work.1.baseAddress!)
            let m = n / pass.radix
            let w = UnsafePointer(twiddles.baseAddress! + pass.twiddleOffset)
            switch pass.radix {
            case 2: Self.radix2(x, y, m: m, stride: stride, twiddles: w)
            case 3: Self.radix3(x, y, m: m, stride: stride, twiddles: w, forward: direction == .forward)
            case 4: Self.radix4(x, y, m: m, stride: stride, twiddles: w, forward: direction == .forward)
            case 5: Self.radix5(x, y, m: m, stride: stride, twiddles: w, forward: direction == .forward)
            default: Self.radixP(x, y, p: pass.radix, m: m, stride: stride, twiddles: w, roots: roots[pass.radix]!)
            }
            x = y
            n = m
            stride *= pass.radix
        }
    }

    // Each pass: for j in 0..<m, q in 0..<stride, the radix-p DFT b of a_r = x[q + stride (j + r m)], then
    // y[q + stride (p j + t)] = b_t w^(j t). Complex values at twice their index (interleaved).

    @inline(__always)
    private static func twiddle(_ re: Float, _ im: Float, _ w: UnsafePointer<Float>, _ index: Int) -> (Float, Float) {
        let wr = w[2 * index], wi = w[2 * index + 1]
        return (re * wr - im * wi, re * wi + im * wr)
    }

    private static func radix2(_ x: UnsafeMutablePointer<Float>, _ y: UnsafeMutablePointer<Float>, m: Int, stride s: Int,
                               twiddles w: UnsafePointer<Float>) {
        for j in 0..<m {
            for q in 0..<s {
                let i0 = 2 * (q + s * j), i1 = 2 * (q + s * (j + m))
                let ar = x[i0], ai = x[i0 + 1], br = x[i1], bi = x[i1 + 1]
                let o0 = 2 * (q + s * 2 * j), o1 = o0 + 2 * s
                y[o0] = ar + br
                y[o0 + 1] = ai + bi
                let (r1, m1) = twiddle(ar - br, ai - bi, w, j)
                y[o1] = r1
                y[o1 + 1] = m1
            }
        }
    }

    private static func radix3(_ x: UnsafeMutablePointer<Float>, _ y: UnsafeMutablePointer<Float>, m: Int, stride s: Int,
                               twiddles w: UnsafePointer<Float>, forward: Bool) {
        // b1 = a0 - (a1 + a2) / 2 - i s3 (a1 - a2), b2 = a0 - (a1 + a2) / 2 + i s3 (a1 - a2); s3 = +-sin(2 pi / 3).
        let s3: Float = forward ? 0.866_025_403_784_438_6 : -0.866_025_403_784_438_6
        for j in 0..<m {
            for q in 0..<s {
                let i0 = 2 * (q + s * j), i1 = 2 * (q + s * (j + m)), i2 = 2 * (q + s * (j + 2 * m))
                let a0r = x[i0], a0i = x[i0 + 1]
                let tr = x[i1] + x[i2], ti = x[i1 + 1] + x[i2 + 1]
                let dr = x[i1] - x[i2], di = x[i1 + 1] - x[i2 + 1]
                let cr = a0r - 0.5 * tr, ci = a0i - 0.5 * ti
                // -i s3 d = (s3 di, -s3 dr)
                let er = s3 * di, ei = -s3 * dr
                let o0 = 2 * (q + s * 3 * j)
                y[o0] = a0r + tr
                y[o0 + 1] = a0i + ti
                let (r1, m1) = twiddle(cr + er, ci + ei, w, 2 * j)
                y[o0 + 2 * s] = r1
                y[o0 + 2 * s + 1] = m1
                let (r2, m2) = twiddle(cr - er, ci - ei, w, 2 * j + 1)
                y[o0 + 4 * s] = r2
                y[o0 + 4 * s + 1] = m2
            }
        }
    }

    private static func radix4(_ x: UnsafeMutablePointer<Float>, _ y: UnsafeMutablePointer<Float>, m: Int, stride s: Int,
                               twiddles w: UnsafePointer<Float>, forward: Bool) {
        // Forward: b1 = (a0 - a2) - i (a1 - a3), b3 = (a0 - a2) + i (a1 - a3); inverse the other way.
        let sign: Float = forward ? 1 : -1
        for j in 0..<m {
            for q in 0..<s {
                let i0 = 2 * (q + s * j), i1 = 2 * (q + s * (j + m))
                let i2 = 2 * (q + s * (j + 2 * m)), i3 = 2 * (q + s * (j + 3 * m))
                let pr = x[i0] + x[i2], pi = x[i0 + 1] + x[i2 + 1]
                let mr = x[i0] - x[i2], mi = x[i0 + 1] - x[i2 + 1]
                let sr = x[i1] + x[i3], si = x[i1 + 1] + x[i3 + 1]
                let dr = x[i1] - x[i3], di = x[i1 + 1] - x[i3 + 1]
                // -i sign d = (sign di, -sign dr)
                let er = sign * di, ei = -sign * dr
                let o0 = 2 * (q + s * 4 * j)
                y[o0] = pr + sr
                y[o0 + 1] = pi + si
                let (r1, m1) = twiddle(mr + er, mi + ei, w, 3 * j)
                y[o0 + 2 * s] = r1
                y[o0 + 2 * s + 1] = m1
                let (r2, m2) = twiddle(pr - sr, pi - si, w, 3 * j + 1)
                y[o0 + 4 * s] = r2
                y[o0 + 4 * s + 1] = m2
                let (r3, m3) = twiddle(mr - er, mi - ei, w, 3 * j + 2)
                y[o0 + 6 * s] = r3
                y[o0 + 6 * s + 1] = m3
            }
        }
    }

    private static func radix5(_ x: UnsafeMutablePointer<Float>, _ y: UnsafeMutablePointer<Float>, m: Int, stride s: Int,
                               twiddles w: UnsafePointer<Float>, forward: Bool) {
        // c1 = cos(2 pi / 5), c2 = cos(4 pi / 5), s1 = +-sin(2 pi / 5), s2 = +-sin(4 pi / 5) (minus for inverse).
        let c1: Float = 0.309_016_994_374_947_45, c2: Float = -0.809_016_994_374_947_5
        let s1: Float = forward ? 0.951_056_516_295_153_5 : -0.951_056_516_295_153_5
        let s2: Float = forward ? 0.587_785_252_292_473_2 : -0.587_785_252_292_473_2
        for j in 0..<m {
            for q in 0..<s {
                let i0 = 2 * (q + s * j), i1 = 2 * (q + s * (j + m)), i2 = 2 * (q + s * (j + 2 * m))
                let i3 = 2 * (q + s * (j + 3 * m)), i4 = 2 * (q + s * (j + 4 * m))
                let a0r = x[i0], a0i = x[i0 + 1]
                let p14r = x[i1] + x[i4], p14i = x[i1 + 1] + x[i4 + 1]
                let m14r = x[i1] - x[i4], m14i = x[i1 + 1] - x[i4 + 1]
                let p23r = x[i2] + x[i3], p23i = x[i2 + 1] + x[i3 + 1]
                let m23r = x[i2] - x[i3], m23i = x[i2 + 1] - x[i3 + 1]
                // b1,4 = a0 + c1 p14 + c2 p23 -+ i (s1 m14 + s2 m23); b2,3 = a0 + c2 p14 + c1 p23 -+ i (s2 m14 - s1 m23)
                let u1r = a0r + c1 * p14r + c2 * p23r, u1i = a0i + c1 * p14i + c2 * p23i
                let u2r = a0r + c2 * p14r + c1 * p23r, u2i = a0i + c2 * p14i + c1 * p23i
                let v1r = s1 * m14r + s2 * m23r, v1i = s1 * m14i + s2 * m23i
                let v2r = s2 * m14r - s1 * m23r, v2i = s2 * m14i - s1 * m23i
                // -i v = (v.im, -v.re)
                let o0 = 2 * (q + s * 5 * j)
                y[o0] = a0r + p14r + p23r
                y[o0 + 1] = a0i + p14i + p23i
                let (r1, q1) = twiddle(u1r + v1i, u1i - v1r, w, 4 * j)
                y[o0 + 2 * s] = r1
                y[o0 + 2 * s + 1] = q1
                let (r2, q2) = twiddle(u2r + v2i, u2i - v2r, w, 4 * j + 1)
                y[o0 + 4 * s] = r2
                y[o0 + 4 * s + 1] = q2
                let (r3, q3) = twiddle(u2r - v2i, u2i + v2r, w, 4 * j + 2)
                y[o0 + 6 * s] = r3
                y[o0 + 6 * s + 1] = q3
                let (r4, q4) = twiddle(u1r - v1i, u1i + v1r, w, 4 * j + 3)
                y[o0 + 8 * s] = r4
                y[o0 + 8 * s + 1] = q4
            }
        }
    }

    /// Any radix p: the direct DFT of the p values, O(p^2) a butterfly.
    private static func radixP(_ x: UnsafeMutablePointer<Float>, _ y: UnsafeMutablePointer<Float>, p: Int, m: Int, stride s: Int,
                               twiddles w: UnsafePointer<Float>, roots: [Float]) {
        for j in 0..<m {
            for q in 0..<s {
                for t in 0..<p {
                    var sumR: Float = 0, sumI: Float = 0
                    for r in 0..<p {
                        let index = 2 * (q + s * (j + r * m)), root = 2 * ((r * t) % p)
                        let ar = x[index], ai = x[index + 1], wr = roots[root], wi = roots[root + 1]
                        sumR += ar * wr - ai * wi
                        sumI += ar * wi + ai * wr
                    }
                    let o = 2 * (q + s * (p * j + t))
                    if t == 0 {
                        y[o] = sumR
                        y[o + 1] = sumI
                    } else {
                        let (r, i) = twiddle(sumR, sumI, w, (p - 1) * j + t - 1)
                        y[o] = r
                        y[o + 1] = i
                    }
                }
            }
        }
    }
}

// The real transforms of the WebAssembly build's RealFFT and InverseRealFFT, compiled natively too so that the
// tests compare them with FFTW's r2c and c2r transforms bin by bin.
extension PortableFFT {
    /// The forward transform of `size` real values (`real`, at least `size`) into its first `size / 2 + 1` complex
    /// bins (`spectrum`, interleaved re, im, at least `2 * (size / 2 + 1)` Floats): the complex transform of the
    /// block with zero imaginary parts. A forward transform's.
    func executeReal(_ real: UnsafeBufferPointer<Float>, into spectrum: UnsafeMutableBufferPointer<Float>) {
        precondition(direction == .forward && real.count >= size && spectrum.count >= 2 * (size / 2 + 1), "executeReal's buffers")
        let complex = input.baseAddress!
        for k in 0..<size {
            complex[2 * k] = real[k]
            complex[2 * k + 1] = 0
        }
        execute()
        spectrum.baseAddress!.update(from: output.baseAddress!, count: 2 * (size / 2 + 1))
    }

    /// The inverse transform of a real signal's first `size / 2 + 1` bins (`spectrum`, interleaved) into its `size`
    /// real values (`real`): the Hermitian spectrum completed, its complex inverse's real parts (unnormalised). An
    /// inverse transform's.
    func executeInverseReal(_ spectrum: UnsafeBufferPointer<Float>, into real: UnsafeMutableBufferPointer<Float>) {
        precondition(direction == .inverse && real.count >= size && spectrum.count >= 2 * (size / 2 + 1), "executeInverseReal's buffers")
        let complex = input.baseAddress!, half = size / 2 + 1
        for k in 0..<half {
            complex[2 * k] = spectrum[2 * k]
            complex[2 * k + 1] = spectrum[2 * k + 1]
        }
        for k in half..<size {
            complex[2 * k] = spectrum[2 * (size - k)]
            complex[2 * k + 1] = -spectrum[2 * (size - k) + 1]
        }
        execute()
        for k in 0..<size { real[k] = output[2 * k] }
    }
}

#if SOTTO_PORTABLE_FFT
// The WebAssembly build's transforms: the API of FFT.swift's FFTW-backed classes, on PortableFFT.

/// A complex single-precision FFT of a fixed size (``PortableFFT`` in this build), executed many times on its
/// own buffers. `input` and `output` hold `size` complex values interleaved as (re, im) Floats. One owner; not
/// for concurrent use.
public final class ComplexFFT {
    /// Number of complex points.
    public let size: Int
    /// Forward or inverse.
    public let direction: FFTDirection
    /// `2 * size` Floats, interleaved (re, im).
    public let input: UnsafeMutableBufferPointer<Float>
    /// `2 * size` Floats, interleaved (re, im).
    public let output: UnsafeMutableBufferPointer<Float>
    private let transform: PortableFFT

    /// A transform whose size is fixed by the program.
    /// - Parameters:
    ///   - size: complex points (positive).
    ///   - direction: forward or inverse.
    public convenience init(size: Int, direction: FFTDirection) {
        do { try self.init(checkedSize: size, direction: direction) } catch { fixedSizeFailure(error) }
    }

    /// A transform of `size` complex points, or an error for a size out of range.
    /// - Parameters:
    ///   - size: complex points (positive).
    ///   - direction: forward or inverse.
    public init(checkedSize size: Int, direction: FFTDirection) throws(FFTError) {
        try FFTError.check(size)
        self.size = size
        self.direction = direction
        transform = PortableFFT(size: size, direction: direction)
        input = transform.input
        output = transform.output
    }

    /// Transforms `input` into `output`.
    public func execute() { transform.execute() }
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
    private let transform: PortableFFT

    /// A transform whose size is fixed by the program.
    /// - Parameter size: real input points (positive).
    public convenience init(size: Int) {
        do { try self.init(checkedSize: size) } catch { fixedSizeFailure(error) }
    }

    /// A transform of `size` real points, or an error for a size out of range.
    /// - Parameter size: real input points (positive).
    public init(checkedSize size: Int) throws(FFTError) {
        try FFTError.check(size)
        self.size = size
        transform = PortableFFT(size: size, direction: .forward)
        input = .allocate(capacity: size)
        input.initialize(repeating: 0)
        output = .allocate(capacity: 2 * (size / 2 + 1))
        output.initialize(repeating: 0)
    }

    deinit {
        input.deallocate()
        output.deallocate()
    }

    /// Transforms `input` into `output`: the complex transform of the real block, its first half kept.
    public func execute() { transform.executeReal(UnsafeBufferPointer(input), into: output) }
}

/// A complex-to-real inverse FFT of a fixed size: `size / 2 + 1` complex inputs (interleaved), `size`
/// real outputs. Unnormalised (multiply by `1 / size` to invert `RealFFT`). One owner; not for concurrent use.
public final class InverseRealFFT {
    /// Number of real output points.
    public let size: Int
    /// `2 * (size / 2 + 1)` Floats, interleaved (re, im).
    public let input: UnsafeMutableBufferPointer<Float>
    /// `size` Floats.
    public let output: UnsafeMutableBufferPointer<Float>
    private let transform: PortableFFT

    /// A transform whose size is fixed by the program.
    /// - Parameter size: real output points (positive).
    public convenience init(size: Int) {
        do { try self.init(checkedSize: size) } catch { fixedSizeFailure(error) }
    }

    /// A transform to `size` real points, or an error for a size out of range.
    /// - Parameter size: real output points (positive).
    public init(checkedSize size: Int) throws(FFTError) {
        try FFTError.check(size)
        self.size = size
        transform = PortableFFT(size: size, direction: .inverse)
        input = .allocate(capacity: 2 * (size / 2 + 1))
        input.initialize(repeating: 0)
        output = .allocate(capacity: size)
        output.initialize(repeating: 0)
    }

    deinit {
        input.deallocate()
        output.deallocate()
    }

    /// Transforms `input` into `output`: the Hermitian spectrum completed, its complex inverse's real parts.
    public func execute() { transform.executeInverseReal(UnsafeBufferPointer(input), into: output) }
}
#endif
