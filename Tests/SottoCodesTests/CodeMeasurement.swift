import Foundation
import SottoCodes
import Testing

/// Frame error rate of candidate codes over the modem's channel, abstracted: noncoherent orthogonal 16-FSK on
/// AWGN. Not a pass/fail test: it prints the table for `Sources/SottoCodes/SottoCodes.docc/CodeChoice.md`. Run with
/// `SOTTO_MEASURE=1 swift test -c release --filter CodeMeasurement`.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["SOTTO_MEASURE"] != nil))
struct CodeMeasurement {
    /// The frame: header byte, 8-byte token, CRC-16 = 88 bits; Eb is charged per token bit.
    static let payloadBits = 64
    static let frameNibbles = 22
    static let header: UInt8 = 0x07
    static let crcInitial: UInt16 = 0x1D0F
    /// Per point: stop after this many frame errors or this many frames.
    static let errorTarget = 100
    static let frameLimit = 10_000

    enum Scheme {
        case uncoded
        case reedSolomon(parity: Int, erasures: Bool)
        case convolutional(ConvolutionalCode, String, hard: Bool, listSize: Int)
        /// Symbol-level Viterbi on the 16 tone log-likelihoods (no bit demapping, no bit interleaver).
        case symbolLevel(ConvolutionalCode, String)

        var name: String {
            switch self {
            case .uncoded: "uncoded"
            case let .reedSolomon(parity, erasures): "RS(15,\(15 - parity)) hard" + (erasures ? " + erasures (GMD)" : "")
            case let .convolutional(_, name, hard, listSize):
                name + (hard ? " hard Viterbi" : listSize > 1 ? " list L=\(listSize) + CRC" : " soft Viterbi")
            case let .symbolLevel(_, name): name + " symbol-level Viterbi"
            }
        }

        /// RS block data sizes: 22 nibbles split into as few blocks of at most 15 − parity as possible.
        static func blockSizes(parity: Int) -> [Int] {
            let capacity = 15 - parity
            let blocks = (frameNibbles + capacity - 1) / capacity
            return (0..<blocks).map { frameNibbles / blocks + ($0 < frameNibbles % blocks ? 1 : 0) }
        }

        var symbolCount: Int {
            switch self {
            case .uncoded: frameNibbles
            case let .reedSolomon(parity, _): frameNibbles + parity * Self.blockSizes(parity: parity).count
            case let .convolutional(code, _, _, _): (code.codedBitCount(messageBits: 88) + 3) / 4
            case let .symbolLevel(code, _): code.symbolCount(messageBits: 88, bitsPerSymbol: 4)
            }
        }
    }

    enum Outcome { case correct, detected, undetected }

    /// log I0(x), Abramowitz & Stegun 9.8.1 / 9.8.2 (the same approximation as SottoDSP's logBesselI0).
    static func logI0(_ x: Float) -> Float {
        let ax = abs(x)
        if ax < 3.75 {
            let t = (ax / 3.75) * (ax / 3.75)
            let i0 = 1 + t * (3.5156229 + t * (3.0899424 + t * (1.2067492 + t * (0.2659732 + t * (0.0360768 + t * 0.0045813)))))
            return Foundation.log(i0)
        }
        let u = 3.75 / ax
        let p = 0.39894228 + u * (0.01328592 + u * (0.00225319 + u * (-0.00157565 + u * (0.00916281
            + u * (-0.02057706 + u * (0.02635537 + u * (-0.01647633 + u * 0.00392377)))))))
        return ax - 0.5 * Foundation.log(ax) + Foundation.log(p)
    }

    struct Simulator {
        let scheme: Scheme
        var rng: SplitMix64
        var noise: GaussianSource
        let interleaver: Interleaver?
        /// Per symbol, 16 values of log p(r | m) up to a constant, and the hard decision and its reliability.
        var logLikelihoods: [Float] = []
        var decisions: [Int] = []
        var reliabilities: [Float] = []

