/// Soft demapping of M-ary symbols (M = 2^bitsPerSymbol) to per-bit log-likelihood ratios.
///
/// Symbol index `m` carries its bits most significant first in natural binary (symbol 5 of 16 is 0101); a modem
/// that Gray-maps does so before calling. For each bit the LLR is the exact
/// `log Σ_{m: bit=0} p(obs | m) − log Σ_{m: bit=1} p(obs | m)`, computed with log-sum-exp so it is stable for
/// any spread of inputs.
///
/// ```swift
/// var llrs = [Float](repeating: 0, count: 4 * symbolCount)
/// row.withUnsafeBufferPointer { SymbolDemapper.bitLLRs(symbolLogLikelihoods: $0, bitsPerSymbol: 4, into: &llrs, at: 4 * s) }
/// ```
public enum SymbolDemapper {
    /// Largest supported `bitsPerSymbol`.
    public static let maximumBitsPerSymbol = 12
    /// Below this, a per-bit sum of exp(v − top) may have lost its precision to underflow.
    static let underflowGuard: Float = 1e-30

    /// Writes `bitsPerSymbol` bit LLRs (positive ⇒ 0) for one symbol into `output[offset ..< offset + bitsPerSymbol]`.
    ///
    /// - Parameters:
    ///   - symbolLogLikelihoods: `2^bitsPerSymbol` values of log p(observation | symbol m), up to a common constant.
    ///     `NaN` and −∞ mean "impossible symbol"; +∞ is treated as the largest finite value. If every symbol is
    ///     impossible, the LLRs are 0.
    ///   - bitsPerSymbol: 1 ... ``maximumBitsPerSymbol``.
    ///   - output: Receives the LLRs, each finite and within ±``LLR/limit``.
    ///   - offset: First index written.
    /// - Precondition: `symbolLogLikelihoods.count == 1 << bitsPerSymbol` and the output range is in bounds.
    public static func bitLLRs(symbolLogLikelihoods: UnsafeBufferPointer<Float>, bitsPerSymbol: Int,
                               into output: inout [Float], at offset: Int) {
        precondition((1...maximumBitsPerSymbol).contains(bitsPerSymbol), "bitsPerSymbol out of range")
        let m = 1 << bitsPerSymbol
        precondition(symbolLogLikelihoods.count == m, "need 2^bitsPerSymbol log-likelihoods")
        precondition(offset >= 0 && offset + bitsPerSymbol <= output.count, "output range out of bounds")
        if bitsPerSymbol == 4,
           output.withUnsafeMutableBufferPointer({ bitLLRs16(symbolLogLikelihoods.baseAddress!, into: $0.baseAddress! + offset) }) {
            return
        }
        bitLLRsAnySize(symbolLogLikelihoods: symbolLogLikelihoods, bitsPerSymbol: bitsPerSymbol, into: &output, at: offset)
    }

    /// A log-likelihood made usable: NaN → −∞ (impossible), +∞ → largest finite.
    @inline(__always)
    static func clean(_ v: Float) -> Float { v.isNaN ? -.infinity : min(v, .greatestFiniteMagnitude) }

    /// Below this, a per-bit sum of exp(v − top) in Double may have lost its precision to underflow (about
    /// 690 nats below the top, where Float's sums give out at about 69).
    static let underflowGuardDouble = 1e-300

