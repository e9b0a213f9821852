import RealModule
import SottoDSP

/// The coherent detector's sequence decision: decides a frame's symbols one by one, subtracting the
/// predicted echoes of everything already decided and comparing what remains, over a window of two
/// symbols, with every (current, next) candidate pair passed through the estimated room. A
/// decision-directed phase loop follows the carrier phase. About 45 000 complex multiply-adds per symbol
/// once the candidate parts are filtered through the room (about 1.5 million, once per frame).
struct SequenceDecision {
    let shapes: CandidateShapes
    /// Decision-directed phase loop gains (per symbol): phase and frequency.
    static let phaseGain = 0.3, frequencyGain = 0.02

    /// Decides the next symbol: every (current, next) candidate pair through the room model, against the
    /// received window minus the predicted echoes of what was already decided.
    func decideNext(_ frame: CoherentDetector.Frame) {
        let k = frame.decided.count
        let window = 2 * shapes.samplesPerSymbol
        let parity = k % shapes.profile.subBands
        let previous = k == 0 ? 16 : frame.decided[k - 1]
        let start = shapes.preambleLength + k * shapes.samplesPerSymbol + frame.windowOffset
        let segmentStart = shapes.preambleLength + k * shapes.samplesPerSymbol - shapes.guardSamples  // grid index of segment sample 0
        prepareTables(frame, window: window, lagBase: start - segmentStart + shapes.precursorTaps)
        let tables = frame.tables[parity]
        let energies = candidateEnergies(frame, parity: parity, previous: previous, window: window)
        let (br, bi) = (Float(Double.cos(frame.phase)), Float(Double.sin(frame.phase)))
        let (qr, qi) = (Float(frame.rotation.re), Float(-frame.rotation.im))
        var best = (cost: Float.infinity, a: 0, b: 0)
        var row = [Float](repeating: .infinity, count: 16)
        var loop = (re: 0.0, im: 0.0)
        frame.residual.withUnsafeMutableBufferPointer { residual in
            // Residual r = received (de-rotated by the phase loop) - prediction.
            var residualEnergy: Float = 0
            for j in 0..<window {
                let (yr, yi) = frame.sample(start + j)
                let rr = Float(yr) * qr - Float(yi) * qi, ri = Float(yr) * qi + Float(yi) * qr
                let p = 2 * (start + j + frame.origin)
                residual[2 * j] = rr - frame.predicted[p]
                residual[2 * j + 1] = ri - frame.predicted[p + 1]
                residualEnergy += residual[2 * j] * residual[2 * j] + residual[2 * j + 1] * residual[2 * j + 1]
            }
            // <r, y> = sum conj(r) y, for a part stored at `offset` in a table.
            func inner(_ table: UnsafeBufferPointer<Float>, _ offset: Int) -> (Float, Float) {
                var sr: Float = 0, si: Float = 0
                for j in 0..<window {
                    let rr = residual[2 * j], ri = residual[2 * j + 1], yr = table[offset + 2 * j], yi = table[offset + 2 * j + 1]
                    sr += rr * yr + ri * yi
                    si += rr * yi - ri * yr
                }
                return (sr, si)
            }
            // cost(a, b) = |r|^2 - 2 Re(e^{jB} <r, Y1(a) + Y2(a, b)>) + |Y1(a) + Y2(a, b)|^2.
            tables.first.withUnsafeBufferPointer { first in
                tables.second.withUnsafeBufferPointer { second in
                    let stride = 2 * window
                    for a in 0..<16 {
                        let (d1r, d1i) = inner(first, (previous * 16 + a) * stride)
                        for b in 0..<16 {
                            let (d2r, d2i) = inner(second, (a * 16 + b) * stride)
                            let dr = d1r + d2r, di = d1i + d2i
                            let cost = residualEnergy - 2 * (br * dr - bi * di) + energies[a * 16 + b]
                            if cost < row[a] { row[a] = cost }
                            if cost < best.cost { best = (cost, a, b) }
                        }
                    }
                    // Phase loop: the angle between the received window and the best candidate's prediction.
                    let o1 = (previous * 16 + best.a) * stride, o2 = (best.a * 16 + best.b) * stride
                    for j in 0..<window {
                        let yr = first[o1 + 2 * j] + second[o2 + 2 * j], yi = first[o1 + 2 * j + 1] + second[o2 + 2 * j + 1]
                        let p = 2 * (start + j + frame.origin)
                        let pr = Double(br * yr - bi * yi + frame.predicted[p]), pi = Double(br * yi + bi * yr + frame.predicted[p + 1])
                        let rr = Double(residual[2 * j] + frame.predicted[p]), ri = Double(residual[2 * j + 1] + frame.predicted[p + 1])
                        loop.re += pr * rr + pi * ri
                        loop.im += pr * ri - pi * rr
                    }
                }
            }
        }
        frame.costs += row
        let error = Double.atan2(y: loop.im, x: loop.re)
        frame.frequency += Self.frequencyGain * error
        let step = Self.phaseGain * error + frame.frequency
        let (sr, si) = (Double.cos(step), Double.sin(step))
        frame.rotation = (frame.rotation.re * sr - frame.rotation.im * si, frame.rotation.re * si + frame.rotation.im * sr)
        // Commit the decided symbol's first samples (they depend on previous and current only) to the prediction.
        let shape1 = shapes.shapes1[parity][previous * 16 + best.a], shape2 = shapes.shapes2[parity][best.a * 16 + best.b]
        for i in 0..<shapes.samplesPerSymbol {
            let (xr, xi): (Float, Float) = i < shapes.segmentSplit
                ? (shape1[2 * i], shape1[2 * i + 1])
                : (shape2[2 * (i - shapes.segmentSplit)], shape2[2 * (i - shapes.segmentSplit) + 1])
            let (sr, si) = (br * xr - bi * xi, br * xi + bi * xr)
            frame.addConvolved(re: sr, im: si, at: segmentStart + i, precursorTaps: shapes.precursorTaps)
            frame.sent[2 * (segmentStart + i)] = sr; frame.sent[2 * (segmentStart + i) + 1] = si
        }
        frame.decided.append(best.a)
        frame.phase += 2 * Double.pi * shapes.toneOffset(k, best.a) * shapes.profile.symbolTime
        frame.phase = frame.phase.remainder(dividingBy: 2 * Double.pi)
    }

