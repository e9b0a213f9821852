import Testing
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
