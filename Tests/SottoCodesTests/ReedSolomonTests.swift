import PropertyBased
import SottoCodes
import Testing

@Suite struct ReedSolomonTests {
    static let shapes: [(n: Int, k: Int)] = [(15, 11), (15, 9), (15, 7), (15, 3), (12, 8), (7, 3), (4, 2), (15, 14)]

    /// Symbols where two words differ, ignoring the given positions.
    func distance(_ a: [UInt8], _ b: [UInt8], ignoring: Set<Int> = []) -> Int {
        a.indices.filter { !ignoring.contains($0) && a[$0] != b[$0] }.count
    }

    @Test(arguments: 0..<shapes.count)
    func correctsErrorsAndErasuresWithinTheBound(shape: Int) {
        let (n, k) = Self.shapes[shape]
        let rs = ReedSolomon16(n: n, k: k)
        var rng = SplitMix64(seed: UInt64(100 + shape))
        for erasureCount in 0...(n - k) {
            let errorCount = (n - k - erasureCount) / 2
            for _ in 0..<40 {
                let data = rng.nibbles(k)
                let codeword = rs.encode(data)
                #expect(codeword.count == n && Array(codeword[0..<k]) == data)
                var received = codeword
                let positions = rng.distinctIndices(errorCount + erasureCount, below: n)
                for p in positions[0..<errorCount] { received[p] ^= UInt8(1 + rng.next(below: 15)) }
                let erasures = Array(positions[errorCount...])
                for p in erasures { received[p] = UInt8(rng.next(below: 16)) }
                #expect(rs.decode(received, erasures: erasures) == data,
                        "RS(\(n),\(k)) \(errorCount) errors \(erasureCount) erasures")
            }
        }
    }

    @Test func encodingIsLinear() async {
        let rs = ReedSolomon16(n: 15, k: 9)
        await propertyCheck(input: Gen.uint8(in: 0...15).array(of: 9), Gen.uint8(in: 0...15).array(of: 9)) { a, b in
            let sum = rs.encode(zip(a, b).map { $0 ^ $1 })
            #expect(sum == zip(rs.encode(a), rs.encode(b)).map { $0 ^ $1 })
        }
    }

    @Test func minimumDistanceIsNMinusKPlusOne() {
        // Weight of the codeword of a single non-zero data nibble is at least n − k + 1 (MDS).
        for (n, k) in Self.shapes {
            let rs = ReedSolomon16(n: n, k: k)
            for position in 0..<k {
                var data = [UInt8](repeating: 0, count: k)
                data[position] = 1
                #expect(rs.encode(data).filter { $0 != 0 }.count >= n - k + 1)
            }
        }
    }

    @Test(arguments: [(15, 11, 0.55), (15, 7, 0.9), (15, 9, 0.8)])
    func beyondTheBoundItMostlyReportsFailure(n: Int, k: Int, minimumNilFraction: Double) {
        let rs = ReedSolomon16(n: n, k: k)
        let t = (n - k) / 2
        var rng = SplitMix64(seed: 777)
        var failures = 0
        let trials = 400
        for _ in 0..<trials {
            let data = rng.nibbles(k)
            var received = rs.encode(data)
            for p in rng.distinctIndices(t + 1 + Int(rng.next(below: 2)), below: n) {
                received[p] ^= UInt8(1 + rng.next(below: 15))
            }
            if let decoded = rs.decode(received) {
                // Never garbage: a returned word is a codeword within the correction radius.
                #expect(distance(rs.encode(decoded), received) <= t)
            } else {
                failures += 1
            }
        }
        #expect(Double(failures) / Double(trials) >= minimumNilFraction, "\(failures) of \(trials) detected")
    }

    @Test func malformedInputReturnsNil() {
        let rs = ReedSolomon16(n: 15, k: 11)
        let codeword = rs.encode([UInt8](repeating: 3, count: 11))
        #expect(rs.decode(codeword) == [UInt8](repeating: 3, count: 11))
        #expect(rs.decode(Array(codeword.dropLast())) == nil)
        #expect(rs.decode(codeword + [0]) == nil)
        var bad = codeword
        bad[2] = 16
        #expect(rs.decode(bad) == nil)
        #expect(rs.decode(codeword, erasures: [15]) == nil)
        #expect(rs.decode(codeword, erasures: [-1]) == nil)
        #expect(rs.decode(codeword, erasures: [0, 1, 2, 3, 4]) == nil)
        #expect(rs.decode(codeword, erasures: [4, 4, 4]) == [UInt8](repeating: 3, count: 11), "duplicates ignored")
    }

    @Test func randomWordsNeverCrash() async {
        let rs = ReedSolomon16(n: 13, k: 7)
        await propertyCheck(input: Gen.uint8(in: 0...15).array(of: 13), Gen.int(in: 0...12).array(of: 0...6)) { word, erasures in
            if let decoded = rs.decode(word, erasures: erasures) {
                #expect(decoded.count == 7)
                let erased = Set(erasures)
                #expect(2 * distance(rs.encode(decoded), word, ignoring: erased) + erased.count <= 6)
            }
        }
    }
}
