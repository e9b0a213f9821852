import RealModule
import SottoDSP

/// The coherent detector's room (channel) estimator: fits the room's impulse response in complex baseband
/// (`CandidateShapes.channelTaps` taps on the grid, `precursorTaps` of them before the detected start)
/// to a frame's received preamble, or to a whole decided frame, by regularised least squares solved with
/// `HermitianSystem`; then places the symbol window and predicts what the preamble leaves in the symbols.
/// Cost: about 3.5 million complex multiply-adds for the default profile's 275 taps.
struct RoomEstimator {
    let shapes: CandidateShapes
    /// Time constant of the prior on the taps' power (s): rooms decay; taps far out are expected small.
    static let tapDecayTime = 0.020
    /// Largest share of the preamble's power the room model may leave unexplained: real frames leave
    /// 0.01-0.2 at 20 dB SNR (measured rooms and synthetic ones), detections that are not frames of this
    /// profile mostly 0.3-1.
    static let maximumUnexplained = 0.35

    /// Estimates the room from the known part of the preamble: minimises |y - X h|^2 + sum nvar / p_l |h_l|^2,
    /// with a prior tap power p_l decaying after the direct sound (the preamble is shorter than the room, so
    /// plain least squares is ill-conditioned). Then places the symbol window at the first strong arrival.
    /// With `source` (interleaved complex transmitted samples, `support` of them: a decided frame), the fit
    /// uses all of it instead of the preamble alone.
    func estimate(_ frame: CoherentDetector.Frame, source: [Float]? = nil, support: Int? = nil) -> Bool {
        let taps = shapes.channelTaps, pre = shapes.precursorTaps
        let known = support ?? shapes.knownPreamble
        // Rows: every received sample whose contributions all come from known transmitted samples.
        let firstRow = -pre, endRow = known - pre
        guard endRow - firstRow > taps / 2 else { return false }
        // The transmitted samples x[m], m in 0..<known, as contiguous doubles (zero outside).
        var sourceReal = [Double](repeating: 0, count: known), sourceImaginary = sourceReal
        for m in 0..<known {
            if let source {
                sourceReal[m] = Double(source[2 * m]); sourceImaginary[m] = Double(source[2 * m + 1])
            } else {
                sourceReal[m] = Double(shapes.preambleReal[m]); sourceImaginary[m] = Double(shapes.preambleImaginary[m])
            }
        }
        // The received rows, y[n] for n in firstRow..<endRow, as contiguous doubles.
        let rows = endRow - firstRow
        var receivedReal = [Double](repeating: 0, count: rows), receivedImaginary = receivedReal
        var received = 0.0
        for r in 0..<rows {
            let (yr, yi) = frame.sample(firstRow + r)
            receivedReal[r] = yr; receivedImaginary[r] = yi
            received += yr * yr + yi * yi
        }
        var gramRe = [Double](repeating: 0, count: taps * taps), gramIm = gramRe
        var rhsRe = [Double](repeating: 0, count: taps), rhsIm = rhsRe
        var transmitted = 0.0
        sourceReal.withUnsafeBufferPointer { xr in
            sourceImaginary.withUnsafeBufferPointer { xi in
                gramRe.withUnsafeMutableBufferPointer { gr in
                    gramIm.withUnsafeMutableBufferPointer { gi in
                        // y[n] = sum_l h_l x[n - l + pre]. Normal matrix R[i][j] = sum_n conj(x[n-i+pre]) x[n-j+pre]
                        // over the rows (n + pre = m runs over 0..<known), filled along its diagonals:
                        // R[i+1][j+1] = R[i][j] + (term of row firstRow-1) - (term of row endRow-1).
                        for j in 0..<taps {
                            var sr = 0.0, si = 0.0
                            for m in j..<max(j, known) {
                                let ar = xr[m], ai = xi[m], br = xr[m - j], bi = xi[m - j]
                                sr += ar * br + ai * bi
                                si += ar * bi - ai * br
                            }
                            gr[j] = sr; gi[j] = si
                        }
                        // (Row firstRow - 1 = -pre - 1 reads x before its first sample: its term is zero.)
                        @inline(__always) func x(_ m: Int) -> (Double, Double) { m >= 0 ? (xr[m], xi[m]) : (0, 0) }
                        for i in 0..<(taps - 1) {
                            let (cr, ci) = x(known - 1 - i)
                            let row = i * taps, next = (i + 1) * taps + 1
                            for j in i..<(taps - 1) {
                                let (dr, di) = x(known - 1 - j)
                                gr[next + j] = gr[row + j] - (cr * dr + ci * di)
                                gi[next + j] = gi[row + j] - (cr * di - ci * dr)
                            }
                        }
                        for m in 0..<known { transmitted += xr[m] * xr[m] + xi[m] * xi[m] }
                    }
                }
                // Right-hand side: b_l = sum_n conj(x[n - l + pre]) y[n].
                receivedReal.withUnsafeBufferPointer { yr in
                    receivedImaginary.withUnsafeBufferPointer { yi in
                        for l in 0..<taps {
                            var sr = 0.0, si = 0.0
                            // Row r is n = firstRow + r, so x index n - l + pre = r - l (zero below 0).
                            for r in l..<max(l, rows) {
                                let ar = xr[r - l], ai = xi[r - l], br = yr[r], bi = yi[r]
                                sr += ar * br + ai * bi
                                si += ar * bi - ai * br
                            }
                            rhsRe[l] = sr; rhsIm[l] = si
                        }
                    }
                }
            }
        }
        // Prior: flat over the precursor and a few samples, then decaying; scaled to the received power.
        let decay = Self.tapDecayTime * shapes.gridRate
        let onset = pre + shapes.guardSamples / 2
        var prior = (0..<taps).map { l in Double.exp(-Double(max(0, l - onset)) / decay) }
        let nvar = frame.noiseVariance
        let gain = max(received / Double(rows) - nvar, 1e-3 * received / Double(rows)) / max(transmitted / Double(known), 1e-12)
        let total = prior.reduce(0, +)
        for l in 0..<taps { prior[l] *= gain / total }
        for l in 0..<taps { gramRe[l * taps + l] += nvar / max(prior[l], 1e-30) }
        let solved = gramRe.withUnsafeMutableBufferPointer { re in
            gramIm.withUnsafeMutableBufferPointer { im in
                rhsRe.withUnsafeMutableBufferPointer { br in
                    rhsIm.withUnsafeMutableBufferPointer { bi in
                        HermitianSystem.solve(matrixReal: re, matrixImaginary: im, size: taps, rhsReal: br, rhsImaginary: bi)
                    }
                }
            }
        }
        guard solved else { return false }
        let hr = rhsRe, hi = rhsIm
        frame.channel = [Float](repeating: 0, count: 2 * taps)
        var strongest = 0.0
        for l in 0..<taps {
            frame.channel[2 * l] = Float(hr[l]); frame.channel[2 * l + 1] = Float(hi[l])
            strongest = max(strongest, hr[l] * hr[l] + hi[l] * hi[l])
        }
        guard strongest > 0, strongest.isFinite else { return false }
        // The window starts at the first arrival within 5 dB of the strongest.
        var first = 0
        while first < taps, hr[first] * hr[first] + hi[first] * hi[first] < 0.3 * strongest { first += 1 }
        frame.windowOffset = max(-shapes.guardSamples / 2, min(shapes.maximumWindowOffset, first - pre))
        frame.firstStrongTap = first
        startPrediction(frame)
        guard source == nil else { frame.unexplained = 0; return true }
        // A detection that is not a frame of this profile (another profile's chirps, a chirp-like stretch
        // inside a frame) leaves most of the preamble unexplained: stop here instead of decoding it.
        var unexplained = 0.0
        for n in firstRow..<endRow {
            let (yr, yi) = frame.sample(n)
            let p = 2 * (n + frame.origin)
            let er = yr - Double(frame.predicted[p]), ei = yi - Double(frame.predicted[p + 1])
            unexplained += er * er + ei * ei
        }
        frame.unexplained = unexplained / max(received, 1e-30)
        return frame.unexplained <= Self.maximumUnexplained
    }

    /// Starts `frame`'s decisions from the preamble with its room model (`channel`): the prediction of
    /// what the preamble leaves in the symbols, the transmitted preamble, and the phase at the first
    /// data symbol; nothing decided yet.
    func startPrediction(_ frame: CoherentDetector.Frame) {
        let length = shapes.windowEnd(FrameFormat.symbolCount(payloadBytes: FrameFormat.payloadBytes.upperBound)) + shapes.channelTaps
        frame.predicted = [Float](repeating: 0, count: 2 * (length + frame.origin))
        frame.sent = [Float](repeating: 0, count: 2 * length)
        for m in 0..<shapes.knownPreamble {
            frame.addConvolved(re: shapes.preambleReal[m], im: shapes.preambleImaginary[m], at: m, precursorTaps: shapes.precursorTaps)
            frame.sent[2 * m] = shapes.preambleReal[m]; frame.sent[2 * m + 1] = shapes.preambleImaginary[m]
        }
        frame.phase = shapes.dataStartPhase
    }
}
