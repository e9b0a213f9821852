extension ConvolutionalCode {
    /// Encodes `bits` and cuts the coded bits into symbols of `bitsPerSymbol` bits, most significant first, the last
    /// symbol padded with zero bits: the mapping ``decode(symbolLogLikelihoods:bitsPerSymbol:messageBits:)`` expects.
    /// - Precondition: `bitsPerSymbol` in 1 ... 16.
    public func encodeSymbols(_ bits: [UInt8], bitsPerSymbol: Int) -> [Int] {
        precondition((1...16).contains(bitsPerSymbol), "bitsPerSymbol out of range")
        let coded = encode(bits)
        return stride(from: 0, to: coded.count, by: bitsPerSymbol).map { start in
            var symbol = 0
            for i in start..<(start + bitsPerSymbol) { symbol = symbol << 1 | Int(i < coded.count ? coded[i] : 0) }
            return symbol
        }
    }

    /// Number of symbols ``encodeSymbols(_:bitsPerSymbol:)`` produces for `messageBits` message bits.
    public func symbolCount(messageBits: Int, bitsPerSymbol: Int) -> Int {
        (codedBitCount(messageBits: messageBits) + bitsPerSymbol - 1) / bitsPerSymbol
    }

    /// Maximum-likelihood decoding straight from symbol log-likelihoods, with no bit demapping.
    ///
    /// Each symbol carries the coded bits of `bitsPerSymbol / rate` consecutive trellis steps (the mapping of
    /// ``encodeSymbols(_:bitsPerSymbol:)``, no bit interleaver), so the Viterbi algorithm can add each symbol's exact
    /// log-likelihood to the branches of a merged multi-step trellis. This avoids the loss of bit-wise demapping
    /// (BICM) on noncoherent orthogonal signalling; symbols may still be interleaved as whole symbols.
    ///
    /// - Parameters:
    ///   - symbolLogLikelihoods: Row-major, `2^bitsPerSymbol` values of log p(observation | symbol) per symbol, up to
    ///     a constant per row. `NaN` counts as impossible (a row with nothing possible carries no information);
    ///     values more than ``LLR/limit`` below the row's best are clamped there. Missing rows count as no information.
    ///   - bitsPerSymbol: A multiple of ``rate``, with `bitsPerSymbol / rate` at most K − 1 and at most 4.
    ///   - messageBits: Message length in bits; negative counts decode nothing.
    /// - Returns: `messageBits` decoded bits.
    public func decode(symbolLogLikelihoods: [Float], bitsPerSymbol: Int, messageBits: Int) -> [UInt8] {
        let k = constraintLength, n = rate
        precondition(bitsPerSymbol % n == 0, "bitsPerSymbol must be a multiple of the rate")
        let stepsPerSymbol = bitsPerSymbol / n
        precondition((1...min(4, k - 1)).contains(stepsPerSymbol), "unsupported steps per symbol")
        guard messageBits >= 0 else { return [] }
        let steps = messageBits + k - 1
        let symbols = (steps + stepsPerSymbol - 1) / stepsPerSymbol
        let rowLength = 1 << bitsPerSymbol
        let states = stateCount
        let mask = states - 1

        /// For `q` steps per symbol: per (state, input pattern) the next state and the (zero-padded) symbol.
        func transitions(_ q: Int) -> (next: [Int32], symbol: [Int32]) {
            var next = [Int32](repeating: 0, count: states << q)
            var symbol = [Int32](repeating: 0, count: states << q)
            for s in 0..<states {
                for u in 0..<(1 << q) {
                    var state = s
                    var value = 0
                    for i in 0..<q {
                        let bit = (u >> (q - 1 - i)) & 1
                        let register = bit << (k - 1) | state
                        for g in generators { value = value << 1 | ((UInt32(register) & g).nonzeroBitCount & 1) }
                        state = register >> 1
                    }
                    next[(s << q) | u] = Int32(state)
                    symbol[(s << q) | u] = Int32(value << (bitsPerSymbol - q * n))
                }
            }
            return (next, symbol)
        }
        let full = transitions(stepsPerSymbol)
        let lastSteps = steps - (symbols - 1) * stepsPerSymbol
        let last = lastSteps == stepsPerSymbol ? full : transitions(lastSteps)

        var row = [Float](repeating: 0, count: rowLength)
        var current = [Float](repeating: -.infinity, count: states)
        current[0] = 0
        var next = [Float](repeating: -.infinity, count: states)
        // Per symbol and new state: the predecessor's dropped low bits (q bits).
        var decisions = [UInt8](repeating: 0, count: symbols * states)
        for j in 0..<symbols {
            let q = j == symbols - 1 ? lastSteps : stepsPerSymbol
            let table = j == symbols - 1 ? last : full
            // Clean the row: relative to its best value, NaN impossible, floor at −limit.
            var top: Float = -.infinity
            for m in 0..<rowLength {
                let index = j * rowLength + m
                let v = index < symbolLogLikelihoods.count ? symbolLogLikelihoods[index] : 0
                row[m] = v.isNaN ? -.infinity : min(v, .greatestFiniteMagnitude)
                top = max(top, row[m])
            }
            for m in 0..<rowLength { row[m] = top == -.infinity ? 0 : max(row[m] - top, -LLR.limit) }
            for s in 0..<states { next[s] = -.infinity }
            row.withUnsafeBufferPointer { row in
            current.withUnsafeBufferPointer { old in
            next.withUnsafeMutableBufferPointer { new in
            decisions.withUnsafeMutableBufferPointer { decisions in
            table.next.withUnsafeBufferPointer { nextState in
            table.symbol.withUnsafeBufferPointer { symbolOf in
                for s in 0..<states {
                    let base = old[s]
                    guard base > -.infinity else { continue }
                    for u in 0..<(1 << q) {
                        let edge = (s << q) | u
                        let target = Int(nextState[edge])
                        let candidate = base + row[Int(symbolOf[edge])]
                        if candidate > new[target] {
                            new[target] = candidate
                            decisions[j * states + target] = UInt8(s & ((1 << q) - 1))
                        }
                    }
                }
                var best: Float = -.infinity
                for s in 0..<states { best = max(best, new[s]) }
                if best > -.infinity { for s in 0..<states { new[s] -= best } }
            }
            }
            }
            }
            }
            }
            swap(&current, &next)
        }

        var bits = [UInt8](repeating: 0, count: messageBits)
        var state = 0
        for j in stride(from: symbols - 1, through: 0, by: -1) {
            let q = j == symbols - 1 ? lastSteps : stepsPerSymbol
            for i in 0..<q {
                let step = j * stepsPerSymbol + i
                if step < messageBits { bits[step] = UInt8((state >> (k - 2 - (q - 1 - i))) & 1) }
            }
            state = ((state << q) & mask) | Int(decisions[j * states + state])
        }
        return bits
    }
}
