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

        // Clean values: NaN → −∞ (impossible), +∞ → largest finite.
        @inline(__always) func clean(_ v: Float) -> Float {
            v.isNaN ? -.infinity : min(v, .greatestFiniteMagnitude)
        }
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
