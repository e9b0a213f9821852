import RealModule
import SottoDSP

/// The coherent detector's sequence decision: decides a frame's symbols one by one, subtracting the
/// predicted echoes of everything already decided and comparing what remains, over a window of two
/// symbols, with every (current, next) candidate pair passed through the estimated room. A
/// decision-directed phase loop follows the carrier phase. About 45 000 complex multiply-adds per symbol
/// once the candidate parts are filtered through the room (about 1.5 million, once per frame).
struct SequenceDecision {
    let shapes: CandidateShapes
    /// The loop gains and soft feedback's constants (``ReceiverTuning``).
    let tuning: ReceiverTuning
    /// Values a symbol takes (16-FSK: every profile's data symbols; the `InlineArray`s below spell it as a literal).
    static let symbolValues = 16
    /// The stand-in for the symbol before the first (the preamble): one past the last value.
    static let beforeFirst = symbolValues
    /// (current, next) candidate pairs a window compares.
    static let pairs = symbolValues * symbolValues

    /// Decides the next symbol: every (current, next) candidate pair through the room model, against the
    /// received window minus the predicted echoes of what was already decided.
    func decideNext(_ frame: CoherentDetector.Frame) {
        let k = frame.decided.count
        let window = 2 * shapes.samplesPerSymbol
        let parity = k % shapes.profile.subBands
        let previous = k == 0 ? Self.beforeFirst : frame.decided[k - 1]
        let start = shapes.preambleLength + k * shapes.samplesPerSymbol + frame.windowOffset
        let segmentStart = shapes.preambleLength + k * shapes.samplesPerSymbol - shapes.guardSamples  // grid index of segment sample 0
        prepareTables(frame, window: window, lagBase: start - segmentStart + shapes.precursorTaps)
        computeCandidateEnergies(frame, parity: parity, previous: previous, window: window)
        let tables = frame.tables[parity]
        let (br, bi) = (Float(Double.cos(frame.phase)), Float(Double.sin(frame.phase)))
        let (qr, qi) = (Float(frame.rotation.re), Float(-frame.rotation.im))
        var best = (cost: Float.infinity, a: 0, b: 0)
        var row = InlineArray<16, Float>(repeating: .infinity)
        var rowNext = InlineArray<16, Int>(repeating: 0)
        var loop = (re: 0.0, im: 0.0)
        var decisionBest = best
        let stride = 2 * window
        frame.residual.withUnsafeMutableBufferPointer { residual in
            // Residual r = received (de-rotated by the phase loop) - prediction, interleaved complex in the
            // first `stride` floats; the same swapped and signed, (-Im r, Re r), in the next `stride`.
            var residualEnergy: Float = 0
            for j in 0..<window {
                let (yr, yi) = frame.sample(start + j)
                let rr = Float(yr) * qr - Float(yi) * qi, ri = Float(yr) * qi + Float(yi) * qr
                let p = 2 * (start + j + frame.origin)
                residual[2 * j] = rr - frame.predicted[p]
                residual[2 * j + 1] = ri - frame.predicted[p + 1]
                residual[stride + 2 * j] = -residual[2 * j + 1]
                residual[stride + 2 * j + 1] = residual[2 * j]
                residualEnergy += residual[2 * j] * residual[2 * j] + residual[2 * j + 1] * residual[2 * j + 1]
            }
            let r = UnsafeRawPointer(residual.baseAddress!), q = r + stride * MemoryLayout<Float>.stride
            // <r, y> = sum conj(r) y, for a part stored at `offset` in a table: Re = sum r y over the
            // interleaved floats, Im = sum (-Im r, Re r) y; four floats (two complex values) at a time
            // (`stride` = 4 x samplesPerSymbol is a multiple of four).
            @inline(__always) func inner(_ table: UnsafeBufferPointer<Float>, _ offset: Int) -> (Float, Float) {
                let y = UnsafeRawPointer(table.baseAddress! + offset)
                var sumR = SIMD4<Float>(), sumI = SIMD4<Float>()
                for f in Swift.stride(from: 0, to: stride * MemoryLayout<Float>.stride, by: MemoryLayout<SIMD4<Float>>.stride) {
                    let v = y.loadUnaligned(fromByteOffset: f, as: SIMD4<Float>.self)
                    sumR += r.loadUnaligned(fromByteOffset: f, as: SIMD4<Float>.self) * v
                    sumI += q.loadUnaligned(fromByteOffset: f, as: SIMD4<Float>.self) * v
                }
                return (sumR.sum(), sumI.sum())
            }
            // cost(a, b) = |r|^2 - 2 Re(e^{jB} <r, Y1(a) + Y2(a, b)>) + |Y1(a) + Y2(a, b)|^2.
            tables.first.withUnsafeBufferPointer { first in
                tables.second.withUnsafeBufferPointer { second in
                  tables.energies.withUnsafeBufferPointer { allEnergies in
                    let energies = allEnergies.baseAddress! + previous * Self.pairs
                    for a in 0..<Self.symbolValues {
                        let (d1r, d1i) = inner(first, (previous * Self.symbolValues + a) * stride)
                        for b in 0..<Self.symbolValues {
                            let (d2r, d2i) = inner(second, (a * Self.symbolValues + b) * stride)
                            let dr = d1r + d2r, di = d1i + d2i
                            let cost = residualEnergy - 2 * (br * dr - bi * di) + energies[a * Self.symbolValues + b]
                            if cost < row[a] { row[a] = cost; rowNext[a] = b }
                            if cost < best.cost { best = (cost, a, b) }
                        }
                    }
                    decisionBest = best
                    // A second pass takes the hinted symbols as sent (their echoes, and the phase loop's reference).
                    if k < frame.hints.count {
                        best.a = frame.hints[k]
                        if k + 1 < frame.hints.count { best.b = frame.hints[k + 1] }
                    }
                    // Phase loop: the angle between the received window and the best candidate's prediction.
                    let o1 = (previous * Self.symbolValues + best.a) * stride, o2 = (best.a * Self.symbolValues + best.b) * stride
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
        }
        for a in 0..<Self.symbolValues { frame.costs.append(row[a]) }

        let error = Double.atan2(y: loop.im, x: loop.re)
        frame.frequency += tuning.frequencyGain * error
        let step = tuning.phaseGain * error + frame.frequency
        let (sr, si) = (Double.cos(step), Double.sin(step))
        frame.rotation = (frame.rotation.re * sr - frame.rotation.im * si, frame.rotation.re * si + frame.rotation.im * sr)
        // Commit the decided symbol's first samples (they depend on previous and current only) to the prediction.
        let shape1 = shapes.shapes1[parity][previous * Self.symbolValues + best.a], shape2 = shapes.shapes2[parity][best.a * Self.symbolValues + best.b]
        // Soft feedback: the expected waveform under the values' posteriors instead of the decided one's.
        var weights = InlineArray<16, Float>(repeating: 0)
        var soft = false
        if frame.softFeedback && k >= frame.hints.count {
            let level = k == 0 ? Double(best.cost) : frame.residualLevel
            frame.residualLevel = k == 0 ? Double(best.cost) : level + tuning.residualSmoothing * (Double(best.cost) - level)
            let scale = Float(Double(window) / max(level, frame.noiseVariance * Double(window), 1e-30)) * tuning.softScale
            var total: Float = 0
            for a in 0..<Self.symbolValues {
                let w = Float.exp(-(row[a] - decisionBest.cost) * scale)
                weights[a] = w > tuning.softFloor ? w : 0
                total += weights[a]
            }
            for a in 0..<Self.symbolValues { weights[a] /= total }
            soft = weights[decisionBest.a] < 1 - tuning.softFloor
        }
        for i in 0..<shapes.samplesPerSymbol {
            var (xr, xi): (Float, Float) = i < shapes.segmentSplit
                ? (shape1[2 * i], shape1[2 * i + 1])
                : (shape2[2 * (i - shapes.segmentSplit)], shape2[2 * (i - shapes.segmentSplit) + 1])
            if soft {
                xr = 0; xi = 0
                for a in 0..<Self.symbolValues where weights[a] > 0 {
                    if i < shapes.segmentSplit {
                        let shape = shapes.shapes1[parity][previous * Self.symbolValues + a]
                        xr += weights[a] * shape[2 * i]; xi += weights[a] * shape[2 * i + 1]
                    } else {
                        let shape = shapes.shapes2[parity][a * Self.symbolValues + rowNext[a]]
                        xr += weights[a] * shape[2 * (i - shapes.segmentSplit)]; xi += weights[a] * shape[2 * (i - shapes.segmentSplit) + 1]
                    }
                }
            }
            let (sr, si) = (br * xr - bi * xi, br * xi + bi * xr)
            frame.addConvolved(re: sr, im: si, at: segmentStart + i, precursorTaps: shapes.precursorTaps)
            frame.sent[2 * (segmentStart + i)] = sr; frame.sent[2 * (segmentStart + i) + 1] = si
        }
        frame.decided.append(best.a)
        frame.phase += 2 * Double.pi * shapes.toneOffset(k, best.a) * shapes.profile.symbolTime
        frame.phase = frame.phase.remainder(dividingBy: 2 * Double.pi)
    }

    /// The candidate parts through the room as seen in a window (the same for every symbol of a parity):
    /// part 1 by previous × 16 + current, part 2 by current × 16 + next (16: ``symbolValues``), each `2 * window` floats.
    struct FilteredParts {
        var first: [Float]
        var second: [Float]
        /// |Y1 + Y2|^2 per (current, next), for each previous tone once needed (17 x 256: ``beforeFirst`` + 1 times
        /// ``pairs``; NaN until computed).
        var energies: [Float]
    }

    private func prepareTables(_ frame: CoherentDetector.Frame, window: Int, lagBase: Int) {
        guard frame.tables.isEmpty else { return }
        frame.residual = [Float](repeating: 0, count: 4 * window)
        let channel = ReversedChannel(frame.channel)
        for parity in 0..<shapes.profile.subBands {
            var first = [Float](repeating: 0, count: (Self.beforeFirst + 1) * Self.symbolValues * 2 * window)
            var second = [Float](repeating: 0, count: Self.pairs * 2 * window)
            first.withUnsafeMutableBufferPointer { out in
                for (index, shape) in shapes.shapes1[parity].enumerated() where index < Self.pairs || parity == 0 {
                    filter(shape, from: 0, lagBase: lagBase, window: window, channel, into: out, at: index * 2 * window)
                }
            }
            second.withUnsafeMutableBufferPointer { out in
                for (index, shape) in shapes.shapes2[parity].enumerated() {
                    filter(shape, from: shapes.segmentSplit, lagBase: lagBase, window: window, channel, into: out, at: index * 2 * window)
                }
            }
            frame.tables.append(FilteredParts(first: first, second: second, energies: [Float](repeating: .nan, count: (Self.beforeFirst + 1) * Self.pairs)))
        }
    }

    /// |Y1(previous, a) + Y2(a, b)|^2 for every (a, b), computed once per frame and previous tone (into
    /// the parity's `energies`, at previous × ``pairs``).
    private func computeCandidateEnergies(_ frame: CoherentDetector.Frame, parity: Int, previous: Int, window: Int) {
        let base = previous * Self.pairs
        guard frame.tables[parity].energies[base].isNaN else { return }
        let stride = 2 * window
        let tables = frame.tables[parity]
        // Released before the energies are written, so that writing them does not copy the tables.
        var values = InlineArray<256, Float>(repeating: 0)
        tables.first.withUnsafeBufferPointer { first in
            tables.second.withUnsafeBufferPointer { second in
                let first = UnsafeRawPointer(first.baseAddress!), second = UnsafeRawPointer(second.baseAddress!)
                let size = MemoryLayout<Float>.stride
                for a in 0..<Self.symbolValues {
                    let o1 = (previous * Self.symbolValues + a) * stride * size
                    for b in 0..<Self.symbolValues {
                        let o2 = (a * Self.symbolValues + b) * stride * size
                        var energy = SIMD4<Float>()
                        for f in Swift.stride(from: 0, to: stride * size, by: MemoryLayout<SIMD4<Float>>.stride) {
                            let v = first.loadUnaligned(fromByteOffset: o1 + f, as: SIMD4<Float>.self)
                                + second.loadUnaligned(fromByteOffset: o2 + f, as: SIMD4<Float>.self)
                            energy += v * v
                        }
                        values[a * Self.symbolValues + b] = energy.sum()
                    }
                }
            }
        }
        for i in 0..<256 { frame.tables[parity].energies[base + i] = values[i] }
    }

    /// The room model reversed, for `filter`'s dot products: tap `taps - 1 - k` at k, interleaved as
    /// (Re h, -Im h) in `real` and (Im h, Re h) in `imaginary`, so that the real and imaginary parts of
    /// sum x h are plain sums of interleaved products.
    struct ReversedChannel {
        var real: [Float]
        var imaginary: [Float]
        init(_ channel: [Float]) {
            let taps = channel.count / 2
            real = [Float](repeating: 0, count: 2 * taps)
            imaginary = real
            for k in 0..<taps {
                let l = taps - 1 - k
                real[2 * k] = channel[2 * l]; real[2 * k + 1] = -channel[2 * l + 1]
                imaginary[2 * k] = channel[2 * l + 1]; imaginary[2 * k + 1] = channel[2 * l]
            }
        }
    }

    /// A candidate part (interleaved complex shape starting at segment sample `from`) passed through the room
    /// model and cut to the window: y_j = sum_i shape_i h[lagBase + j - i - from], written at `offset` of
    /// `out`. With the channel reversed, each output is a dot product over contiguous samples.
    private func filter(_ shape: [Float], from: Int, lagBase: Int, window: Int, _ channel: ReversedChannel,
                        into out: UnsafeMutableBufferPointer<Float>, at offset: Int) {
        let taps = shapes.channelTaps
        let count = shape.count / 2
        let size = MemoryLayout<Float>.stride
        shape.withUnsafeBufferPointer { shape in
            channel.real.withUnsafeBufferPointer { hA in
                channel.imaginary.withUnsafeBufferPointer { hB in
                    let x = UnsafeRawPointer(shape.baseAddress!)
                    let a = UnsafeRawPointer(hA.baseAddress!), b = UnsafeRawPointer(hB.baseAddress!)
                    for j in 0..<window {
                        // Samples i in low..<high meet taps lag = lagBase + j - from - i, stored reversed at
                        // i + shift.
                        let lag = lagBase + j - from
                        let low = max(0, lag - taps + 1), high = min(count, lag + 1)
                        let shift = taps - 1 - lag
                        var sumR = SIMD4<Float>(), sumI = SIMD4<Float>()
                        var i = low
                        while i + 2 <= high {
                            let v = x.loadUnaligned(fromByteOffset: 2 * i * size, as: SIMD4<Float>.self)
                            sumR += v * a.loadUnaligned(fromByteOffset: 2 * (i + shift) * size, as: SIMD4<Float>.self)
                            sumI += v * b.loadUnaligned(fromByteOffset: 2 * (i + shift) * size, as: SIMD4<Float>.self)
                            i += 2
                        }
                        var sr = sumR.sum(), si = sumI.sum()
                        if i < high {
                            let k = i + shift
                            sr += shape[2 * i] * hA[2 * k] + shape[2 * i + 1] * hA[2 * k + 1]
                            si += shape[2 * i] * hB[2 * k] + shape[2 * i + 1] * hB[2 * k + 1]
                        }
                        out[offset + 2 * j] = sr; out[offset + 2 * j + 1] = si
                    }
                }
            }
        }
    }
}
