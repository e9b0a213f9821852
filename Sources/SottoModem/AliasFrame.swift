import SottoCodes
import SottoDSP

/// The short alias frame: a 12-bit number (0...4095) in 0.236 s of the default profile, beside the token frames.
///
/// A room full of devices takes turns, and in a crowded room each device plays a room alias in its slots instead of
/// its token (the exchange's `Payload.roomAlias`). As a general frame that alias took 0.289 s (an 8-bit header, two
/// bytes and a CRC-16: 23 symbols); this frame carries only what an alias needs:
/// ```
/// preamble: two up-chirps (a token frame's is an up-chirp and a down-chirp)
/// alias (12 bits) | check (16 bits: a CRC-16 over the alias, seeded apart from the token frames')
/// ```
/// coded like a token frame (the K = 7, rate 1/2 code, zero-tail: 68 bits) but scrambled and interleaved with
/// sequences of its own: 17 symbols. A receiver that listens for alias frames (`StreamingDecoder`'s `aliasFrames`)
/// pairs an up-chirp with a second up-chirp as it pairs it with a down-chirp (the same thresholds, the same
/// correlation), and reports the frame with ``DecodedFrame/alias`` set; the room model fits the two up-chirps as it
/// fits a token frame's preamble. A false alias needs a detection of no alias frame (noise, chirps of other frames)
/// whose decoded check passes: about one in 65 536 of them (the plain Viterbi path alone is checked). A 14-bit check
/// with a list of two (one in 8 192, 16 symbols, 0.227 s) let one false alias through in the crowd simulation's
/// twelve 20-device rooms: two token frames starting a chirp apart look like an alias frame's two up-chirps.
///
/// One up-chirp alone (0.187 s) was tried first: its room fit, over half as much known signal, left 14 % of the
/// frames alone on the air undecoded in the crowd simulation (Crowds.md).
extension FrameFormat {
    /// Bits of an alias frame's number.
    public static let aliasBits = 12
    /// Largest alias an alias frame carries.
    public static let maxAlias: UInt16 = 0x0FFF
    /// Bits of its check.
    static let aliasCheckBits = 16
    /// Message bits of an alias frame (alias and check, before coding).
    static let aliasMessageBits = aliasBits + aliasCheckBits
    /// Coded bits of an alias frame.
    static let aliasCodedBitCount = code.codedBitCount(messageBits: aliasMessageBits)
    /// Symbols of an alias frame (17).
    public static let aliasSymbolCount = (aliasCodedBitCount + 3) / 4
    /// Candidates of the list Viterbi decoder an alias frame's check is tried on: each one more would double the false
    /// aliases a detection of something else can give (one: the plain Viterbi path).
    static let aliasListSize = 1

    /// The check of `alias` for `profile` (16 bits): a CRC-16 seeded per profile, apart from the token frames' seeds,
    /// so that an alias frame of one profile does not check under another.
    static func aliasCheck(_ alias: UInt16, profile: Profile) -> UInt16 {
        let initial: UInt16 = 0xA5C3 ^ (UInt16(profile.identifier & 3) &* 0x1D0F)
        return CRC16.checksum([UInt8(truncatingIfNeeded: alias >> 8), UInt8(truncatingIfNeeded: alias)], initial: initial)
            >> UInt16(16 - aliasCheckBits)
    }

    /// The scrambling sequence of an alias frame (0/1 per coded bit, in code order), per profile identifier.
    private static let aliasScrambling: [[UInt8]] = (0..<4).map { identifier in
        var state: UInt16 = 0x3C5A ^ (UInt16(identifier) << 9 | 0x0181)
        return (0..<aliasCodedBitCount).map { _ in
            let bit = ((state >> 0) ^ (state >> 2) ^ (state >> 3) ^ (state >> 5)) & 1
            state = (state >> 1) | (bit << 15)
            return UInt8(bit)
        }
    }
    /// The interleaver of an alias frame.
    private static let aliasInterleaver = Interleaver(count: aliasCodedBitCount, seed: 0xA11A_5000)

    /// The message bits (alias, then check; most significant first) of `alias`.
    static func aliasMessage(_ alias: UInt16, profile: Profile) -> [UInt8] {
        let check = aliasCheck(alias, profile: profile)
        return (0..<aliasBits).map { UInt8((alias >> UInt16(aliasBits - 1 - $0)) & 1) }
            + (0..<aliasCheckBits).map { UInt8((check >> UInt16(aliasCheckBits - 1 - $0)) & 1) }
    }

    /// The symbol values (0..<16) of the alias frame carrying `alias` for `profile`.
    /// - Parameters:
    ///   - alias: the alias (12 bits).
    ///   - profile: the profile it is sent with (its check and scrambling depend on it).
    /// - Throws: `ModemError.invalidAlias` beyond ``maxAlias``.
    public static func aliasSymbols(alias: UInt16, profile: Profile) throws(ModemError) -> [Int] {
        guard alias <= maxAlias else { throw .invalidAlias(Int(alias)) }
        let coded = code.encode(aliasMessage(alias, profile: profile))
        var symbols = [Int](repeating: 0, count: aliasSymbolCount)
        coded.withUnsafeBufferPointer { bits in
            symbols.withUnsafeMutableBufferPointer { packAliasSymbols(codedBits: bits, profile: profile, into: $0) }
        }
        return symbols
    }

