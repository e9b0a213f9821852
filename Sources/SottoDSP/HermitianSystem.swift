/// Solves linear systems A x = b whose matrix is Hermitian positive definite (normal equations of a
/// complex least-squares fit, such as a room's impulse response fitted to a known preamble), by Cholesky
/// factorisation A = U^H U, in place, on contiguous buffers, without allocating.
///
/// Complex values are held as separate real and imaginary parts (unitless: whatever units the caller's
/// system has). The matrix is row-major, `size` x `size`; only its upper triangle (row i, columns j >= i)
/// is read, and the buffers are overwritten with U (upper triangle) and the solution.
///
/// The factorisation is right-looking: once rows j and j + 1 of U are known, both are subtracted from every
/// later row of the trailing matrix in one pass. Every inner loop then runs along contiguous rows with no
/// reduction (an axpy), done two columns at a time with SIMD2; the left-looking form (a dot product per
/// element, scalar) cost about 82 million instructions for the room fit's 275 taps, one row at a time 43 M.
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
            let rowJ = j * n
            let d = ar[rowJ + j]
            guard d > 0, d.isFinite else { return false }
            let ujj = d.squareRoot(), scale = 1 / ujj
            ar[rowJ + j] = ujj; ai[rowJ + j] = 0
            for i in (j + 1)..<max(j + 1, n) { ar[rowJ + i] *= scale; ai[rowJ + i] *= scale }
            return true
        }
        // Trailing update: A[l][i] -= conj(U[j][l]) U[j][i] for i >= l, two columns at a time with SIMD2
        // (elementwise, so the same arithmetic as one at a time: the compiler did not vectorise the scalar
        // loop, the real and imaginary buffers possibly aliasing); with `second`, the same for row j + 1
        // right after, element by element, so that each element of A is loaded and stored once for both
        // rows of U (the same operations in the same order as two separate updates: identical results).
        @inline(__always) func update(row l: Int, from j: Int, second: Bool) {
            let rowJ = j * n, rowK = rowJ + n, rowL = l * n
            let c0r = ar[rowJ + l], c0i = -ai[rowJ + l]
            let c1r = second ? ar[rowK + l] : 0, c1i = second ? -ai[rowK + l] : 0
            let v0r = SIMD2<Double>(repeating: c0r), v0i = SIMD2<Double>(repeating: c0i)
            let v1r = SIMD2<Double>(repeating: c1r), v1i = SIMD2<Double>(repeating: c1i)
            var i = l
            while i + 2 <= n {
                let pr = UnsafeMutableRawPointer(ar + rowL + i), pi = UnsafeMutableRawPointer(ai + rowL + i)
                var xr = pr.loadUnaligned(as: SIMD2<Double>.self), xi = pi.loadUnaligned(as: SIMD2<Double>.self)
                let u0r = UnsafeRawPointer(ar + rowJ + i).loadUnaligned(as: SIMD2<Double>.self)
                let u0i = UnsafeRawPointer(ai + rowJ + i).loadUnaligned(as: SIMD2<Double>.self)
                xr = xr - (v0r * u0r - v0i * u0i)
                xi = xi - (v0r * u0i + v0i * u0r)
                if second {
                    let u1r = UnsafeRawPointer(ar + rowK + i).loadUnaligned(as: SIMD2<Double>.self)
                    let u1i = UnsafeRawPointer(ai + rowK + i).loadUnaligned(as: SIMD2<Double>.self)
                    xr = xr - (v1r * u1r - v1i * u1i)
                    xi = xi - (v1r * u1i + v1i * u1r)
                }
                pr.storeBytes(of: xr, as: SIMD2<Double>.self)
                pi.storeBytes(of: xi, as: SIMD2<Double>.self)
                i += 2
            }
            if i < n {
                var xr = ar[rowL + i], xi = ai[rowL + i]
                let u0r = ar[rowJ + i], u0i = ai[rowJ + i]
                xr -= c0r * u0r - c0i * u0i
                xi -= c0r * u0i + c0i * u0r
                if second {
                    let u1r = ar[rowK + i], u1i = ai[rowK + i]
                    xr -= c1r * u1r - c1i * u1i
                    xi -= c1r * u1i + c1i * u1r
                }
                ar[rowL + i] = xr; ai[rowL + i] = xi
            }
        }
        // Two rows of U per pass: row j, row j + 1 updated by it, then the rest of the trailing matrix
        // updated by both at once (half the loads and stores of the trailing matrix).
        var j = 0
        while j < n {
            guard makeRow(j) else { return false }
            guard j + 1 < n else { break }
            update(row: j + 1, from: j, second: false)
            guard makeRow(j + 1) else { return false }
            for l in (j + 2)..<max(j + 2, n) { update(row: l, from: j, second: true) }
            j += 2
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
