import SottoChannel
import SottoDSP
import Testing
@testable import SottoModem

/// Two frames of one profile that overlap: the stronger is decoded, made again through the room estimated from
/// the input, subtracted, and the weaker decoded from what is left (`cancelsInterference`).
@Suite struct InterferenceCancellationTests {
    static let rate = 48_000.0

    /// Two frames of the default profile, each through its own synthetic room (RT60 0.5 s, 2 m), the second
    /// `level` dB under the first and starting `delay` seconds after it (negative: before), its clock `ppm` off,
    /// in white noise 10 dB under the weaker one; the first starts at 0.5 s, the recording lasts 2.4 s.
    static func recording(_ tokens: [[UInt8]], level: Double, delay: Double, ppm: Double, seed: UInt64) throws -> [Float] {
        let modulator = try Modulator(sampleRate: rate)
        var rng = SeededRandom(seed: seed)
        let gain = Float(pow10(-level / 20))
        var x = [Float](repeating: 0, count: Int(2.4 * rate))
        for (k, token) in tokens.enumerated() {
            var burst = try modulator.modulate(token)
            if k == 1 {
                for i in burst.indices { burst[i] *= gain }
                burst = Channel.clockOffset(burst, ppm: ppm)
            }
            let response = try Room(rt60: 0.5, distance: 2).impulseResponse(sampleRate: rate, rng: &rng)
            let heard = try fftConvolve(burst, response)
            let start = Int((0.5 + (k == 1 ? delay : 0)) * rate)
            for (i, v) in heard.enumerated() where start + i < x.count { x[start + i] += v }
        }
        let power = Double(modulator.amplitude * modulator.amplitude) / 2 * Double(gain * gain)
        Channel.addWhiteNoise(&x, snrDB: 10, signalPower: power, rng: &rng)
        return x
    }

    static let tokens: [[UInt8]] = [[0x51, 0xC1, 1, 2], [0x0F, 0xEA, 9, 8]]

    /// 8 dB apart, the weaker starting 0.15 s into the stronger (its preamble under the stronger's symbols), fed
    /// in device periods: without cancellation only the stronger is decoded; with it the stronger comes out as
    /// before, when it ends, and the weaker once the window around the stronger has passed.
    @Test func aWeakerFrameUnderAStrongerOneIsDecodedOnceCancelled() throws {
        let x = try Self.recording(Self.tokens, level: 8, delay: 0.15, ppm: 60, seed: 3)
        let plain = try StreamingDecoder.decode(x, sampleRate: Self.rate)
        #expect(plain.map(\.token) == [Self.tokens[0]])
        let decoder = try StreamingDecoder(sampleRate: Self.rate, cancelsInterference: true)
        var seen: [(frame: DecodedFrame, at: Double)] = []
        var offset = 0
        while offset < x.count {
            let n = min(1024, x.count - offset)
            let frames = x.withUnsafeBufferPointer { decoder.process(UnsafeBufferPointer(rebasing: $0[offset..<(offset + n)])) }
            offset += n
            seen += frames.map { ($0, Double(offset) / Self.rate) }
        }
        seen += decoder.finish().map { ($0, Double(offset) / Self.rate) }
        #expect(seen.map(\.frame.token) == Self.tokens)
        #expect(seen.first?.frame == plain.first)
        // Where they were sent (the direct sound arrives 6 ms later).
        #expect(seen.map { abs($0.frame.startTime - 0.506) < 0.01 + 0.15 * Double($0.frame.token == Self.tokens[1] ? 1 : 0) } == [true, true])
        #expect(seen.count == 2 && abs(seen[1].frame.startTime - seen[0].frame.startTime - 0.15) < 0.01)
        // The stronger as it ends (at 0.84 s; the decoder takes a block or two), the weaker later.
        #expect(seen.first.map { $0.at < 1.0 } == true)
        #expect(seen.count == 2 && seen[1].at > seen[0].at + 0.5)
    }
}
