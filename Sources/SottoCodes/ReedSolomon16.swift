/// Arithmetic in GF(16) with the primitive polynomial x^4 + x + 1 (α = 2).
enum GF16 {
    /// α^i for i in 0 ..< 30 (doubled so that sums of two logarithms need no reduction).
    static let exp: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 30)
        var x: UInt8 = 1
        for i in 0..<15 {
            table[i] = x
            table[i + 15] = x
            x <<= 1
            if x & 0x10 != 0 { x ^= 0x13 }
        }
        return table
    }()
    /// log_α(x) for x in 1 ..< 16; entry 0 is unused.
    static let log: [Int] = {
        var table = [Int](repeating: 0, count: 16)
        for i in 0..<15 { table[Int(exp[i])] = i }
        return table
    }()

    @inline(__always) static func mul(_ a: UInt8, _ b: UInt8) -> UInt8 {
        a == 0 || b == 0 ? 0 : exp[log[Int(a)] + log[Int(b)]]
    }
    /// a / b, b ≠ 0.
    @inline(__always) static func div(_ a: UInt8, _ b: UInt8) -> UInt8 {
        a == 0 ? 0 : exp[log[Int(a)] + 15 - log[Int(b)]]
    }
    /// α^i for any integer i.
    @inline(__always) static func power(_ i: Int) -> UInt8 { exp[((i % 15) + 15) % 15] }

    /// p(x) with coefficients lowest degree first.
    static func evaluate(_ p: [UInt8], at x: UInt8) -> UInt8 {
        var acc: UInt8 = 0
        for c in p.reversed() { acc = mul(acc, x) ^ c }
        return acc
    }
}

/// A Reed–Solomon code over GF(16): one code symbol is one 4-bit nibble, i.e. one 16-FSK tone.
///
/// Codes are RS(15, k) shortened to length n ≤ 15, systematic (the k data nibbles come first, then n − k parity
/// nibbles), with generator roots α¹ … α^(n−k) over the primitive polynomial x⁴ + x + 1. Decoding corrects e errors
/// and s erasures whenever 2e + s ≤ n − k (Berlekamp–Massey with erasures, Chien search, Forney), and returns nil
/// when it detects more than that.
///
/// ```swift
/// let rs = ReedSolomon16(n: 15, k: 11)
/// var word = rs.encode(data)                         // 11 nibbles in, 15 out
/// word[3] ^= 0x9; word[7] = 0                        // one error, one erasure at 7
/// rs.decode(word, erasures: [7]) == data             // true: 2·1 + 1 ≤ 4
/// ```
public struct ReedSolomon16: Sendable, Hashable {
    /// Codeword length in nibbles, 2 ... 15.
    public let n: Int
    /// Data nibbles per codeword, 1 ..< n.
    public let k: Int
    /// Parity nibbles, n − k.
    public var parityCount: Int { n - k }
    /// Generator polynomial Π (x − α^i), i = 1 ... n − k, lowest degree first (monic).
    let generator: [UInt8]

    /// A shortened RS(n, k) code over GF(16).
    /// - Precondition: `1 <= k < n <= 15`.
    public init(n: Int, k: Int) {
        precondition(1 <= k && k < n && n <= 15, "ReedSolomon16 needs 1 <= k < n <= 15")
        self.n = n
        self.k = k
        var g: [UInt8] = [1]
        for i in 1...(n - k) {
            // g(x) · (x + α^i)
            let root = GF16.power(i)
            var product = [UInt8](repeating: 0, count: g.count + 1)
            for (j, c) in g.enumerated() {
                product[j + 1] ^= c
                product[j] ^= GF16.mul(c, root)
            }
            g = product
        }
        generator = g
    }

    /// Encodes `k` data nibbles into `n` code nibbles: the data, then the parity.
    /// - Precondition: `data.count == k` and every value is below 16.
    public func encode(_ data: [UInt8]) -> [UInt8] {
        precondition(data.count == k, "ReedSolomon16(\(n), \(k)) encodes exactly \(k) nibbles")
        precondition(data.allSatisfy { $0 < 16 }, "ReedSolomon16 symbols are nibbles (0 ..< 16)")
        let p = parityCount
        // Remainder of data(x) · x^p divided by g(x); remainder[0] is the highest-degree coefficient.
        var remainder = [UInt8](repeating: 0, count: p)
        for d in data {
            let feedback = d ^ remainder[0]
            for j in 0..<(p - 1) { remainder[j] = remainder[j + 1] ^ GF16.mul(feedback, generator[p - 1 - j]) }
            remainder[p - 1] = GF16.mul(feedback, generator[0])
        }
        return data + remainder
    }

