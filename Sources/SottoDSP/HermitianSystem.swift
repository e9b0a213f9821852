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
/// through row pointers with wrapping index arithmetic: about 38 million instructions for the room fit's
/// 275 taps (the left-looking form, a dot product per element, cost about 82 million; the same loop on
/// SIMD2 values 43 million, and 80 times the time of this one in an unoptimised build, where generic SIMD
/// operations are calls: the debug test run spent most of its time there).
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
        var j = 0
        while j < n {
            let rowJ = j &* n
            let d = ar[rowJ &+ j]
            guard d > 0, d.isFinite else { return false }
            let ujj = d.squareRoot(), scale = 1 / ujj
            ar[rowJ &+ j] = ujj; ai[rowJ &+ j] = 0
            let ujr = ar + rowJ, uji = ai + rowJ
            // Row j of U: U[j][i] = A[j][i] / U[j][j].
            var i = j &+ 1
            while i < n { ujr[i] *= scale; uji[i] *= scale; i &+= 1 }
            // Trailing update: A[l][i] -= conj(U[j][l]) U[j][i] for l > j, i >= l.
            var l = j &+ 1
            while l < n {
                let cr = ujr[l], ci = -uji[l]
                let lr = ar + l &* n, li = ai + l &* n
                var i = l
                while i < n {
                    let ur = ujr[i], ui = uji[i]
                    lr[i] -= cr * ur - ci * ui
                    li[i] -= cr * ui + ci * ur
                    i &+= 1
                }
                l &+= 1
            }
            j &+= 1
        }
        // Forward: U^H z = b, column by column (row k of U is column k of U^H, conjugated).
        var k = 0
        while k < n {
            let ukr = ar + k &* n, uki = ai + k &* n
            br[k] /= ukr[k]; bi[k] /= ukr[k]
            let xr = br[k], xi = bi[k]
            var i = k &+ 1
            while i < n {
                let ur = ukr[i], ui = uki[i]
                br[i] -= ur * xr + ui * xi
                bi[i] -= ur * xi - ui * xr
                i &+= 1
            }
            k &+= 1
        }
        // Backward: U x = z.
        var i = n &- 1
        while i >= 0 {
            let uir = ar + i &* n, uii = ai + i &* n
            var sr = br[i], si = bi[i]
            var k = i &+ 1
            while k < n {
                let ur = uir[k], ui = uii[k]
                sr -= ur * br[k] - ui * bi[k]
                si -= ur * bi[k] + ui * br[k]
                k &+= 1
            }
            br[i] = sr / uir[i]; bi[i] = si / uir[i]
            i &-= 1
        }
        return true
    }
}
