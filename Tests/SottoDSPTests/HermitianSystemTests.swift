import Testing
import SottoDSP

/// The Cholesky solver behind the coherent detector's room fit.
@Suite struct HermitianSystemTests {
    /// A small deterministic generator (the tests must not depend on the platform's random source).
    struct Generator {
        var state: UInt64
        mutating func next() -> Double {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(state >> 11) / Double(1 << 53) - 0.5
        }
    }

    /// Normal equations of an overdetermined complex least-squares system y = X h: the solver recovers h.
    @Test(arguments: [1, 2, 3, 4, 33, 34])
    func recoversAKnownChannel(taps: Int) {
        var random = Generator(state: UInt64(taps))
        let rows = 3 * taps + 5
        let xr = (0..<(rows * taps)).map { _ in random.next() }, xi = (0..<(rows * taps)).map { _ in random.next() }
        let hr = (0..<taps).map { _ in random.next() }, hi = (0..<taps).map { _ in random.next() }
        var yr = [Double](repeating: 0, count: rows), yi = yr
        for n in 0..<rows {
            for l in 0..<taps {
                yr[n] += xr[n * taps + l] * hr[l] - xi[n * taps + l] * hi[l]
                yi[n] += xr[n * taps + l] * hi[l] + xi[n * taps + l] * hr[l]
            }
        }
        // A = X^H X, b = X^H y.
        var ar = [Double](repeating: 0, count: taps * taps), ai = ar
        var br = [Double](repeating: 0, count: taps), bi = br
        for n in 0..<rows {
            for i in 0..<taps {
                let (pr, pi) = (xr[n * taps + i], -xi[n * taps + i])  // conj(X[n][i])
                for j in 0..<taps {
                    ar[i * taps + j] += pr * xr[n * taps + j] - pi * xi[n * taps + j]
                    ai[i * taps + j] += pr * xi[n * taps + j] + pi * xr[n * taps + j]
                }
                br[i] += pr * yr[n] - pi * yi[n]
                bi[i] += pr * yi[n] + pi * yr[n]
            }
        }
        let solved = ar.withUnsafeMutableBufferPointer { ar in
            ai.withUnsafeMutableBufferPointer { ai in
                br.withUnsafeMutableBufferPointer { br in
                    bi.withUnsafeMutableBufferPointer { bi in
                        HermitianSystem.solve(matrixReal: ar, matrixImaginary: ai, size: taps, rhsReal: br, rhsImaginary: bi)
                    }
                }
            }
        }
        #expect(solved)
        for l in 0..<taps {
            #expect(abs(br[l] - hr[l]) < 1e-9 && abs(bi[l] - hi[l]) < 1e-9, "tap \(l)")
        }
    }

    /// A 2 x 2 system solved by hand: A = [[2, 1 + i], [1 - i, 3]], x = (1, i), so b = (1 + i, 1 + 2i).
    @Test func solvesASmallSystemByHand() {
        var ar: [Double] = [2, 1, 1, 3], ai: [Double] = [0, 1, -1, 0]
        var br: [Double] = [1, 1], bi: [Double] = [1, 2]
        let solved = ar.withUnsafeMutableBufferPointer { ar in
            ai.withUnsafeMutableBufferPointer { ai in
                br.withUnsafeMutableBufferPointer { br in
                    bi.withUnsafeMutableBufferPointer { bi in
                        HermitianSystem.solve(matrixReal: ar, matrixImaginary: ai, size: 2, rhsReal: br, rhsImaginary: bi)
                    }
                }
            }
        }
        #expect(solved)
        #expect(abs(br[0] - 1) < 1e-12 && abs(bi[0]) < 1e-12 && abs(br[1]) < 1e-12 && abs(bi[1] - 1) < 1e-12)
    }

    @Test func refusesAMatrixThatIsNotPositiveDefinite() {
        var ar: [Double] = [1, 2, 2, 1], ai: [Double] = [0, 0, 0, 0]
        var br: [Double] = [1, 1], bi: [Double] = [0, 0]
        let solved = ar.withUnsafeMutableBufferPointer { ar in
            ai.withUnsafeMutableBufferPointer { ai in
                br.withUnsafeMutableBufferPointer { br in
                    bi.withUnsafeMutableBufferPointer { bi in
                        HermitianSystem.solve(matrixReal: ar, matrixImaginary: ai, size: 2, rhsReal: br, rhsImaginary: bi)
                    }
                }
            }
        }
        #expect(!solved)
    }
}