        init(scheme: Scheme, seed: UInt64) {
            self.scheme = scheme
            rng = SplitMix64(seed: seed)
            noise = GaussianSource(seed: seed ^ 0xABCD_EF01)
            if case let .convolutional(code, _, _, _) = scheme {
                let count = code.codedBitCount(messageBits: 88)
                interleaver = Interleaver(count: count, seed: 0x5077_0F00 &+ UInt64(count))
            } else {
                interleaver = nil
            }
        }

        /// Sends `symbols` over noncoherent orthogonal 16-FSK at Es/N0 = esN0 (N0 = 1).
        mutating func transmit(_ symbols: [Int], esN0: Double) {
            let amplitude = esN0.squareRoot()
            let componentSigma = (0.5).squareRoot()
            logLikelihoods = [Float](repeating: 0, count: 16 * symbols.count)
            decisions = [Int](repeating: 0, count: symbols.count)
            reliabilities = [Float](repeating: 0, count: symbols.count)
            for (s, sent) in symbols.enumerated() {
                var best: Float = -.infinity, second: Float = -.infinity
                for m in 0..<16 {
                    let re = (m == sent ? amplitude : 0) + componentSigma * noise.next()
                    let im = componentSigma * noise.next()
                    let magnitude = (re * re + im * im).squareRoot()
                    let ll = logI0(Float(2 * amplitude * magnitude))
                    logLikelihoods[16 * s + m] = ll
                    if ll > best {
                        second = best
                        best = ll
                        decisions[s] = m
                    } else if ll > second {
                        second = ll
                    }
                }
                reliabilities[s] = best - second
            }
        }

        static func crcOK(_ bytes: [UInt8]) -> Bool {
            bytes.count == 11 && bytes[0] == header
                && CRC16.checksum(bytes[0..<9], initial: crcInitial) == UInt16(bytes[9]) << 8 | UInt16(bytes[10])
        }

