import Testing
import SottoCodes
@testable import SottoModem

@Suite struct FrameFormatCacheTests {
    /// The cached interleavers and scrambling sequences are the ones the format defines, for every length
    /// and profile; other counts are built on demand.
    @Test func cachedTablesMatchTheDefinition() {
        for bytes in FrameFormat.payloadBytes {
            let count = FrameFormat.codedBitCount(payloadBytes: bytes)
            #expect(FrameFormat.interleaver(count: count) == FrameFormat.makeInterleaver(count: count))
            for profile in Profile.all {
                #expect(FrameFormat.scramblingSequence(count: count, profile: profile)
                        == FrameFormat.makeScramblingSequence(count: count, identifier: Int(profile.identifier)))
            }
        }
        #expect(FrameFormat.interleaver(count: 7) == FrameFormat.makeInterleaver(count: 7))
        #expect(FrameFormat.scramblingSequence(count: 5, profile: .fast).count == 5)
    }

    /// A frame's symbols are its coded bits scrambled, interleaved (the public `Interleaver`) and packed four
    /// to a symbol, most significant first; and the receiver's re-encoding of a decoded frame (which the SNR
    /// report compares the tones with, in workspace buffers) gives the same symbols.
    @Test func symbolsAreTheScrambledInterleavedCodeAndTheReceiverReencodesThem() throws {
        for profile in Profile.all {
            for bytes in [1, 5, 8, 16] {
                let payload = (0..<bytes).map { UInt8(truncatingIfNeeded: 37 &* $0 &+ Int(profile.identifier)) }
                let symbols = try FrameFormat.symbols(payload: payload, profile: profile)
                // Reference: the definition, step by step with allocating calls.
                var block = [FrameFormat.header(profile: profile, payloadBytes: bytes)] + payload
                let crc = CRC16.checksum(block, initial: FrameFormat.crcInitial(profile: profile))
                block += [UInt8(crc >> 8), UInt8(crc & 0xFF)]
                var coded = FrameFormat.code.encode(Bits.unpack(block))
                let scrambling = FrameFormat.makeScramblingSequence(count: coded.count, identifier: Int(profile.identifier))
                for i in coded.indices { coded[i] ^= scrambling[i] }
                coded = FrameFormat.makeInterleaver(count: coded.count).interleave(coded)
                while coded.count % 4 != 0 { coded.append(0) }
                var expected: [Int] = []
                for s in 0..<(coded.count / 4) {
                    var value = 0
                    for bit in coded[(4 * s)..<(4 * s + 4)] { value = value << 1 | Int(bit) }
                    expected.append(value)
                }
                #expect(symbols == expected, "\(profile.name), \(bytes) bytes")
                // Decoded from certain likelihoods, then re-encoded by the receiver's path.
                var likelihoods = [Float](repeating: -50, count: 16 * symbols.count)
                for (k, value) in symbols.enumerated() { likelihoods[16 * k + value] = 0 }
                var workspace = DecodeWorkspace(profile: profile)
                let decoded = likelihoods.withUnsafeBufferPointer {
                    FrameFormat.decodeReportingHeader(symbolLogLikelihoods: $0, payloadBytes: bytes, profile: profile,
                                                      workspace: &workspace).decoded
                }
                #expect(decoded?.payload == payload)
                FrameFormat.recodedSymbols(payloadBytes: bytes, profile: profile, workspace: &workspace)
                #expect(Array(workspace.symbolValues[0..<symbols.count]) == symbols, "\(profile.name), \(bytes) bytes")
            }
        }
    }
}

@Suite struct SampleRateRuleTests {
    /// One rule for which profiles a rate carries, the same one the decoder and modulator enforce.
    @Test func theRateDecidesTheProfiles() throws {
        #expect(Profile.carried(atSampleRate: 16_000).map(\.name) == ["audible"])
        #expect(Profile.carried(atSampleRate: 44_100) == Profile.all)
        #expect(Profile.carried(atSampleRate: .nan).isEmpty && Profile.carried(atSampleRate: 1e9).isEmpty)
        #expect(Profile.carried(atSampleRate: 48_000, among: [.robust, .standard]) == [.robust, .standard])
        for rate in [8_000.0, 16_000, 40_000, 41_200, 44_100, 1e9] {
            for profile in Profile.all {
                let accepted = (try? StreamingDecoder(sampleRate: rate, profiles: [profile])) != nil
                #expect(accepted == profile.isCarried(atSampleRate: rate), "\(profile.name) at \(rate) Hz")
            }
        }
    }
}
