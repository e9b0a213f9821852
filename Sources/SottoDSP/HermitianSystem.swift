/// Solves linear systems A x = b whose matrix is Hermitian positive definite (normal equations of a
/// complex least-squares fit, such as a room's impulse response fitted to a known preamble), by Cholesky
/// factorisation A = U^H U, in place, on contiguous buffers, without allocating.
///
/// Complex values are held as separate real and imaginary parts (unitless: whatever units the caller's
/// system has). The matrix is row-major, `size` x `size`; only its upper triangle (row i, columns j >= i)
/// is read, and the buffers are overwritten with U (upper triangle) and the solution.
///
/// The factorisation is right-looking: once rows j and j + 1 of U are known, both are subtracted from every
/// later row of the trailing matrix in one pass. Every inner loop runs along contiguous rows with no
/// reduction (an axpy), through row pointers with wrapping index arithmetic. For the room fit's 275 taps
/// (swiftc -O, callgrind): 32 M instructions; one row per pass 38 M; the same loops on SIMD2 values 34 M
/// (two rows) and 43 M (one), as fast in an optimised build but 30-80 times slower unoptimised, where
/// generic SIMD operations are calls (the debug test run spent 42 % of its CPU there); the left-looking
/// form (a dot product per element) 82 M.
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
        // Row j of U: U[j][i] = A[j][i] / U[j][j], from the (updated) row j of A; false when not positive.
        @inline(__always) func makeRow(_ j: Int) -> Bool {
            let ujr = ar + j &* n, uji = ai + j &* n
            let d = ujr[j]
            guard d > 0, d.isFinite else { return false }
            let ujj = d.squareRoot(), scale = 1 / ujj
            ujr[j] = ujj; uji[j] = 0
            var i = j &+ 1
            while i < n { ujr[i] *= scale; uji[i] *= scale; i &+= 1 }
            return true
        }
        // Trailing update of row l by row j of U: A[l][i] -= conj(U[j][l]) U[j][i] for i >= l.
        @inline(__always) func update(row l: Int, from j: Int) {
            let u0r = ar + j &* n, u0i = ai + j &* n, lr = ar + l &* n, li = ai + l &* n
            let c0r = u0r[l], c0i = -u0i[l]
            var i = l
            while i < n {
                let ur = u0r[i], ui = u0i[i]
                lr[i] -= c0r * ur - c0i * ui
                li[i] -= c0r * ui + c0i * ur
                i &+= 1
            }
        }
        // The same by rows j and j + 1 in one pass, each element of A loaded and stored once for both (the
        // same operations in the same order as two separate updates: identical results).
        @inline(__always) func update2(row l: Int, from j: Int) {
            let u0r = ar + j &* n, u0i = ai + j &* n, u1r = u0r + n, u1i = u0i + n
            let lr = ar + l &* n, li = ai + l &* n
            let c0r = u0r[l], c0i = -u0i[l], c1r = u1r[l], c1i = -u1i[l]
            var i = l
            while i < n {
                var xr = lr[i], xi = li[i]
                let a0r = u0r[i], a0i = u0i[i]
                xr -= c0r * a0r - c0i * a0i
                xi -= c0r * a0i + c0i * a0r
                let a1r = u1r[i], a1i = u1i[i]
                xr -= c1r * a1r - c1i * a1i
                xi -= c1r * a1i + c1i * a1r
                lr[i] = xr; li[i] = xi
                i &+= 1
            }
        }
        // Two rows of U per pass: row j, row j + 1 updated by it, then the rest of the trailing matrix
        // updated by both at once (half the loads and stores of the trailing matrix).
        var j = 0
        while j < n {
            guard makeRow(j) else { return false }
            guard j &+ 1 < n else { break }
            update(row: j &+ 1, from: j)
            guard makeRow(j &+ 1) else { return false }
            var l = j &+ 2
            while l < n { update2(row: l, from: j); l &+= 1 }
            j &+= 2
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