    /// The candidate parts through the room as seen in a window (the same for every symbol of a parity):
    /// part 1 by previous * 16 + current, part 2 by current * 16 + next, each `2 * window` floats.
    struct FilteredParts {
        var first: [Float]
        var second: [Float]
        /// |Y1 + Y2|^2 per (current, next), for each previous tone once needed (17 x 256; NaN until computed).
        var energies: [Float]
    }

    private func prepareTables(_ frame: CoherentDetector.Frame, window: Int, lagBase: Int) {
        guard frame.tables.isEmpty else { return }
        frame.residual = [Float](repeating: 0, count: 2 * window)
        for parity in 0..<shapes.profile.subBands {
            var first = [Float](repeating: 0, count: 17 * 16 * 2 * window)
            var second = [Float](repeating: 0, count: 256 * 2 * window)
            first.withUnsafeMutableBufferPointer { out in
                for (index, shape) in shapes.shapes1[parity].enumerated() where index < 16 * 16 || parity == 0 {
                    filter(shape, from: 0, lagBase: lagBase, window: window, frame, into: out, at: index * 2 * window)
                }
            }
            second.withUnsafeMutableBufferPointer { out in
                for (index, shape) in shapes.shapes2[parity].enumerated() {
                    filter(shape, from: shapes.segmentSplit, lagBase: lagBase, window: window, frame, into: out, at: index * 2 * window)
                }
            }
            frame.tables.append(FilteredParts(first: first, second: second, energies: [Float](repeating: .nan, count: 17 * 256)))
        }
    }

    /// |Y1(previous, a) + Y2(a, b)|^2 for every (a, b), computed once per frame and previous tone.
    private func candidateEnergies(_ frame: CoherentDetector.Frame, parity: Int, previous: Int, window: Int) -> ArraySlice<Float> {
        let base = previous * 256
        if frame.tables[parity].energies[base].isNaN {
            let stride = 2 * window
            var values = [Float](repeating: 0, count: 256)
            frame.tables[parity].first.withUnsafeBufferPointer { first in
                frame.tables[parity].second.withUnsafeBufferPointer { second in
                    for a in 0..<16 {
                        let o1 = (previous * 16 + a) * stride
                        for b in 0..<16 {
                            let o2 = (a * 16 + b) * stride
                            var energy: Float = 0
                            for j in 0..<stride {
                                let v = first[o1 + j] + second[o2 + j]
                                energy += v * v
                            }
                            values[a * 16 + b] = energy
                        }
                    }
                }
            }
            frame.tables[parity].energies.replaceSubrange(base..<(base + 256), with: values)
        }
        return frame.tables[parity].energies[base..<(base + 256)].withUnsafeBufferPointer { ArraySlice($0) }
    }

    /// A candidate part (interleaved complex shape starting at segment sample `from`) passed through the room
    /// model and cut to the window: y_j = sum_i shape_i h[lagBase + j - i], written at `offset` of `out`.
    private func filter(_ shape: [Float], from: Int, lagBase: Int, window: Int, _ frame: CoherentDetector.Frame,
                        into out: UnsafeMutableBufferPointer<Float>, at offset: Int) {
        let taps = shapes.channelTaps
        let count = shape.count / 2
        shape.withUnsafeBufferPointer { shape in
            frame.channel.withUnsafeBufferPointer { h in
                for j in 0..<window {
                    var sr: Float = 0, si: Float = 0
                    let lo = max(0, lagBase + j - taps + 1 - from), hi = min(count, lagBase + j + 1 - from)
                    if lo < hi {
                        for i in lo..<hi {
                            let l = lagBase + j - (i + from)
                            let xr = shape[2 * i], xi = shape[2 * i + 1], hr = h[2 * l], hi = h[2 * l + 1]
                            sr += xr * hr - xi * hi
                            si += xr * hi + xi * hr
                        }
                    }
                    out[offset + 2 * j] = sr; out[offset + 2 * j + 1] = si
                }
            }
        }
    }
}
