import SottoCodes
import Testing

@Suite struct SymbolDecodingTests {
    /// Log-likelihood rows that favour `symbols` by `margin` over every other value.
    func rows(_ symbols: [Int], bitsPerSymbol: Int, margin: Float) -> [Float] {
        symbols.flatMap { sent in (0..<(1 << bitsPerSymbol)).map { $0 == sent ? margin : 0 } }
    }

    @Test func noiselessRoundTripIncludingPartialLastSymbol() {
        var rng = SplitMix64(seed: 21)
        for (code, bitsPerSymbol) in [(ConvolutionalCode.k7r12, 4), (.k9r12, 4), (.k7r13, 3), (.k9r12, 2)] {
            for messageBits in [1, 8, 87, 88, 89, 152] {
                let message = rng.bits(messageBits)
                let symbols = code.encodeSymbols(message, bitsPerSymbol: bitsPerSymbol)
                #expect(symbols.count == code.symbolCount(messageBits: messageBits, bitsPerSymbol: bitsPerSymbol))
                let decoded = code.decode(symbolLogLikelihoods: rows(symbols, bitsPerSymbol: bitsPerSymbol, margin: 5),
                                          bitsPerSymbol: bitsPerSymbol, messageBits: messageBits)
                #expect(decoded == message, "K\(code.constraintLength) n=\(code.rate) \(bitsPerSymbol) bits/symbol, \(messageBits) bits")
            }
        }
    }

    @Test func encodeSymbolsPacksCodedBitsMostSignificantFirst() {
        // Impulse response 11 01 11 11 00 10 11 → 1101 1111 0010 11(00).
        #expect(ConvolutionalCode.k7r12.encodeSymbols([1], bitsPerSymbol: 4) == [0b1101, 0b1111, 0b0010, 0b1100])
    }

    @Test func isMaximumLikelihoodByExhaustiveSearch() {
        let code = ConvolutionalCode.k7r12
        var noise = GaussianSource(seed: 77)
        for _ in 0..<10 {
            let symbolCount = code.symbolCount(messageBits: 10, bitsPerSymbol: 4)
            let lls = (0..<(16 * symbolCount)).map { _ in Float(noise.next()) }
            var best: (metric: Float, message: [UInt8]) = (-.infinity, [])
            for value in 0..<1024 {
                let message = (0..<10).map { UInt8((value >> (9 - $0)) & 1) }
                let symbols = code.encodeSymbols(message, bitsPerSymbol: 4)
                let metric = symbols.indices.reduce(Float(0)) { $0 + lls[16 * $1 + symbols[$1]] }
                if metric > best.metric { best = (metric, message) }
            }
            #expect(code.decode(symbolLogLikelihoods: lls, bitsPerSymbol: 4, messageBits: 10) == best.message)
        }
    }

    @Test func garbageRowsNeverTrap() {
        var rng = SplitMix64(seed: 3)
        let specials: [Float] = [.nan, .infinity, -.infinity, 1e30, -1e30, 0]
        for _ in 0..<50 {
            let messageBits = Int(rng.next(below: 30))
            let count = Int(rng.next(below: 400))
            let lls = (0..<count).map { _ in specials[Int(rng.next(below: 6))] }
            let decoded = ConvolutionalCode.k9r12.decode(symbolLogLikelihoods: lls, bitsPerSymbol: 4, messageBits: messageBits)
            #expect(decoded.count == messageBits && decoded.allSatisfy { $0 <= 1 })
        }
    }
}
