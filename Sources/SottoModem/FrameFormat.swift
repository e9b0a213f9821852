import SottoCodes

/// The frame: what bits go into the 16-FSK symbols and how they come back out.
///
/// Layout before coding (MSB first):
/// ```
/// header (8 bits) | payload (8 x length bits) | CRC-16 (16 bits)
/// header = version (2 bits, 0) | profile identifier (2 bits) | length - 1 (4 bits)
/// ```
/// The CRC covers header and payload and starts from a per-profile initial value, so a frame never checks
/// under another profile. The whole block is encoded with the K = 7, rate 1/2 convolutional code
/// (zero-tail), scrambled with a fixed pseudo-random sequence (so repetitive tokens still hop across all
/// tones), interleaved, and cut into 4-bit symbols: 4 x length + 15 symbols.
public enum FrameFormat {
    /// Shortest and longest token (bytes).
    public static let payloadBytes: ClosedRange<Int> = 1...16
    /// Current frame format version.
    public static let version: UInt8 = 0
    /// The error-correcting code.
    public static let code = ConvolutionalCode.k7r12
    /// Bits of header and CRC around the payload.
    static let headerBits = 8
    static let crcBits = 16
    /// Candidates the CRC-aided list Viterbi decoder checks.
    public static let listSize = 8
    /// Largest number of header bits the plain Viterbi path may get wrong for the list decoder to run.
    static let listHeaderDistance = 2

    /// Message bits (header, payload and CRC, before coding) for a payload of `payloadBytes` bytes.
    static func messageBitCount(payloadBytes: Int) -> Int { headerBits + 8 * payloadBytes + crcBits }

    /// Coded bits for a payload of `payloadBytes` bytes.
    public static func codedBitCount(payloadBytes: Int) -> Int {
        code.codedBitCount(messageBits: messageBitCount(payloadBytes: payloadBytes))
    }

    /// Symbols for a payload of `payloadBytes` bytes.
    public static func symbolCount(payloadBytes: Int) -> Int {
        (codedBitCount(payloadBytes: payloadBytes) + 3) / 4
    }

    static func header(profile: Profile, payloadBytes: Int) -> UInt8 {
        (version << 6) | ((profile.identifier & 3) << 4) | UInt8(payloadBytes - 1)
    }

    static func crcInitial(profile: Profile) -> UInt16 { 0x1D0F &+ UInt16(profile.identifier) &* 0x3B71 }

    /// Pseudo-random scrambling bits (0/1), `count` long, from a 16-bit LFSR seeded by the profile.
    /// Frame lengths come from a cache built once.
    static func scramblingSequence(count: Int, profile: Profile) -> [UInt8] {
        let identifier = Int(profile.identifier & 3)
        if let index = cachedLengths[count] { return cachedScrambling[identifier][index] }
        return makeScramblingSequence(count: count, identifier: identifier)
    }

    static func makeScramblingSequence(count: Int, identifier: Int) -> [UInt8] {
        var state: UInt16 = 0xACE1 ^ (UInt16(identifier) << 8 | 0x5A)
        var bits = [UInt8](repeating: 0, count: count)
        for i in 0..<count {
            // Fibonacci LFSR x^16 + x^14 + x^13 + x^11 + 1 (maximal length).
            let bit = ((state >> 0) ^ (state >> 2) ^ (state >> 3) ^ (state >> 5)) & 1
            state = (state >> 1) | (bit << 15)
            bits[i] = UInt8(bit)
        }
        return bits
    }

    /// The interleaver of a frame of `count` coded bits (frame lengths come from a cache built once).
    static func interleaver(count: Int) -> Interleaver {
        if let index = cachedLengths[count] { return cachedInterleavers[index] }
        return makeInterleaver(count: count)
    }

    static func makeInterleaver(count: Int) -> Interleaver { Interleaver(count: count, seed: 0x5077_0F00 &+ UInt64(count)) }

    /// Coded bit counts of the frame lengths, their interleavers and (per profile identifier) scrambling
    /// sequences: the receiver tries every length for every detection, and rebuilt them (a shuffle of up
    /// to 316 positions and an LFSR run, with their allocations) for each try.
    private static let cachedLengths: [Int: Int] = Dictionary(
        uniqueKeysWithValues: payloadBytes.enumerated().map { (codedBitCount(payloadBytes: $0.element), $0.offset) })
    private static let cachedInterleavers: [Interleaver] = payloadBytes.map { makeInterleaver(count: codedBitCount(payloadBytes: $0)) }
    private static let cachedScrambling: [[[UInt8]]] = (0..<4).map { identifier in
        payloadBytes.map { makeScramblingSequence(count: codedBitCount(payloadBytes: $0), identifier: identifier) }
    }

