/// Solves linear systems A x = b whose matrix is Hermitian positive definite (normal equations of a
/// complex least-squares fit, such as a room's impulse response fitted to a known preamble), by Cholesky
/// factorisation A = L L^H, in place, on contiguous buffers, without allocating.
///
/// Complex values are held as separate real and imaginary parts (unitless: whatever units the caller's
/// system has). The matrix is row-major, `size` x `size`; only its upper triangle (row i, columns j >= i)
/// is read, and the buffers are overwritten with L (lower triangle) and the solution.
public enum HermitianSystem {
    /// Solves A x = b in place: on return `rhsReal`/`rhsImaginary` hold x, and the matrix buffers hold the
    /// Cholesky factor. Returns false (the right-hand side then undefined) when A is not positive definite,
    /// has non-finite entries, or a buffer is shorter than `size` (x `size`).
    @discardableResult
    public static func solve(matrixReal re: UnsafeMutableBufferPointer<Double>,
                             matrixImaginary im: UnsafeMutableBufferPointer<Double>, size n: Int,
                             rhsReal zr: UnsafeMutableBufferPointer<Double>,
                             rhsImaginary zi: UnsafeMutableBufferPointer<Double>) -> Bool {
        guard n >= 0, re.count >= n * n, im.count >= n * n, zr.count >= n, zi.count >= n else { return false }
        // A = L L^H, L lower triangular, stored in place (lower part); rows are contiguous, so every inner
        // loop runs along two rows.
        for j in 0..<n {
            let rowJ = j * n
            var d = re[rowJ + j]
            for k in 0..<j { d -= re[rowJ + k] * re[rowJ + k] + im[rowJ + k] * im[rowJ + k] }
            guard d > 0, d.isFinite else { return false }
            let ljj = d.squareRoot()
            re[rowJ + j] = ljj; im[rowJ + j] = 0
            for i in (j + 1)..<max(j + 1, n) {
                let rowI = i * n
                // A[i][j] = conj(A[j][i]) (the upper part still holds A), minus L[i][k] conj(L[j][k]).
                var sr = re[rowJ + i], si = -im[rowJ + i]
                for k in 0..<j {
                    let ar = re[rowI + k], ai = im[rowI + k], br = re[rowJ + k], bi = im[rowJ + k]
                    sr -= ar * br + ai * bi
                    si -= ai * br - ar * bi
                }
                re[rowI + j] = sr / ljj; im[rowI + j] = si / ljj
            }
        }
        // Forward: L z = b; backward: L^H x = z.
        for i in 0..<n {
            for k in 0..<i {
                let ar = re[i * n + k], ai = im[i * n + k]
                zr[i] -= ar * zr[k] - ai * zi[k]
                zi[i] -= ar * zi[k] + ai * zr[k]
            }
            zr[i] /= re[i * n + i]; zi[i] /= re[i * n + i]
        }
        for i in stride(from: n - 1, through: 0, by: -1) {
            for k in (i + 1)..<max(i + 1, n) {
                // conj(L[k][i]) * x[k]
                let ar = re[k * n + i], ai = -im[k * n + i]
                zr[i] -= ar * zr[k] - ai * zi[k]
                zi[i] -= ar * zi[k] + ai * zr[k]
            }
            zr[i] /= re[i * n + i]; zi[i] /= re[i * n + i]
        }
        return true
    }
}
