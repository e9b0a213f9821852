/// The forward (add-compare-select) pass of the Viterbi algorithm, shared by ``ConvolutionalCode/decode(llrs:messageBits:)``,
/// ``ViterbiDecoder`` and the list decoder. Its buffers are kept between runs (`run` reuses their capacity), and the
/// per-step loop allocates nothing.
struct ViterbiTrellis {
    /// Trellis steps: message bits plus K − 1 tail bits.
    private(set) var steps = 0
    /// 64-bit words of survivor decisions per step.
    private(set) var wordsPerStep = 0
    /// Bit s of step t's words: state s at time t + 1 came from the odd predecessor ((s << 1) & mask) | 1.
    private(set) var decisions: [UInt64] = []
    /// Half-LLRs, sanitized, `steps × n` (missing inputs are 0).
    private(set) var halfLLRs: [Float] = []
    /// If kept: path metrics of every state at every time 0 ... steps, each row normalised by its maximum.
    private(set) var history: [Float] = []
    /// If kept: the amount subtracted from row t, cumulated (true metric = history + offset).
    private(set) var offsets: [Double] = []
    /// Normalised metrics after the last step.
    private(set) var finalMetrics: [Float] = []
    /// Total amount subtracted from the final metrics.
    private(set) var finalOffset: Double = 0
    /// Scratch: the next step's metrics, the branch metrics, and the code's output table.
    private var next: [Float] = []
    private var branch: [Float] = []
    private var outputs: [UInt16] = []
    private var outputsCode: ConvolutionalCode?

    /// An empty trellis, for `run`.
    init() {}

    init(code: ConvolutionalCode, llrs: [Float], messageBits: Int, keepHistory: Bool) {
        llrs.withUnsafeBufferPointer { run(code: code, llrs: $0, messageBits: messageBits, keepHistory: keepHistory) }
    }

    /// Sets `array` to `count` copies of `value`, reusing its storage when it is large enough.
    private static func fill<T>(_ array: inout [T], _ value: T, count: Int) {
        array.removeAll(keepingCapacity: true)
        array.append(contentsOf: repeatElement(value, count: count))
    }