    /// The symbol values (0..<16) of the frame carrying `payload` for `profile`.
    /// - Throws: `ModemError.invalidTokenLength` unless 1...16 bytes.
    public static func symbols(payload: [UInt8], profile: Profile) throws(ModemError) -> [Int] {
        guard payloadBytes.contains(payload.count) else { throw .invalidTokenLength(payload.count) }
        var block = [header(profile: profile, payloadBytes: payload.count)] + payload
        let crc = CRC16.checksum(block, initial: crcInitial(profile: profile))
        block += [UInt8(crc >> 8), UInt8(crc & 0xFF)]
        return symbols(messageBits: Bits.unpack(block), profile: profile)
    }

    /// The symbol values for a block of message bits (header, payload and CRC, 0/1 each).
    static func symbols(messageBits: [UInt8], profile: Profile) -> [Int] {
        let coded = code.encode(messageBits)
        var symbols = [Int](repeating: 0, count: (coded.count + 3) / 4)
        coded.withUnsafeBufferPointer { bits in
            symbols.withUnsafeMutableBufferPointer { packSymbols(codedBits: bits, profile: profile, into: $0) }
        }
        return symbols
    }

    /// Coded bits in code order (0/1, as the convolutional code emits them) scrambled, interleaved and
    /// packed four to a symbol (the last one padded with zeros) into `symbols[0..<(count + 3) / 4]`.
    /// Allocates nothing for the frame lengths' bit counts (their sequences are cached).
    static func packSymbols(codedBits: UnsafeBufferPointer<UInt8>, profile: Profile, into symbols: UnsafeMutableBufferPointer<Int>) {
        let count = codedBits.count
        let scrambling = scramblingSequence(count: count, profile: profile)
        let permutation = interleaver(count: count).permutation
        // Transmitted bit i is coded bit permutation[i], scrambled in code order.
        for s in 0..<((count + 3) / 4) {
            var value = 0
            for i in (4 * s)..<(4 * s + 4) {
                let bit = i < count ? codedBits[permutation[i]] ^ scrambling[permutation[i]] : 0
                value = value << 1 | Int(bit)
            }
            symbols[s] = value
        }
    }

    /// The symbols of the frame the last successful ``decodeReportingHeader(symbolLogLikelihoods:payloadBytes:profile:workspace:)``
    /// of `payloadBytes` bytes decoded (re-encoded there), into `workspace.symbolValues[0..<symbolCount]`.
    static func recodedSymbols(payloadBytes: Int, profile: Profile, workspace: inout DecodeWorkspace) {
        let codedCount = codedBitCount(payloadBytes: payloadBytes)
        workspace.recoded.withUnsafeBufferPointer { recoded in
            workspace.symbolValues.withUnsafeMutableBufferPointer {
                packSymbols(codedBits: UnsafeBufferPointer(rebasing: recoded[0..<codedCount]), profile: profile, into: $0)
            }
        }
    }

    /// The outcome of decoding one length hypothesis.
    public struct Decoded: Sendable, Hashable {
        /// The token.
        public var payload: [UInt8]
        /// Coded bits whose hard decision disagreed with the re-encoded frame (errors the code corrected).
        public var correctedBits: Int
    }

    /// Decodes a frame of `payloadBytes` bytes from per-symbol log-likelihoods: `symbolCount(payloadBytes:)`
    /// rows of 16 values, row-major (log p(observation | value) up to a constant per row).
    /// Returns nil unless a candidate passes the CRC and carries the expected header.
    public static func decode(symbolLogLikelihoods: [Float], payloadBytes: Int, profile: Profile) -> Decoded? {
        var workspace = DecodeWorkspace(profile: profile)
        return symbolLogLikelihoods.withUnsafeBufferPointer {
            decodeReportingHeader(symbolLogLikelihoods: $0, payloadBytes: payloadBytes, profile: profile, workspace: &workspace).decoded
        }
    }

