/// A binary convolutional code of rate 1/n, zero-tail terminated, with soft-decision Viterbi and list decoding.
///
/// Generators are written the usual octal way: the most significant of the `constraintLength` bits taps the current
/// input bit, the least significant the oldest. So `0o133, 0o171` is the K = 7 code of NASA and IEEE 802.11, whose
/// impulse response (one 1 then zeros) is `11 01 11 11 00 10 11`. ``encode(_:)`` appends K − 1 zero tail bits,
/// so the trellis starts and ends in state 0.
///
/// ```swift
/// let code = ConvolutionalCode.k7r12
/// let coded = code.encode(Bits.unpack(frame))             // (8 × frame.count + 6) × 2 bits
/// // ... channel: llr > 0 means "0 more likely"
/// let bits = code.decode(llrs: llrs, messageBits: 8 * frame.count)
/// let list = code.listDecode(llrs: llrs, messageBits: 8 * frame.count, listSize: 8)   // try a CRC on each
/// ```
public struct ConvolutionalCode: Sendable, Hashable {
    /// Constraint length K: the current input bit and K − 1 remembered bits determine each output.
    public let constraintLength: Int
    /// One polynomial per output bit, octal-style, each below `1 << constraintLength`.
    public let generators: [UInt32]
    /// Coded bits per input bit (n of rate 1/n).
    public var rate: Int { generators.count }
    /// Number of trellis states, 2^(K − 1).
    public var stateCount: Int { 1 << (constraintLength - 1) }

    /// Supported constraint lengths (the Viterbi decoder keeps 2^(K − 1) states).
    public static let supportedConstraintLengths: ClosedRange<Int> = 2...16
    /// Supported numbers of generators.
    public static let supportedRates: ClosedRange<Int> = 1...8

    /// A code with the given constraint length and generator polynomials.
    /// - Precondition: K in ``supportedConstraintLengths``, `generators.count` in ``supportedRates``, and every
    ///   generator non-zero and below `1 << constraintLength`.
    public init(constraintLength: Int, generators: [UInt32]) {
        precondition(Self.supportedConstraintLengths.contains(constraintLength), "unsupported constraint length")
        precondition(Self.supportedRates.contains(generators.count), "unsupported number of generators")
        precondition(generators.allSatisfy { $0 != 0 && $0 < (UInt32(1) << UInt32(constraintLength)) },
                     "each generator must be non-zero and fit in constraintLength bits")
        self.constraintLength = constraintLength
        self.generators = generators
    }

    /// K = 7, rate 1/2, generators (133, 171): the NASA / IEEE 802.11 code, free distance 10.
    public static let k7r12 = ConvolutionalCode(constraintLength: 7, generators: [0o133, 0o171])
    /// K = 9, rate 1/2, generators (561, 753): the best K = 9 rate 1/2 code (IS-95, CDMA2000), free distance 12.
    public static let k9r12 = ConvolutionalCode(constraintLength: 9, generators: [0o561, 0o753])
    /// K = 7, rate 1/3, generators (133, 145, 175): a maximum free distance code, free distance 15.
    public static let k7r13 = ConvolutionalCode(constraintLength: 7, generators: [0o133, 0o145, 0o175])
    /// K = 9, rate 1/3, generators (557, 663, 711): the best K = 9 rate 1/3 code (IS-95), free distance 18.
    public static let k9r13 = ConvolutionalCode(constraintLength: 9, generators: [0o557, 0o663, 0o711])

    /// Coded bits for `messageBits` message bits: `(messageBits + K − 1) × n` (the tail included).
    public func codedBitCount(messageBits: Int) -> Int {
        (max(0, messageBits) + constraintLength - 1) * rate
    }

    /// Encodes message bits (the lowest bit of each element is used) and the K − 1 zero tail bits.
    /// - Returns: ``codedBitCount(messageBits:)`` bits, 0 or 1, n per trellis step in generator order.
    public func encode(_ bits: [UInt8]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: codedBitCount(messageBits: bits.count)) { out, initialized in
            bits.withUnsafeBufferPointer { initialized = encode($0, into: out) }
        }
    }

    /// `encode`, writing the coded bits into `out` without allocating; returns how many were written
    /// (``codedBitCount(messageBits:)`` of `bits.count`).
    /// - Precondition: `out` holds at least that many.
    @discardableResult
    public func encode(_ bits: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let count = codedBitCount(messageBits: bits.count)
        precondition(out.count >= count, "encode: \(count) coded bits into \(out.count)")
        forEachCodedBit(of: bits) { i, bit in out[i] = bit }
        return count
    }

    /// Calls `body(i, bit)` with each coded bit of `message` (and its tail) in transmission order.
    @inline(__always)
    func forEachCodedBit(of message: UnsafeBufferPointer<UInt8>, _ body: (Int, UInt8) -> Void) {
        let k = constraintLength
        var state: UInt32 = 0   // the last K − 1 inputs, newest at bit K − 2
        var i = 0
        for t in 0..<(message.count + k - 1) {
            let bit = t < message.count ? UInt32(message[t] & 1) : 0
            let register = bit << UInt32(k - 1) | state
            for g in generators {
                body(i, UInt8((register & g).nonzeroBitCount & 1))
                i += 1
            }
            state = register >> 1
        }
    }

    /// The correlation metric Σ (1 − 2cᵢ)·LLRᵢ / 2 of the codeword of `message` against `llrs`: its log-likelihood
    /// up to a constant, the quantity the decoders maximise. LLRs are sanitized as the decoders do (``LLR``);
    /// missing ones count as 0.
    public func pathMetric(message: [UInt8], llrs: [Float]) -> Float {
        message.withUnsafeBufferPointer { message in llrs.withUnsafeBufferPointer { pathMetric(message: message, llrs: $0) } }
    }

    /// `pathMetric` on buffers, encoding as it goes (no allocation).
    func pathMetric(message: UnsafeBufferPointer<UInt8>, llrs: UnsafeBufferPointer<Float>) -> Float {
        var metric: Float = 0
        forEachCodedBit(of: message) { i, bit in
            guard i < llrs.count else { return }
            let half = 0.5 * LLR.sanitized(llrs[i])
            metric += bit == 0 ? half : -half
        }
        return metric
    }

    /// For each register value r (input bit at bit K − 1, state below), the n output bits packed with generator 0
    /// at the most significant position.
    func outputTable() -> [UInt16] {
        (0..<(2 * stateCount)).map { r in
            var symbol: UInt16 = 0
            for g in generators { symbol = symbol << 1 | UInt16((UInt32(r) & g).nonzeroBitCount & 1) }
            return symbol
        }
    }
}