        mutating func frame(ebN0dB: Double) -> Outcome {
            var block = [header] + (0..<8).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let crc = CRC16.checksum(block, initial: crcInitial)
            block += [UInt8(crc >> 8), UInt8(crc & 0xFF)]
            let bits = Bits.unpack(block)
            let esN0 = pow(10, ebN0dB / 10) * Double(payloadBits) / Double(scheme.symbolCount)
            func nibbles(_ bits: [UInt8]) -> [Int] {
                stride(from: 0, to: bits.count, by: 4).map { i in
                    (0..<4).reduce(0) { $0 << 1 | Int(i + $1 < bits.count ? bits[i + $1] : 0) }
                }
            }
            func bitsOf(_ nibbles: [Int]) -> [UInt8] { nibbles.flatMap { n in (0..<4).map { UInt8((n >> (3 - $0)) & 1) } } }
            func judge(_ decoded: [UInt8]?) -> Outcome {
                guard let decoded, decoded.count == 88 else { return .detected }
                if decoded == bits { return .correct }
                return Self.crcOK(Bits.pack(decoded)) ? .undetected : .detected
            }

            switch scheme {
            case .uncoded:
                transmit(nibbles(bits), esN0: esN0)
                return judge(bitsOf(decisions))

            case let .reedSolomon(parity, useErasures):
                let data = nibbles(bits)
                let sizes = Scheme.blockSizes(parity: parity)
                var symbols: [Int] = []
                var start = 0
                for k in sizes {
                    let rs = ReedSolomon16(n: k + parity, k: k)
                    symbols += rs.encode(data[start..<(start + k)].map { UInt8($0) }).map(Int.init)
                    start += k
                }
                transmit(symbols, esN0: esN0)
                var decoded: [Int] = []
                var offset = 0
                for k in sizes {
                    let rs = ReedSolomon16(n: k + parity, k: k)
                    let received = decisions[offset..<(offset + k + parity)].map { UInt8($0) }
                    var result = rs.decode(received)
                    if result == nil && useErasures {
                        // Generalised minimum distance: erase the 2, 4, ... least reliable symbols.
                        let order = (0..<(k + parity)).sorted { reliabilities[offset + $0] < reliabilities[offset + $1] }
                        for erased in stride(from: 2, through: parity, by: 2) where result == nil {
                            result = rs.decode(received, erasures: Array(order[0..<erased]))
                        }
                    }
                    guard let result else { return .detected }
                    decoded += result.map(Int.init)
                    offset += k + parity
                }
                return judge(bitsOf(decoded))

            case let .symbolLevel(code, _):
                transmit(code.encodeSymbols(bits, bitsPerSymbol: 4), esN0: esN0)
                return judge(code.decode(symbolLogLikelihoods: logLikelihoods, bitsPerSymbol: 4, messageBits: 88))

            case let .convolutional(code, _, hard, listSize):
                guard let interleaver else { return .detected }
                let coded = interleaver.interleave(code.encode(bits))
                let symbols = nibbles(coded)
                transmit(symbols, esN0: esN0)
                var llrs = [Float](repeating: 0, count: 4 * symbols.count)
                if hard {
                    for (s, m) in decisions.enumerated() {
                        for b in 0..<4 { llrs[4 * s + b] = (m >> (3 - b)) & 1 == 0 ? 1 : -1 }
                    }
                } else {
                    logLikelihoods.withUnsafeBufferPointer { all in
                        for s in 0..<symbols.count {
                            SymbolDemapper.bitLLRs(symbolLogLikelihoods: UnsafeBufferPointer(rebasing: all[(16 * s)..<(16 * s + 16)]),
                                                   bitsPerSymbol: 4, into: &llrs, at: 4 * s)
                        }
                    }
                }
                let received = interleaver.deinterleave(Array(llrs[0..<coded.count]))
                if listSize <= 1 { return judge(code.decode(llrs: received, messageBits: 88)) }
                let list = code.listDecode(llrs: received, messageBits: 88, listSize: listSize)
                guard let chosen = list.first(where: { Self.crcOK(Bits.pack($0)) }) else { return .detected }
                return chosen == bits ? .correct : .undetected
            }
        }
    }

    struct Point { var ebN0dB: Double; var frames: Int; var errors: Int; var undetected: Int
        var fer: Double { Double(errors) / Double(frames) } }

    static func sweep(_ scheme: Scheme, seed: UInt64) -> [Point] {
        var simulator = Simulator(scheme: scheme, seed: seed)
        var points: [Point] = []
        var ebN0dB = 0.0
        while ebN0dB <= 16 {
            var point = Point(ebN0dB: ebN0dB, frames: 0, errors: 0, undetected: 0)
            while point.errors < errorTarget && point.frames < frameLimit {
                point.frames += 1
                switch simulator.frame(ebN0dB: ebN0dB) {
                case .correct: break
                case .detected: point.errors += 1
                case .undetected: point.errors += 1; point.undetected += 1
                }
            }
            points.append(point)
            if point.fer < 0.003 { break }
            ebN0dB += 0.5
        }
        return points
    }

    /// Eb/N0 where the FER crosses `target`, interpolating log FER linearly between measured points.
    static func crossing(_ points: [Point], target: Double) -> Double? {
        for (a, b) in zip(points, points.dropFirst()) where a.fer >= target && b.fer < target {
            let fa = Foundation.log(a.fer), fb = Foundation.log(max(b.fer, 0.5 / Double(b.frames)))
            return a.ebN0dB + (fa - Foundation.log(target)) / (fa - fb) * (b.ebN0dB - a.ebN0dB)
        }
        return points.first.map { $0.fer < target ? -.infinity : .infinity }
    }