    /// `decode`, also returning how many header bits the plain Viterbi path got wrong (8 when not decoded
    /// at all): a frame whose header is nearly right is worth a second, more expensive attempt. Works in
    /// `workspace`: allocates nothing but the decoded token.
    static func decodeReportingHeader(symbolLogLikelihoods: UnsafeBufferPointer<Float>, payloadBytes: Int, profile: Profile,
                                      workspace: inout DecodeWorkspace) -> (decoded: Decoded?, headerDistance: Int) {
        guard FrameFormat.payloadBytes.contains(payloadBytes) else { return (nil, 8) }
        let symbolTotal = symbolCount(payloadBytes: payloadBytes)
        guard symbolLogLikelihoods.count >= 16 * symbolTotal else { return (nil, 8) }
        for s in 0..<symbolTotal {
            let row = UnsafeBufferPointer(rebasing: symbolLogLikelihoods[(16 * s)..<(16 * s + 16)])
            SymbolDemapper.bitLLRs(symbolLogLikelihoods: row, bitsPerSymbol: 4, into: &workspace.llrs, at: 4 * s)
        }
        // Deinterleaved (coded[i] = llrs[inverse[i]]) and descrambled.
        let codedCount = codedBitCount(payloadBytes: payloadBytes)
        let inverse = interleaver(count: codedCount).inverse
        let scrambling = scramblingSequence(count: codedCount, profile: profile)
        workspace.llrs.withUnsafeBufferPointer { llrs in
            workspace.coded.withUnsafeMutableBufferPointer { coded in
                for i in 0..<codedCount {
                    let value = llrs[inverse[i]]
                    coded[i] = scrambling[i] == 1 ? -value : value
                }
            }
        }
        let messageBits = messageBitCount(payloadBytes: payloadBytes)
        let expectedHeader = header(profile: profile, payloadBytes: payloadBytes)
        // Plain Viterbi first (14 us for 8 bytes); the list (96 us) only when its header is nearly right:
        // every frame tries all 16 length hypotheses, and the wrong ones seldom come close.
        workspace.coded.withUnsafeBufferPointer { coded in
            workspace.message.withUnsafeMutableBufferPointer { message in
                workspace.viterbi.decode(llrs: UnsafeBufferPointer(rebasing: coded[0..<codedCount]), messageBits: messageBits,
                                         into: message)
            }
        }
        var decodedHeader: UInt8 = 0
        for i in 0..<headerBits { decodedHeader = decodedHeader << 1 | (workspace.message[i] & 1) }
        let headerDistance = (decodedHeader ^ expectedHeader).nonzeroBitCount
        guard headerDistance <= Self.listHeaderDistance else { return (nil, headerDistance) }
        // The list's candidates, best first: the first whose header and CRC check is the frame. Its first
        // candidate is the plain path just decoded, so that one is checked here: a frame that decodes on its
        // plain path (most do) skips the list's second trellis pass.
        let initial = crcInitial(profile: profile)
        var decoded: Decoded?
        workspace.coded.withUnsafeBufferPointer { codedBuffer in
            let coded = UnsafeBufferPointer(rebasing: codedBuffer[0..<codedCount])
            workspace.recoded.withUnsafeMutableBufferPointer { recoded in
                workspace.messageBytes.withUnsafeMutableBufferPointer { bytes in
                    /// The frame carried by `bits` (header, payload and CRC), or nil unless header and CRC check.
                    func frame(_ bits: UnsafeBufferPointer<UInt8>) -> Decoded? {
                        Bits.pack(bits, into: bytes)
                        guard bytes[0] == expectedHeader else { return nil }
                        let crc = UInt16(bytes[1 + payloadBytes]) << 8 | UInt16(bytes[2 + payloadBytes])
                        guard CRC16.checksum(bytes[0...payloadBytes], initial: initial) == crc else { return nil }
                        code.encode(bits, into: recoded)
                        var corrected = 0
                        for i in 0..<codedCount where (coded[i] < 0 ? 1 : 0) != recoded[i] && coded[i] != 0 { corrected += 1 }
                        return Decoded(payload: Array(bytes[1...payloadBytes]), correctedBits: corrected)
                    }
                    if headerDistance == 0 {
                        decoded = workspace.message.withUnsafeBufferPointer { frame(UnsafeBufferPointer(rebasing: $0[0..<messageBits])) }
                        if decoded != nil { return }
                    }
                    _ = workspace.list.decode(llrs: coded, messageBits: messageBits, listSize: listSize) { bits, _ in
                        decoded = frame(bits)
                        return decoded != nil
                    }
                }
            }
        }
        return (decoded, headerDistance)
    }
}
