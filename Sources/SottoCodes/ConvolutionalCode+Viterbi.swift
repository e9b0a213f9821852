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
    /// For rate 1/2 codes with a multiple of 16 states: per group of 8 butterflies, the signs (+1 for a 0
    /// bit, -1 for a 1) of the two output bits on each of the group's four branches, 8 lanes each, in the
    /// order (even state, input 0), (odd, 0), (even, 1), (odd, 1): `ViterbiTrellis.stepRate2`'s branch
    /// metrics. Empty for other codes.
    private var branchSigns: [Float] = []

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
        if outputsCode != code {
            outputs = code.outputTable()
            outputsCode = code
            branchSigns = Self.branchSigns(outputs: outputs, rate: n, stateCount: stateCount)
        }
        var current = finalMetrics, next = self.next
        finalMetrics = []; self.next = []
        var history = self.history, offsets = self.offsets, decisions = self.decisions, branch = self.branch
        self.history = []; self.offsets = []; self.decisions = []; self.branch = []
        let halfLLRs = self.halfLLRs, outputs = self.outputs, branchSigns = self.branchSigns
        var offset: Double = 0

        halfLLRs.withUnsafeBufferPointer { h in
        outputs.withUnsafeBufferPointer { out in
        decisions.withUnsafeMutableBufferPointer { decisions in
        branch.withUnsafeMutableBufferPointer { bm in
        history.withUnsafeMutableBufferPointer { historyRows in
            for t in 0..<steps {
                let base = t * n
                var best: Float = -.infinity
                let decisionBase = t * words
                if !branchSigns.isEmpty {
                    best = current.withUnsafeBufferPointer { old in
                        next.withUnsafeMutableBufferPointer { new in
                            branchSigns.withUnsafeBufferPointer { signs in
                                Self.stepRate2(old: old.baseAddress!, new: new.baseAddress!, signs: signs.baseAddress!,
                                               llr0: h[base], llr1: h[base + 1], half: half,
                                               decided: decisions.baseAddress! + decisionBase)
                            }
                        }
                    }
                } else {
                    // Branch metrics for every n-bit output symbol: Σ ±LLR/2 (+ for a 0 bit).
                    for symbol in 0..<(1 << n) {
                        var sum: Float = 0
                        for j in 0..<n {
                            let value = h[base + j]
                            sum += (symbol >> (n - 1 - j)) & 1 == 0 ? value : -value
                        }
                        bm[symbol] = sum
                    }
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

    /// The signs table of `branchSigns` for `outputs` (see there), or empty unless the code has rate 1/2 and
    /// a multiple of 16 states.
    private static func branchSigns(outputs: [UInt16], rate: Int, stateCount: Int) -> [Float] {
        let half = stateCount / 2
        guard rate == 2, half % 8 == 0 else { return [] }
        var signs = [Float](repeating: 0, count: 8 * half)
        for group in 0..<(half / 8) {
            for lane in 0..<8 {
                let j = 8 * group + lane, s0 = 2 * j
                // Branches (even, 0), (odd, 0), (even, 1), (odd, 1): register values s0, s0 + 1 and the same with
                // the input bit set.
                for (branch, register) in [s0, s0 + 1, stateCount + s0, stateCount + s0 + 1].enumerated() {
                    let symbol = Int(outputs[register])
                    let slot = 64 * group + 16 * branch + lane
                    signs[slot] = (symbol >> 1) & 1 == 0 ? 1 : -1
                    signs[slot + 8] = symbol & 1 == 0 ? 1 : -1
                }
            }
        }
        return signs
    }

    /// One add-compare-select step of a rate 1/2 code, eight butterflies at a time: the same sums and
    /// comparisons as the scalar loop, in the same order for each state (so the same metrics and decisions),
    /// at about a third of its instructions. Writes the normalised metrics to `new` and the decisions' bits
    /// into `decided` (zeroed); returns the largest metric before normalising.
    @inline(__always)
    private static func stepRate2(old: UnsafePointer<Float>, new: UnsafeMutablePointer<Float>, signs: UnsafePointer<Float>,
                                  llr0: Float, llr1: Float, half: Int, decided: UnsafeMutablePointer<UInt64>) -> Float {
        typealias Lanes = SIMD8<Float>
        let h0 = Lanes(repeating: llr0), h1 = Lanes(repeating: llr1)
        let laneBits = SIMD8<UInt32>(1, 2, 4, 8, 16, 32, 64, 128)
        var bestLanes = Lanes(repeating: -.infinity)
        @inline(__always) func load(_ pointer: UnsafePointer<Float>) -> Lanes { UnsafeRawPointer(pointer).loadUnaligned(as: Lanes.self) }
        /// Bit l set for each lane l of `mask` that is set.
        @inline(__always) func bits(_ mask: SIMDMask<SIMD8<Int32>>) -> UInt64 {
            UInt64(SIMD8<UInt32>(repeating: 0).replacing(with: laneBits, where: mask).wrappedSum())
        }
        var j = 0
        while j < half {
            let pairs0 = load(old + 2 &* j), pairs1 = load(old + (2 &* j &+ 8))
            // States 2j (even) and 2j + 1 (odd) of the eight butterflies.
            let a0 = Lanes(pairs0[0], pairs0[2], pairs0[4], pairs0[6], pairs1[0], pairs1[2], pairs1[4], pairs1[6])
            let a1 = Lanes(pairs0[1], pairs0[3], pairs0[5], pairs0[7], pairs1[1], pairs1[3], pairs1[5], pairs1[7])
            let sign = signs + 8 &* j  // the group's 64 signs
            // Branch metric: (+-llr0) + (+-llr1), as the scalar loop sums it (a product by +-1 is exact).
            let m00 = a0 + (load(sign) * h0 + load(sign + 8) * h1)
            let m01 = a1 + (load(sign + 16) * h0 + load(sign + 24) * h1)
            let m10 = a0 + (load(sign + 32) * h0 + load(sign + 40) * h1)
            let m11 = a1 + (load(sign + 48) * h0 + load(sign + 56) * h1)
            let d0 = m01 .> m00, d1 = m11 .> m10
            let n0 = m00.replacing(with: m01, where: d0), n1 = m10.replacing(with: m11, where: d1)
            UnsafeMutableRawPointer(new + j).storeBytes(of: n0, as: Lanes.self)
            UnsafeMutableRawPointer(new + (j &+ half)).storeBytes(of: n1, as: Lanes.self)
            let upper = j &+ half
            decided[j &>> 6] |= bits(d0) &<< UInt64(j & 63)
            decided[upper &>> 6] |= bits(d1) &<< UInt64(upper & 63)
            bestLanes = bestLanes.replacing(with: n0, where: n0 .> bestLanes)
            bestLanes = bestLanes.replacing(with: n1, where: n1 .> bestLanes)
            j &+= 8
        }
        let best = bestLanes.max()
        // Normalise so metrics stay small whatever the frame length.
        let shift = Lanes(repeating: best)
        var s = 0
        while s < 2 &* half {
            UnsafeMutableRawPointer(new + s).storeBytes(of: load(new + s) - shift, as: Lanes.self)
            s &+= 8
        }
        return best
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
