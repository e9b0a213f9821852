/// A fixed pseudo-random permutation of `count` positions, derived from a seed.
///
/// The permutation is a Fisher–Yates shuffle driven by ``SplitMix64``, so it is the same on every platform and
/// Swift version (the standard library's shuffling is not used). Interleaving spreads the coded bits of one
/// 16-FSK symbol, and bursts of bad symbols, across the whole trellis.
///
/// ```swift
/// let interleaver = Interleaver(count: 188, seed: 7)
/// let sent = interleaver.interleave(codedBits)          // sent[i] = codedBits[permutation[i]]
/// let llrs = interleaver.deinterleave(receivedLLRs)      // back in code order
/// ```
public struct Interleaver: Sendable, Hashable {
    /// Number of positions permuted.
    public let count: Int
    /// `output[i] = input[permutation[i]]`.
    public let permutation: [Int]
    /// The inverse permutation: `inverse[permutation[i]] == i`.
    public let inverse: [Int]

    /// The permutation of `count` positions for `seed`.
    /// - Precondition: `count >= 0`.
    public init(count: Int, seed: UInt64) {
        precondition(count >= 0, "Interleaver count must not be negative")
        self.count = count
        var rng = SplitMix64(seed: seed)
        var permutation = Array(0..<count)
        if count > 1 {
            for i in stride(from: count - 1, to: 0, by: -1) {
                let j = Int(rng.next(below: UInt64(i + 1)))
                permutation.swapAt(i, j)
            }
        }
        var inverse = [Int](repeating: 0, count: count)
        for (i, p) in permutation.enumerated() { inverse[p] = i }
        self.permutation = permutation
        self.inverse = inverse
    }

    /// Permutes `input`: `output[i] = input[permutation[i]]`.
    /// - Precondition: `input.count == count`.
    public func interleave<T>(_ input: [T]) -> [T] {
        precondition(input.count == count, "Interleaver of \(count) positions given \(input.count) values")
        return permutation.map { input[$0] }
    }

    /// Undoes ``interleave(_:)``: `deinterleave(interleave(x)) == x`.
    /// - Precondition: `input.count == count`.
    public func deinterleave<T>(_ input: [T]) -> [T] {
        precondition(input.count == count, "Interleaver of \(count) positions given \(input.count) values")
        return inverse.map { input[$0] }
    }
}