    /// The 16-ary case (4 bits, the frame's symbols) of ``bitLLRs(symbolLogLikelihoods:bitsPerSymbol:into:at:)``:
    /// the same sums, in Double and in straight-line code on stack buffers, so that one exp per symbol value
    /// and one log per side serve every bit of a symbol whose bits are up to about 690 nats apart. In Float,
    /// the bits of a clean symbol (tens to hundreds of nats) took the weak side's second pass, about 40 exps
    /// and logs a symbol: a third of a frame's decoding. Within float round-off of the general loop's values.
    /// - Returns: false, having written nothing, when a side's sum underflows even in Double or no value is
    ///   possible: the general loop handles those.
    @inline(__always)
    static func bitLLRs16(_ input: UnsafePointer<Float>, into out: UnsafeMutablePointer<Float>) -> Bool {
        withUnsafeTemporaryAllocation(of: Double.self, capacity: 24) { buffer in
            let weights = buffer.baseAddress!
            var top: Float = -.infinity
            for s in 0..<16 { top = max(top, clean(input[s])) }
            guard top > -.infinity else { return false }
            let topDouble = Double(top)
            for s in 0..<16 { weights[s] = cExp(Double(clean(input[s])) - topDouble) }
            // Each bit's two sums from shared partial sums (bit b, most significant first, of symbol s is
            // (s >> (3 - b)) & 1): pairs, quads and halves of the 16 weights, 36 additions instead of 64.
            let pairs = weights + 16
            for i in 0..<8 { pairs[i] = weights[2 * i] + weights[2 * i + 1] }
            let quads = (pairs[0] + pairs[1], pairs[2] + pairs[3], pairs[4] + pairs[5], pairs[6] + pairs[7])
            var evens = 0.0, odds = 0.0
            for i in 0..<8 { evens += weights[2 * i]; odds += weights[2 * i + 1] }
            // Bits 0...3: the sums of the symbols whose bit is 0 and of those whose bit is 1.
            let sums0 = SIMD4<Double>(quads.0 + quads.1, quads.0 + quads.2, (pairs[0] + pairs[2]) + (pairs[4] + pairs[6]), evens)
            let sums1 = SIMD4<Double>(quads.2 + quads.3, quads.1 + quads.3, (pairs[1] + pairs[3]) + (pairs[5] + pairs[7]), odds)
            for b in 0..<4 where !(sums0[b] >= underflowGuardDouble && sums1[b] >= underflowGuardDouble) { return false }
            for b in 0..<4 { out[b] = LLR.sanitized(Float(cLog(sums0[b]) - cLog(sums1[b]))) }
            return true
        }
    }

    /// ``bitLLRs(symbolLogLikelihoods:bitsPerSymbol:into:at:)`` for any number of bits, one symbol value at a
    /// time.
    static func bitLLRsAnySize(symbolLogLikelihoods: UnsafeBufferPointer<Float>, bitsPerSymbol: Int,
                               into output: inout [Float], at offset: Int) {
        let m = 1 << bitsPerSymbol
        var top: Float = -.infinity
        for v in symbolLogLikelihoods { top = max(top, clean(v)) }
        withUnsafeTemporaryAllocation(of: Float.self, capacity: m) { weights in
            // exp(v − top) once per symbol; each bit's sums reuse them.
            for s in 0..<m { weights[s] = cExp(clean(symbolLogLikelihoods[s]) - top) }
            output.withUnsafeMutableBufferPointer { out in
                guard top > -.infinity else {
                    for b in 0..<bitsPerSymbol { out[offset + b] = 0 }
                    return
                }
                for b in 0..<bitsPerSymbol {
                    let shift = bitsPerSymbol - 1 - b
                    // The side holding the top symbol sums to at least 1.
                    var sum0: Float = 0, sum1: Float = 0
                    for s in 0..<m {
                        if (s >> shift) & 1 == 0 { sum0 += weights[s] } else { sum1 += weights[s] }
                    }
                    var llr: Float
                    if sum0 >= underflowGuard && sum1 >= underflowGuard {
                        llr = cLog(sum0) - cLog(sum1)
                    } else {
                        // One side is more than ~69 nats below the top: redo it relative to its own maximum.
                        let weakBit = sum0 < sum1 ? 0 : 1
                        var weakTop: Float = -.infinity
                        for s in 0..<m where (s >> shift) & 1 == weakBit {
                            weakTop = max(weakTop, clean(symbolLogLikelihoods[s]))
                        }
                        if weakTop == -.infinity {
                            llr = LLR.limit
                        } else {
                            var weakSum: Float = 0
                            for s in 0..<m where (s >> shift) & 1 == weakBit {
                                weakSum += cExp(clean(symbolLogLikelihoods[s]) - weakTop)
                            }
                            let strongSum = weakBit == 0 ? sum1 : sum0
                            // log Σ_strong − log Σ_weak, each relative to its own maximum.
                            llr = cLog(strongSum) + (top - weakTop) - cLog(weakSum)
                        }
                        if weakBit == 0 { llr = -llr }
                    }
                    out[offset + b] = LLR.sanitized(llr)
                }
            }
        }
    }
}
