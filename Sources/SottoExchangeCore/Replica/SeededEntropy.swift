import Crypto

/// A deterministic cryptographically secure generator: HMAC-SHA-256 of a counter under a secret seed
/// (the construction of HMAC-DRBG's output step). Replicas given the same seed draw the same values; without
/// the seed they cannot be predicted. The seed of each log entry comes from the appending node's CSPRNG.
package struct SeededEntropy: RandomNumberGenerator, Sendable {
    private let key: SymmetricKey
    private var counter: UInt64 = 0
    private var block: [UInt64] = []

    package init(seed: [UInt8]) { key = SymmetricKey(data: seed) }

    package mutating func next() -> UInt64 {
        if block.isEmpty {
            counter &+= 1
            var message = [UInt8](repeating: 0, count: 8)
            for i in 0..<8 { message[i] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(i))) }
            let mac = Array(HMAC<SHA256>.authenticationCode(for: message, using: key))
            // 32 bytes: four values, used last first.
            block = (0..<4).map { word in (0..<8).reduce(UInt64(0)) { $0 | UInt64(mac[word * 8 + $1]) << (8 * UInt64($1)) } }
        }
        return block.removeLast()
    }
}