    /// Runs the forward pass over `llrs` for a message of `messageBits` bits (replacing the previous run).
    mutating func run(code: ConvolutionalCode, llrs: UnsafeBufferPointer<Float>, messageBits: Int, keepHistory: Bool) {
        let k = code.constraintLength
        let n = code.rate
        let stateCount = code.stateCount
        let half = stateCount / 2
        let steps = messageBits + k - 1
        let words = (stateCount + 63) / 64
        let codedCount = steps * n
        Self.fill(&halfLLRs, 0, count: codedCount)
        halfLLRs.withUnsafeMutableBufferPointer { buffer in
            for i in 0..<codedCount { buffer[i] = i < llrs.count ? 0.5 * LLR.sanitized(llrs[i]) : 0 }
        }
        Self.fill(&decisions, 0, count: steps * words)
        Self.fill(&history, -.infinity, count: keepHistory ? (steps + 1) * stateCount : 0)
        Self.fill(&offsets, 0, count: keepHistory ? steps + 1 : 0)
        Self.fill(&finalMetrics, -.infinity, count: stateCount)
        finalMetrics[0] = 0
        if keepHistory { history[0] = 0 }
        Self.fill(&next, -.infinity, count: stateCount)
        Self.fill(&branch, 0, count: 1 << n)
        if outputsCode != code { outputs = code.outputTable(); outputsCode = code }
        var current = finalMetrics, next = self.next
        finalMetrics = []; self.next = []
        var history = self.history, offsets = self.offsets, decisions = self.decisions, branch = self.branch
        self.history = []; self.offsets = []; self.decisions = []; self.branch = []
        let halfLLRs = self.halfLLRs, outputs = self.outputs
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
                current.withUnsafeBufferPointer { oldBuffer in
                    next.withUnsafeMutableBufferPointer { newBuffer in
                        // Raw pointers and wrapping index arithmetic: the bounds and overflow checks of the
                        // plain loop cost about as much as the add-compare-select itself.
                        let old = oldBuffer.baseAddress!, new = newBuffer.baseAddress!
                        let output = out.baseAddress!, metric = UnsafePointer(bm.baseAddress!)
                        let decided = decisions.baseAddress! + decisionBase
                        // Butterfly: states 2j and 2j + 1 feed j (input 0) and j + S/2 (input 1).
                        var j = 0
                        while j < half {
                            let s0 = j &<< 1, s1 = s0 | 1
                            let a0 = old[s0], a1 = old[s1]
                            let m00 = a0 + metric[Int(output[s0])]
                            let m01 = a1 + metric[Int(output[s1])]
                            let m10 = a0 + metric[Int(output[stateCount &+ s0])]
                            let m11 = a1 + metric[Int(output[stateCount &+ s1])]
                            let d0 = m01 > m00
                            let d1 = m11 > m10
                            let n0 = d0 ? m01 : m00
                            let n1 = d1 ? m11 : m10
                            let upper = j &+ half
                            new[j] = n0
                            new[upper] = n1
                            decided[j &>> 6] |= UInt64(d0 ? 1 : 0) &<< UInt64(j & 63)
                            decided[upper &>> 6] |= UInt64(d1 ? 1 : 0) &<< UInt64(upper & 63)
                            best = max(best, max(n0, n1))
                            j &+= 1
                        }
                        // Normalise so metrics stay small whatever the frame length.
                        var s = 0
                        while s < stateCount { new[s] -= best; s &+= 1 }
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
        self.history = history
        self.offsets = offsets
        self.finalMetrics = current
        self.next = next
        self.branch = branch
        self.finalOffset = offset
    }

    /// The input bit that leads into `state`.
    @inline(__always)
    static func inputBit(of state: Int, constraintLength: Int) -> Int { state >> (constraintLength - 2) }

    /// Traces the survivor path back from `endState` at the last step.
    /// - Returns: the first `messageBits` decoded bits.
    func traceBack(endState: Int, messageBits: Int, code: ConvolutionalCode) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: messageBits) { bits, initialized in
            traceBack(endState: endState, messageBits: messageBits, code: code, into: bits)
            initialized = messageBits
        }
    }

    /// `traceBack`, writing the bits into the first `messageBits` elements of `bits`.
    func traceBack(endState: Int, messageBits: Int, code: ConvolutionalCode, into bits: UnsafeMutableBufferPointer<UInt8>) {
        let k = code.constraintLength
        let mask = code.stateCount - 1
        let words = wordsPerStep
        decisions.withUnsafeBufferPointer { decisions in
            var state = endState
            for t in stride(from: steps - 1, through: 0, by: -1) {
                if t < messageBits { bits[t] = UInt8(Self.inputBit(of: state, constraintLength: k)) }
                let word = decisions[t * words + (state >> 6)]
                let fromOdd = Int((word >> UInt64(state & 63)) & 1)
                state = ((state << 1) & mask) | fromOdd
            }
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

/// A soft-decision Viterbi decoder that keeps its buffers between calls: once they have grown to the longest
/// message it decodes, decoding allocates nothing (a receiver that tries many frame lengths for every detection
/// would otherwise allocate the trellis for each try). Same results as ``ConvolutionalCode/decode(llrs:messageBits:)``.
public struct ViterbiDecoder {
    /// The code it decodes.
    public let code: ConvolutionalCode
    private var trellis = ViterbiTrellis()

    public init(code: ConvolutionalCode) { self.code = code }

    /// Decodes `llrs` (as ``ConvolutionalCode/decode(llrs:messageBits:)``) into the first `messageBits` elements
    /// of `bits` (0 or 1 each).
    /// - Precondition: `messageBits >= 0` and `bits.count >= messageBits`.
    public mutating func decode(llrs: UnsafeBufferPointer<Float>, messageBits: Int, into bits: UnsafeMutableBufferPointer<UInt8>) {
        precondition(messageBits >= 0 && bits.count >= messageBits, "ViterbiDecoder: \(messageBits) bits into \(bits.count)")
        trellis.run(code: code, llrs: llrs, messageBits: messageBits, keepHistory: false)
        trellis.traceBack(endState: 0, messageBits: messageBits, code: code, into: bits)
    }
}