    /// Coded bits of an alias frame (code order) scrambled, interleaved and packed four to a symbol.
    static func packAliasSymbols(codedBits: UnsafeBufferPointer<UInt8>, profile: Profile,
                                         into symbols: UnsafeMutableBufferPointer<Int>) {
        let scrambling = aliasScrambling[Int(profile.identifier & 3)]
        let permutation = aliasInterleaver.permutation
        for s in 0..<aliasSymbolCount {
            var value = 0
            for i in (4 * s)..<(4 * s + 4) {
                let bit = i < aliasCodedBitCount ? codedBits[permutation[i]] ^ scrambling[permutation[i]] : 0
                value = value << 1 | Int(bit)
            }
            symbols[s] = value
        }
    }

    /// The symbols of the alias frame the last successful ``decodeAlias(symbolLogLikelihoods:profile:workspace:)``
    /// decoded (re-encoded there), into `workspace.symbolValues[0..<aliasSymbolCount]`.
    static func recodedAliasSymbols(profile: Profile, workspace: inout DecodeWorkspace) {
        workspace.recoded.withUnsafeBufferPointer { recoded in
            workspace.symbolValues.withUnsafeMutableBufferPointer {
                packAliasSymbols(codedBits: UnsafeBufferPointer(rebasing: recoded[0..<aliasCodedBitCount]), profile: profile, into: $0)
            }
        }
    }

    /// Decodes an alias frame from per-symbol log-likelihoods (`aliasSymbolCount` rows of 16): its alias as two bytes
    /// (most significant first), or nil unless a candidate's check passes. Works in `workspace`.
    static func decodeAlias(symbolLogLikelihoods: UnsafeBufferPointer<Float>, profile: Profile,
                            workspace: inout DecodeWorkspace) -> Decoded? {
        guard symbolLogLikelihoods.count >= 16 * aliasSymbolCount else { return nil }
        for s in 0..<aliasSymbolCount {
            let row = UnsafeBufferPointer(rebasing: symbolLogLikelihoods[(16 * s)..<(16 * s + 16)])
            SymbolDemapper.bitLLRs(symbolLogLikelihoods: row, bitsPerSymbol: 4, into: &workspace.llrs, at: 4 * s)
        }
        let inverse = aliasInterleaver.inverse
        let scrambling = aliasScrambling[Int(profile.identifier & 3)]
        let count = aliasCodedBitCount
        workspace.llrs.withUnsafeBufferPointer { llrs in
            workspace.coded.withUnsafeMutableBufferPointer { coded in
                for i in 0..<count {
                    let value = llrs[inverse[i]]
                    coded[i] = scrambling[i] == 1 ? -value : value
                }
            }
        }
        var decoded: Decoded?
        workspace.coded.withUnsafeBufferPointer { codedBuffer in
            let coded = UnsafeBufferPointer(rebasing: codedBuffer[0..<count])
            workspace.recoded.withUnsafeMutableBufferPointer { recoded in
                _ = workspace.list.decode(llrs: coded, messageBits: aliasMessageBits, listSize: aliasListSize) { bits, _ in
                    var alias: UInt16 = 0, check: UInt16 = 0
                    for i in 0..<aliasBits { alias = alias << 1 | UInt16(bits[i] & 1) }
                    for i in aliasBits..<aliasMessageBits { check = check << 1 | UInt16(bits[i] & 1) }
                    guard aliasCheck(alias, profile: profile) == check else { return false }
                    _ = code.encode(bits, into: recoded)
                    var corrected = 0
                    for i in 0..<count where (coded[i] < 0 ? 1 : 0) != recoded[i] && coded[i] != 0 { corrected += 1 }
                    decoded = Decoded(payload: [UInt8(truncatingIfNeeded: alias >> 8), UInt8(truncatingIfNeeded: alias)],
                                      correctedBits: corrected)
                    return true
                }
            }
        }
        return decoded
    }
}

extension Profile {
    /// Airtime of an alias frame (two chirps, ``FrameFormat/aliasSymbolCount`` symbols and the fade; s): 0.236 s
    /// for the default profile, where a token frame of two bytes takes 0.289 s.
    public var aliasAirtime: Double {
        2 * chirpDuration + Double(FrameFormat.aliasSymbolCount) * symbolTime + fadeDuration
    }
}

extension Modulator {
    /// The trajectory of the alias frame carrying `alias` (0...4095): two up-chirps, then its symbols.
    /// - Parameter alias: the alias (12 bits).
    /// - Throws: `ModemError.invalidAlias` beyond ``FrameFormat/maxAlias``.
    public func trajectory(alias: UInt16) throws(ModemError) -> FrequencyTrajectory {
        Self.trajectory(symbols: try FrameFormat.aliasSymbols(alias: alias, profile: profile), profile: profile,
                        preamble: Self.preambleSegments(profile, alias: true))
    }

    /// The samples of the alias frame carrying `alias` (0...4095).
    /// - Parameter alias: the alias (12 bits).
    /// - Throws: `ModemError.invalidAlias` beyond ``FrameFormat/maxAlias``.
    public func modulate(alias: UInt16) throws(ModemError) -> [Float] {
        try trajectory(alias: alias).synthesize(sampleRate: sampleRate, amplitude: amplitude)
    }
}