    /// Syndromes S_j = r(α^(j+1)), j = 0 ..< n − k, where codeword index i is the coefficient of x^(n−1−i).
    func syndromes(_ word: [UInt8]) -> [UInt8] {
        (0..<parityCount).map { j in
            let x = GF16.power(j + 1)
            var acc: UInt8 = 0
            for c in word { acc = GF16.mul(acc, x) ^ c }
            return acc
        }
    }

    /// Decodes `n` received nibbles with the given erased positions.
    ///
    /// - Parameters:
    ///   - received: `n` nibbles. Values at erased positions are ignored.
    ///   - erasures: Indices (0 ..< n) known to be unreliable; duplicates are ignored.
    /// - Returns: The `k` data nibbles, or nil if the word is not within 2e + s ≤ n − k of a codeword (detected
    ///   failure), or the input is malformed (wrong length, values ≥ 16, erasure indices out of range or too many).
    ///   Beyond the correction radius a wrong codeword can still be returned, as with any bounded-distance decoder.
    public func decode(_ received: [UInt8], erasures: [Int] = []) -> [UInt8]? {
        let p = parityCount
        guard received.count == n, received.allSatisfy({ $0 < 16 }) else { return nil }
        var erased = [Bool](repeating: false, count: n)
        var erasedPositions: [Int] = []
        for e in erasures {
            guard e >= 0 && e < n else { return nil }
            if !erased[e] { erased[e] = true; erasedPositions.append(e) }
        }
        let s = erasedPositions.count
        guard s <= p else { return nil }
        var word = received
        for e in erasedPositions { word[e] = 0 }
        let syndrome = syndromes(word)
        if syndrome.allSatisfy({ $0 == 0 }) { return Array(word[0..<k]) }

        // Erasure locator Γ(x) = Π (1 + X_e x), X_e = α^(n−1−e).
        var gamma: [UInt8] = [1]
        for e in erasedPositions {
            let x = GF16.power(n - 1 - e)
            var product = [UInt8](repeating: 0, count: gamma.count + 1)
            for (j, c) in gamma.enumerated() {
                product[j] ^= c
                product[j + 1] ^= GF16.mul(c, x)
            }
            gamma = product
        }

        // Berlekamp–Massey initialised with the erasure locator (Blahut): Λ becomes the errata locator.
        var lambda = gamma
        var b = gamma
        var length = s
        if s < p {
            for r in (s + 1)...p {
                var delta: UInt8 = 0
                for j in 0..<lambda.count where r - 1 - j >= 0 { delta ^= GF16.mul(lambda[j], syndrome[r - 1 - j]) }
                let shiftedB = [0] + b
                if delta == 0 {
                    b = shiftedB
                } else {
                    var updated = lambda + [UInt8](repeating: 0, count: max(0, shiftedB.count - lambda.count))
                    for j in shiftedB.indices { updated[j] ^= GF16.mul(delta, shiftedB[j]) }
                    if 2 * length <= r + s - 1 {
                        b = lambda.map { GF16.div($0, delta) }
                        length = r + s - length
                    } else {
                        b = shiftedB
                    }
                    lambda = updated
                }
            }
        }
        while lambda.count > 1 && lambda.last == 0 { lambda.removeLast() }
        let degree = lambda.count - 1
        let errors = length - s
        guard degree == length, errors >= 0, 2 * errors + s <= p else { return nil }

        // Chien search over the n real positions; roots outside (the shortened part) mean failure.
        var positions: [Int] = []
        for i in 0..<n where GF16.evaluate(lambda, at: GF16.power(-(n - 1 - i))) == 0 { positions.append(i) }
        guard positions.count == degree else { return nil }

        // Forney: Ω = S·Λ mod x^p; e_i = Ω(X⁻¹) / Λ'(X⁻¹) (first root α¹).
        var omega = [UInt8](repeating: 0, count: p)
        for i in 0..<p {
            for j in 0...min(i, degree) { omega[i] ^= GF16.mul(syndrome[i - j], lambda[j]) }
        }
        var derivative = [UInt8](repeating: 0, count: max(1, degree))
        for j in stride(from: 1, through: degree, by: 2) { derivative[j - 1] = lambda[j] }
        for i in positions {
            let xInverse = GF16.power(-(n - 1 - i))
            let denominator = GF16.evaluate(derivative, at: xInverse)
            guard denominator != 0 else { return nil }
            word[i] ^= GF16.div(GF16.evaluate(omega, at: xInverse), denominator)
        }
        guard word.allSatisfy({ $0 < 16 }), syndromes(word).allSatisfy({ $0 == 0 }) else { return nil }
        return Array(word[0..<k])
    }
}
