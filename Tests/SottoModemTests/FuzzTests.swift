import Foundation
import SottoChannel
import Testing
@testable import SottoModem

/// The decoder must never crash, hang or invent tokens on hostile input.
@Suite struct FuzzTests {
    @Test func frameDecoderSurvivesArbitraryLikelihoods() {
        var noise = SeededRandom(seed: 2024)
        let specials: [Float] = [.nan, .infinity, -.infinity, 0, -0, .greatestFiniteMagnitude, -.greatestFiniteMagnitude, 1e-30]
        for trial in 0..<300 {
            let length = 1 + trial % 16
            let count = 16 * FrameFormat.symbolCount(payloadBytes: length) + Int(noise.next() % 3) - 1
            let values = (0..<max(0, count)).map { _ -> Float in
                noise.next() % 7 == 0 ? specials[Int(noise.next() % UInt64(specials.count))] : Float(noise.sample()) * 50
            }
            // Garbage must not check (CRC + header), and must not trap.
            #expect(FrameFormat.decode(symbolLogLikelihoods: values, payloadBytes: length, profile: .standard) == nil)
        }
        #expect(FrameFormat.decode(symbolLogLikelihoods: [], payloadBytes: 8, profile: .standard) == nil)
        #expect(FrameFormat.decode(symbolLogLikelihoods: [1, 2, 3], payloadBytes: 0, profile: .standard) == nil)
        #expect(FrameFormat.decode(symbolLogLikelihoods: [1, 2, 3], payloadBytes: 99, profile: .standard) == nil)
    }

    @Test func streamingDecoderRecoversAfterNonFiniteAndHugeSamples() throws {
        let rate = 48_000.0
        let token: [UInt8] = [0xCA, 0xFE, 0xBA, 0xBE]
        var x: [Float] = []
        // NaN, infinities, huge values and a full-scale square wave, then silence, then a real frame.
        x += [Float](repeating: .nan, count: 5_000)
        x += [Float](repeating: .infinity, count: 100) + [Float](repeating: -.infinity, count: 100)
        x += (0..<10_000).map { $0 % 2 == 0 ? 1e30 : -1e30 }
        x += (0..<20_000).map { ($0 / 7) % 2 == 0 ? 1 : -1 }
        x += [Float](repeating: 0, count: Int(rate))
        x += try Modulator(sampleRate: rate).modulate(token)
        x += [Float](repeating: 0, count: 10_000)
        let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: Profile.all)
        #expect(frames.map(\.token) == [token])
    }

    @Test func randomSignalsYieldNothing() throws {
        var noise = SeededRandom(seed: 99)
        let decoder = try StreamingDecoder(sampleRate: 44_100, profiles: Profile.all)
        var frames: [DecodedFrame] = []
        for _ in 0..<40 {
            let n = Int(noise.next() % 20_000)
            let kind = noise.next() % 4
            let chunk: [Float] = (0..<n).map { i in
                switch kind {
                case 0: return Float(noise.sample())
                case 1: return Float(Int(noise.next() % 3) - 1)                       // clipped noise
                case 2: return Float(sin(Double(i) * 0.01 * Double(noise.next() % 100)))  // random tones
                default: return noise.next() % 1000 == 0 ? 1 : 0                       // clicks
                }
            }
            frames += decoder.process(chunk)
        }
        frames += decoder.finish()
        #expect(frames.isEmpty)
    }
}

@Test func quickselectAgreesWithSorting() {
    var noise = SeededRandom(seed: 31)
    for n in [1, 2, 3, 10, 97, 1000] {
        let values = (0..<n).map { _ in Float(noise.next() % 50) }  // many ties
        for k in Set([0, n / 4, n / 2, n - 1]) {
            var copy = values
            #expect(select(&copy, rank: k) == values.sorted()[k])
        }
    }
}
