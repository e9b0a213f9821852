/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, fast pseudo-random generator whose output depends only on the
/// seed, identically on every platform and Swift version.
///
/// Sotto uses it wherever a sequence must be reproducible: the interleaver permutation, and seeded simulations in
/// tests. Not for cryptography.
///
/// ```swift
/// var rng = SplitMix64(seed: 42)
/// let x = rng.next()                 // the same on every machine
/// let die = rng.next(below: 6)       // 0..<6, unbiased
/// ```
public struct SplitMix64: RandomNumberGenerator, Sendable, Hashable {
    /// The generator's whole state.
    public var state: UInt64

    /// A generator starting from `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    @inlinable
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniformly distributed value in `0..<bound` (Lemire's multiply-and-reject method; unbiased, and defined here
    /// rather than by the standard library so the sequence never changes).
    /// - Precondition: `bound > 0`.
    @inlinable
    public mutating func next(below bound: UInt64) -> UInt64 {
        precondition(bound > 0, "SplitMix64.next(below:) needs a positive bound")
        var product = next().multipliedFullWidth(by: bound)
        if product.low < bound {
            let threshold = (0 &- bound) % bound
            while product.low < threshold { product = next().multipliedFullWidth(by: bound) }
        }
        return product.high
    }

    /// A uniformly distributed `Float` in [0, 1) with 24 random bits.
    @inlinable
    public mutating func nextUnitFloat() -> Float { Float(next() >> 40) * 0x1p-24 }

    /// A uniformly distributed `Double` in [0, 1) with 53 random bits.
    @inlinable
    public mutating func nextUnitDouble() -> Double { Double(next() >> 11) * 0x1p-53 }
}
