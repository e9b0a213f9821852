/// The forward (add-compare-select) pass of the Viterbi algorithm, shared by ``ConvolutionalCode/decode(llrs:messageBits:)``
/// and the list decoder. All buffers are allocated once per call; the per-step loop allocates nothing.
struct ViterbiTrellis {
    /// Trellis steps: message bits plus K − 1 tail bits.
    let steps: Int
    /// 64-bit words of survivor decisions per step.
    let wordsPerStep: Int
    /// Bit s of step t's words: state s at time t + 1 came from the odd predecessor ((s << 1) & mask) | 1.
    var decisions: [UInt64]
    /// Half-LLRs, sanitized, `steps × n` (missing inputs are 0).
    var halfLLRs: [Float]
    /// If kept: path metrics of every state at every time 0 ... steps, each row normalised by its maximum.
    var history: [Float]
    /// If kept: the amount subtracted from row t, cumulated (true metric = history + offset).
    var offsets: [Double]
    /// Normalised metrics after the last step.
    var finalMetrics: [Float]
    /// Total amount subtracted from the final metrics.
    var finalOffset: Double

    init(code: ConvolutionalCode, llrs: [Float], messageBits: Int, keepHistory: Bool) {
        let k = code.constraintLength
        let n = code.rate
        let stateCount = code.stateCount
        let half = stateCount / 2
        let steps = messageBits + k - 1
        let words = (stateCount + 63) / 64
        let codedCount = steps * n
        let halfLLRs = [Float](unsafeUninitializedCapacity: codedCount) { buffer, initialized in
            llrs.withUnsafeBufferPointer { input in
                for i in 0..<codedCount { buffer[i] = i < input.count ? 0.5 * LLR.sanitized(input[i]) : 0 }
            }
            initialized = codedCount
        }
        var decisions = [UInt64](repeating: 0, count: steps * words)
        var history = keepHistory ? [Float](repeating: -.infinity, count: (steps + 1) * stateCount) : []
        var offsets = keepHistory ? [Double](repeating: 0, count: steps + 1) : []
        var current = [Float](repeating: -.infinity, count: stateCount)
        current[0] = 0
        if keepHistory { history[0] = 0 }
        var next = [Float](repeating: -.infinity, count: stateCount)
        var branch = [Float](repeating: 0, count: 1 << n)
        let outputs = code.outputTable()
        var offset: Double = 0

        halfLLRs.withUnsafeBufferPointer { h in
        outputs.withUnsafeBufferPointer { out in
        decisions.withUnsafeMutableBufferPointer { decisions in
        branch.withUnsafeMutableBufferPointer { bm in
        history.withUnsafeMutableBufferPointer { historyRows in
            for t in 0..<steps {
                // Branch metrics for every n-bit output symbol: Σ ±LLR/2 (+ for a 0 bit).
                let base = t * n
                for symbol in 0..<(1 << n) {
                    var sum: Float = 0
                    for j in 0..<n {
                        let value = h[base + j]
                        sum += (symbol >> (n - 1 - j)) & 1 == 0 ? value : -value
                    }
                    bm[symbol] = sum
                }
                var best: Float = -.infinity
                let decisionBase = t * words
                current.withUnsafeBufferPointer { old in
                    next.withUnsafeMutableBufferPointer { new in
                        // Butterfly: states 2j and 2j + 1 feed j (input 0) and j + S/2 (input 1).
                        for j in 0..<half {
                            let s0 = 2 * j, s1 = s0 + 1
                            let a0 = old[s0], a1 = old[s1]
                            let m00 = a0 + bm[Int(out[s0])]
                            let m01 = a1 + bm[Int(out[s1])]
                            let m10 = a0 + bm[Int(out[stateCount + s0])]
                            let m11 = a1 + bm[Int(out[stateCount + s1])]
                            let d0 = m01 > m00
                            let d1 = m11 > m10
                            let n0 = d0 ? m01 : m00
                            let n1 = d1 ? m11 : m10
                            new[j] = n0
                            new[j + half] = n1
                            let upper = j + half
                            decisions[decisionBase + (j >> 6)] |= UInt64(d0 ? 1 : 0) << UInt64(j & 63)
                            decisions[decisionBase + (upper >> 6)] |= UInt64(d1 ? 1 : 0) << UInt64(upper & 63)
                            best = max(best, max(n0, n1))
                        }
                        // Normalise so metrics stay small whatever the frame length.
                        for s in 0..<stateCount { new[s] -= best }
                    }
                }
                offset += Double(best)
                swap(&current, &next)
                if keepHistory {
                    let row = (t + 1) * stateCount
                    current.withUnsafeBufferPointer { metrics in
                        for s in 0..<stateCount { historyRows[row + s] = metrics[s] }
                    }
                    offsets[t + 1] = offset
                }
            }
        }
        }
        }
        }
        }
        self.steps = steps
        self.wordsPerStep = words
        self.decisions = decisions
        self.halfLLRs = halfLLRs
        self.history = history
        self.offsets = offsets
        self.finalMetrics = current
        self.finalOffset = offset
    }

    /// The input bit that leads into `state`.
    @inline(__always)
    static func inputBit(of state: Int, constraintLength: Int) -> Int { state >> (constraintLength - 2) }

    /// Traces the survivor path back from `endState` at the last step.
    /// - Returns: the first `messageBits` decoded bits.
    func traceBack(endState: Int, messageBits: Int, code: ConvolutionalCode) -> [UInt8] {
        let k = code.constraintLength
        let mask = code.stateCount - 1
        let words = wordsPerStep
        return [UInt8](unsafeUninitializedCapacity: messageBits) { bits, initialized in
            decisions.withUnsafeBufferPointer { decisions in
                var state = endState
                for t in stride(from: steps - 1, through: 0, by: -1) {
                    if t < messageBits { bits[t] = UInt8(Self.inputBit(of: state, constraintLength: k)) }
                    let word = decisions[t * words + (state >> 6)]
                    let fromOdd = Int((word >> UInt64(state & 63)) & 1)
                    state = ((state << 1) & mask) | fromOdd
                }
            }
            initialized = messageBits
        }
    }
}

extension ConvolutionalCode {
    /// Soft-decision Viterbi decoding (maximum likelihood over the zero-terminated trellis, correlation metric).
    ///
    /// - Parameters:
    ///   - llrs: ``codedBitCount(messageBits:)`` log-likelihood ratios in transmission order (before any interleaving),
    ///     positive meaning 0 is more likely. `NaN` counts as 0 and magnitudes are clamped to ``LLR/limit``; missing
    ///     values count as 0 (erasures) and extra values are ignored, so no input traps.
    ///   - messageBits: Message length in bits (without the tail). Negative counts decode nothing.
    /// - Returns: `messageBits` bits, 0 or 1 (the tail dropped).
    public func decode(llrs: [Float], messageBits: Int) -> [UInt8] {
        guard messageBits >= 0 else { return [] }
        let trellis = ViterbiTrellis(code: self, llrs: llrs, messageBits: messageBits, keepHistory: false)
        return trellis.traceBack(endState: 0, messageBits: messageBits, code: self)
    }
}
