import SottoChannel
import Testing
@testable import SottoModem

/// A whole frame's strong late reflection is not a second frame; a sender's repeat is.
@Suite struct EchoTests {
    static let rate = 48_000.0

    /// `token`'s frame at 0.2 s, then copies of it at the given delays (s) and gains, in white noise.
    static func recording(_ token: [UInt8], copies: [(delay: Double, gain: Float)]) throws -> [Float] {
        let burst = try Modulator(sampleRate: rate).modulate(token)
        let start = Int(0.2 * rate)
        var x = [Float](repeating: 0, count: start + burst.count + Int(3 * rate))
        for (delay, gain) in [(0.0, Float(1))] + copies {
            let at = start + Int(delay * rate)
            for (i, sample) in burst.enumerated() { x[at + i] += gain * sample }
        }
        var noise = SeededRandom(seed: 31)
        for i in x.indices { x[i] += 0.01 * noise.sample() }
        return x
    }

    /// A discrete reflection of half the direct sound 812 ms later, after the 0.5 s frame ended (as
    /// `SottoChannel.LongRoom` can place one): it decoded as a duplicate frame before.
    @Test func aLateReflectionIsNotASecondFrame() throws {
        let token: [UInt8] = [0xEC, 0x40, 1, 2, 3, 4, 5, 6]
        let frames = try StreamingDecoder.decode(try Self.recording(token, copies: [(0.812, 0.5)]), sampleRate: Self.rate)
        #expect(frames.map(\.token) == [token])
        #expect(frames.first.map { abs($0.startTime - 0.2) < 0.001 } == true)
    }

    /// A sender repeating its token (same level each time), as close together as a reflection: every
    /// repeat is reported.
    @Test func aRepeatAtTheSameLevelIsReportedEachTime() throws {
        let token: [UInt8] = [0xEC, 0x40, 1, 2, 3, 4, 5, 6]
        let frames = try StreamingDecoder.decode(try Self.recording(token, copies: [(0.812, 1), (1.624, 1)]), sampleRate: Self.rate)
        #expect(frames.map(\.token) == [token, token, token])
    }

    /// Other tokens within the window are other frames, whatever their level.
    @Test func aWeakerFrameOfAnotherTokenIsReported() throws {
        let token: [UInt8] = [0xEC, 0x40, 1, 2, 3, 4, 5, 6], other: [UInt8] = [9, 8, 7, 6, 5, 4, 3, 2]
        let modulator = try Modulator(sampleRate: Self.rate)
        var x = try Self.recording(token, copies: [])
        let quiet = try modulator.modulate(other)
        let at = Int(1.0 * Self.rate)
        for (i, sample) in quiet.enumerated() { x[at + i] += 0.5 * sample }
        let frames = try StreamingDecoder.decode(x, sampleRate: Self.rate)
        #expect(frames.map(\.token) == [token, other])
    }
}