    @Test(.timeLimit(.minutes(10)))
    func frameErrorRates() {
        var schemes: [Scheme] = [.uncoded]
        for parity in [4, 6, 8, 10] { schemes.append(.reedSolomon(parity: parity, erasures: false)) }
        schemes.append(.reedSolomon(parity: 8, erasures: true))
        schemes.append(.convolutional(.k7r12, "K7r12", hard: true, listSize: 1))
        for (code, name) in [(ConvolutionalCode.k7r12, "K7r12"), (.k9r12, "K9r12"), (.k7r13, "K7r13"), (.k9r13, "K9r13")] {
            for listSize in [1, 4, 8, 16] { schemes.append(.convolutional(code, name, hard: false, listSize: listSize)) }
        }
        schemes.append(.symbolLevel(.k7r12, "K7r12"))
        schemes.append(.symbolLevel(.k9r12, "K9r12"))
        let clock = ContinuousClock()
        func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18 }
        var onePercent: [String: Double] = [:]
        var table = "| scheme | symbols | Eb/N0 @ FER 10 % | Eb/N0 @ FER 1 % | undetected | CPU s |\n|---|---:|---:|---:|---:|---:|\n"
        var curves = ""
        for (index, scheme) in schemes.enumerated() {
            var points: [Point] = []
            let elapsed = clock.measure { points = Self.sweep(scheme, seed: 0x50770 &+ UInt64(index)) }
            func format(_ value: Double?) -> String {
                guard let value, value.isFinite else { return "n/a" }
                return String(format: "%.1f dB", value)
            }
            onePercent[scheme.name] = Self.crossing(points, target: 0.01)
            let undetected = points.reduce(0) { $0 + $1.undetected }
            let frames = points.reduce(0) { $0 + $1.frames }
            table += "| \(scheme.name) | \(scheme.symbolCount) | \(format(Self.crossing(points, target: 0.1))) | "
                + "\(format(Self.crossing(points, target: 0.01))) | \(undetected)/\(frames) | "
                + String(format: "%.1f", seconds(elapsed)) + " |\n"
            curves += "\(scheme.name): " + points.map { String(format: "%.1f:%.4f", $0.ebN0dB, $0.fer) }.joined(separator: " ") + "\n"
        }
        // Decoder cost alone: 88-bit frames of BPSK LLRs at 3 dB, prepared beforehand.
        var timing = "| decoder | µs per frame |\n|---|---:|\n"
        for (code, name) in [(ConvolutionalCode.k7r12, "K7r12"), (.k9r12, "K9r12"), (.k7r13, "K7r13"), (.k9r13, "K9r13")] {
            var rng = SplitMix64(seed: 1)
            var noise = GaussianSource(seed: 2)
            let frames = (0..<200).map { _ in
                bpskLLRs(code.encode(rng.bits(88)), ebN0dB: 3, codeRate: 1 / Double(code.rate), noise: &noise)
            }
            for listSize in [1, 8, 16] {
                var checksum = 0
                let elapsed = clock.measure {
                    for llrs in frames {
                        checksum &+= listSize == 1 ? Int(code.decode(llrs: llrs, messageBits: 88)[0])
                            : code.listDecode(llrs: llrs, messageBits: 88, listSize: listSize).count
                    }
                }
                #expect(checksum > 0, "decoders produced output (also keeps the work from being optimised away)")
                let label = listSize == 1 ? "Viterbi" : "list L=\(listSize)"
                timing += "| \(name) \(label) | " + String(format: "%.0f", seconds(elapsed) / Double(frames.count) * 1e6) + " |\n"
            }
        }
        print("\n" + table + "\nFER by Eb/N0 (dB:FER):\n" + curves + "\n" + timing)
        // The orderings the design note relies on.
        func at(_ name: String) -> Double { onePercent[name] ?? .infinity }
        #expect(at("K7r12 soft Viterbi") < at("K7r12 hard Viterbi") - 0.5)
        #expect(at("K7r12 list L=16 + CRC") < at("K7r12 soft Viterbi"))
        #expect(at("K7r12 soft Viterbi") < at("uncoded") - 0.5)
        #expect(at("RS(15,7) hard + erasures (GMD)") < at("RS(15,7) hard"))
    }
}
