import Foundation
import SottoCodes

/// Seeded Gaussian samples (Box–Muller over SplitMix64), identical on every machine.
struct GaussianSource {
    var rng: SplitMix64
    var spare: Double?

    init(seed: UInt64) { rng = SplitMix64(seed: seed) }

    /// A standard normal sample.
    mutating func next() -> Double {
        if let value = spare {
            spare = nil
            return value
        }
        let u1 = max(rng.nextUnitDouble(), 0x1p-60)
        let u2 = rng.nextUnitDouble()
        let radius = (-2 * Foundation.log(u1)).squareRoot()
        spare = radius * sin(2 * .pi * u2)
        return radius * cos(2 * .pi * u2)
    }
}

extension SplitMix64 {
    /// `count` random bits (0/1).
    mutating func bits(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(next() & 1) } }
    /// `count` random nibbles.
    mutating func nibbles(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(next() & 15) } }
    /// `count` distinct indices from 0 ..< range.
    mutating func distinctIndices(_ count: Int, below range: Int) -> [Int] {
        var pool = Array(0..<range)
        for i in 0..<count { pool.swapAt(i, i + Int(next(below: UInt64(range - i)))) }
        return Array(pool[0..<count])
    }
}

/// BPSK over real AWGN: bit 0 → +1, LLR = 2y/σ² with σ² = 1 / (2 R Eb/N0).
func bpskLLRs(_ coded: [UInt8], ebN0dB: Double, codeRate: Double, noise: inout GaussianSource) -> [Float] {
    let ebN0 = pow(10, ebN0dB / 10)
    let sigma2 = 1 / (2 * codeRate * ebN0)
    let sigma = sigma2.squareRoot()
    return coded.map { c in
        let y = (c == 0 ? 1.0 : -1.0) + sigma * noise.next()
        return Float(2 * y / sigma2)
    }
}

extension ConvolutionalCode {
    /// Free distance by Dijkstra over the trellis: the lightest path leaving state 0 with a 1 and returning to it.
    var computedFreeDistance: Int {
        let k = constraintLength, states = stateCount
        func weight(_ register: Int) -> Int { generators.reduce(0) { $0 + ((UInt32(register) & $1).nonzeroBitCount & 1) } }
        var distance = [Int](repeating: .max, count: states)
        // First step: input 1 from state 0.
        let firstRegister = 1 << (k - 1)
        distance[firstRegister >> 1] = weight(firstRegister)
        var done = [Bool](repeating: false, count: states)
        var best = Int.max
        while true {
            var u = -1
            for s in 0..<states where !done[s] && distance[s] != .max && (u < 0 || distance[s] < distance[u]) { u = s }
            if u < 0 { break }
            done[u] = true
            if u == 0 { best = min(best, distance[0]); break }
            for bit in 0...1 {
                let register = bit << (k - 1) | u
                let next = register >> 1
                let d = distance[u] + weight(register)
                if d < distance[next] { distance[next] = d }
            }
        }
        return best
    }
}

/// The four built-in codes with their published free distances.
let allCodes: [(name: String, code: ConvolutionalCode, freeDistance: Int)] = [
    ("K7r12", .k7r12, 10), ("K9r12", .k9r12, 12), ("K7r13", .k7r13, 15), ("K9r13", .k9r13, 18),
]
