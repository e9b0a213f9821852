/// Solves linear systems A x = b whose matrix is Hermitian positive definite (normal equations of a
/// complex least-squares fit, such as a room's impulse response fitted to a known preamble), by Cholesky
/// factorisation A = U^H U, in place, on contiguous buffers, without allocating.
///
/// Complex values are held as separate real and imaginary parts (unitless: whatever units the caller's
/// system has). The matrix is row-major, `size` x `size`; only its upper triangle (row i, columns j >= i)
/// is read, and the buffers are overwritten with U (upper triangle) and the solution.
///
/// The factorisation is right-looking: once row j of U is known, it is subtracted from every later row of
/// the trailing matrix. Every inner loop then runs along two contiguous rows with no reduction (an axpy),
/// done two columns at a time with SIMD2; the left-looking form (a dot product per element, scalar) cost
/// about 82 million instructions for the room fit's 275 taps.
public enum HermitianSystem {
    /// Solves A x = b in place: on return `rhsReal`/`rhsImaginary` hold x, and the matrix buffers hold the
    /// Cholesky factor U (upper triangle). Returns false (the right-hand side then undefined) when A is not
    /// positive definite, has non-finite entries, or a buffer is shorter than `size` (x `size`).
    @discardableResult
    public static func solve(matrixReal re: UnsafeMutableBufferPointer<Double>,
                             matrixImaginary im: UnsafeMutableBufferPointer<Double>, size n: Int,
                             rhsReal zr: UnsafeMutableBufferPointer<Double>,
                             rhsImaginary zi: UnsafeMutableBufferPointer<Double>) -> Bool {
        guard n >= 0, re.count >= n * n, im.count >= n * n, zr.count >= n, zi.count >= n else { return false }
        guard n > 0, let ar = re.baseAddress, let ai = im.baseAddress,
              let br = zr.baseAddress, let bi = zi.baseAddress else { return true }
        for j in 0..<n {
            let rowJ = j * n
            let d = ar[rowJ + j]
            guard d > 0, d.isFinite else { return false }
            let ujj = d.squareRoot(), scale = 1 / ujj
            ar[rowJ + j] = ujj; ai[rowJ + j] = 0
            // Row j of U: U[j][i] = A[j][i] / U[j][j].
            for i in (j + 1)..<max(j + 1, n) { ar[rowJ + i] *= scale; ai[rowJ + i] *= scale }
            // Trailing update: A[l][i] -= conj(U[j][l]) U[j][i] for l > j, i >= l; two columns at a time
            // (elementwise, so the same arithmetic as one at a time: the compiler did not vectorise the
            // scalar loop, the real and imaginary buffers possibly aliasing).
            for l in (j + 1)..<max(j + 1, n) {
                let cr = ar[rowJ + l], ci = -ai[rowJ + l]
                let vr = SIMD2<Double>(repeating: cr), vi = SIMD2<Double>(repeating: ci)
                let rowL = l * n
                var i = l
                while i + 2 <= n {
                    let ur = UnsafeRawPointer(ar + rowJ + i).loadUnaligned(as: SIMD2<Double>.self)
                    let ui = UnsafeRawPointer(ai + rowJ + i).loadUnaligned(as: SIMD2<Double>.self)
                    let pr = UnsafeMutableRawPointer(ar + rowL + i), pi = UnsafeMutableRawPointer(ai + rowL + i)
                    pr.storeBytes(of: pr.loadUnaligned(as: SIMD2<Double>.self) - (vr * ur - vi * ui), as: SIMD2<Double>.self)
                    pi.storeBytes(of: pi.loadUnaligned(as: SIMD2<Double>.self) - (vr * ui + vi * ur), as: SIMD2<Double>.self)
                    i += 2
                }
                if i < n {
                    let ur = ar[rowJ + i], ui = ai[rowJ + i]
                    ar[rowL + i] -= cr * ur - ci * ui
                    ai[rowL + i] -= cr * ui + ci * ur
                }
            }
        }
        // Forward: U^H z = b, column by column (row k of U is column k of U^H, conjugated).
        for k in 0..<n {
            let rowK = k * n
            br[k] /= ar[rowK + k]; bi[k] /= ar[rowK + k]
            let xr = br[k], xi = bi[k]
            for i in (k + 1)..<max(k + 1, n) {
                let ur = ar[rowK + i], ui = ai[rowK + i]
                br[i] -= ur * xr + ui * xi
                bi[i] -= ur * xi - ui * xr
            }
        }
        // Backward: U x = z.
        for i in stride(from: n - 1, through: 0, by: -1) {
            let rowI = i * n
            var sr = br[i], si = bi[i]
            for k in (i + 1)..<max(i + 1, n) {
                let ur = ar[rowI + k], ui = ai[rowI + k]
                sr -= ur * br[k] - ui * bi[k]
                si -= ur * bi[k] + ui * br[k]
            }
            br[i] = sr / ar[rowI + i]; bi[i] = si / ar[rowI + i]
        }
        return true
    }
}
