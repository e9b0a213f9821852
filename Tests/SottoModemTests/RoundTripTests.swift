import Foundation
import SottoChannel
import Testing
@testable import SottoModem

/// Test-signal helpers on the simulator's seeded generator.
extension SeededRandom {
    /// N(0, 1) as Float.
    mutating func sample() -> Float { Float(gaussian()) }
    mutating func bytes(_ n: Int) -> [UInt8] { (0..<n).map { _ in UInt8(truncatingIfNeeded: next()) } }
}

/// Places frames in silence (with optional white noise of the given full-band SNR against the
/// burst's power) at the given sample offsets.
func recording(frames: [(token: [UInt8], offset: Int)], profile: Profile, rate: Double, length: Int,
               snr: Double? = nil, seed: UInt64 = 1) throws -> [Float] {
    let modulator = try Modulator(profile: profile, sampleRate: rate)
    var out = [Float](repeating: 0, count: length)
    var power = 0.0
    for frame in frames {
        let burst = try modulator.modulate(frame.token)
        for (i, s) in burst.enumerated() where frame.offset + i < length { out[frame.offset + i] += s }
        power = Double(modulator.amplitude * modulator.amplitude) / 2
    }
    if let snr {
        var noise = SeededRandom(seed: seed)
        let sigma = Float((power / pow10Test(snr / 10)).squareRoot())
        for i in out.indices { out[i] += sigma * noise.sample() }
    }
    return out
}

func pow10Test(_ x: Double) -> Double { pow(10, x) }

@Suite struct RoundTripTests {
    @Test(arguments: Profile.all)
    func everyProfileRoundTripsEveryLength(profile: Profile) throws {
        var noise = SeededRandom(seed: 7)
        for length in [1, 4, 8, 16] {
            let token = noise.bytes(length)
            let rate = 48_000.0
            let x = try recording(frames: [(token, 12_345)], profile: profile, rate: rate, length: 12_345 + Int(rate * 2))
            let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: [profile])
            #expect(frames.map(\.token) == [token], "profile \(profile.name) length \(length)")
            if let frame = frames.first {
                #expect(abs(frame.startTime - 12_345 / rate) < 0.001)
                #expect(frame.profile == profile.name)
                #expect(frame.correctedBits == 0)
                #expect(abs(frame.clockOffsetPPM) < 300)
                #expect(abs(frame.level - Modulator.defaultLevel) < 1, "level \(frame.level)")  // hopped profiles read about 0.5 dB low (longer transitions)
            }
        }
    }

    /// A frame at the very first sample of a stream is timed as well as one later in it: its correlation
    /// peak and chirp delay were refined from positions before the stream that did not exist (clean frames
    /// reported +195, +469, +122 and +1 246 ppm with the default, fast, robust and audible profiles, against
    /// -6, -21, -6 and -73 ppm 12 345 samples later).
    @Test(arguments: Profile.all)
    func aFrameAtTheFirstSampleIsTimedAsOneLaterIs(profile: Profile) throws {
        let token: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let rate = 48_000.0
        var results: [DecodedFrame] = []
        for offset in [0, 12_345] {
            let x = try recording(frames: [(token, offset)], profile: profile, rate: rate, length: offset + Int(rate))
            let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: [profile])
            #expect(frames.map(\.token) == [token], "\(profile.name) at \(offset)")
            guard let frame = frames.first else { return }
            // Both starts within 0.15 ms of the truth (the estimate is about 5.7 input samples early at 48 kHz).
            #expect(abs(frame.startTime - Double(offset) / rate) < 0.000_15, "\(profile.name) at \(offset): start \(frame.startTime)")
            results.append(frame)
        }
        #expect(abs(results[0].clockOffsetPPM - results[1].clockOffsetPPM) <= 15,
                "\(profile.name): \(results[0].clockOffsetPPM) ppm at the first sample, \(results[1].clockOffsetPPM) later")
    }

    @Test(arguments: [44_100.0, 48_000.0, 96_000.0, 192_000.0])
    func decodesAtTheInputsOwnRate(rate: Double) throws {
        let token: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF, 0x01, 0x23, 0x45, 0x67]
        let x = try recording(frames: [(token, 1000)], profile: .standard, rate: rate, length: Int(rate))
        #expect(try StreamingDecoder.decode(x, sampleRate: rate).map(\.token) == [token])
    }

    @Test func backToBackFramesAreEachReportedOnce() throws {
        let rate = 48_000.0
        let profile = Profile.standard
        var noise = SeededRandom(seed: 3)
        let tokens = (0..<5).map { _ in noise.bytes(8) }
        let airtime = Int((profile.airtime(payloadBytes: 8) * rate).rounded(.up))
        let x = try recording(frames: tokens.enumerated().map { ($0.element, 500 + $0.offset * airtime) },
                              profile: profile, rate: rate, length: 500 + 6 * airtime, snr: 10)
        let frames = try StreamingDecoder.decode(x, sampleRate: rate)
        #expect(frames.map(\.token) == tokens)
    }

    @Test func allProfilesAtOnce() throws {
        let rate = 48_000.0
        var x = [Float](repeating: 0, count: Int(rate * 5))
        var expected: [[UInt8]] = []
        var offset = 2000
        for (i, profile) in Profile.all.enumerated() {
            let token = [UInt8](repeating: UInt8(i + 1), count: 4 + i)
            expected.append(token)
            let burst = try Modulator(profile: profile, sampleRate: rate).modulate(token)
            for (j, s) in burst.enumerated() { x[offset + j] += s }
            offset += burst.count + 3000
        }
        let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: Profile.all)
        #expect(frames.map(\.token) == expected)
        #expect(frames.map(\.profile) == Profile.all.map(\.name))
    }

    @Test func nothingInSilenceOrNoise() throws {
        let rate = 48_000.0
        var noise = SeededRandom(seed: 11)
        let x = (0..<Int(rate * 20)).map { _ in 0.1 * noise.sample() }
        #expect(try StreamingDecoder.decode(x, sampleRate: rate, profiles: Profile.all).isEmpty)
        #expect(try StreamingDecoder.decode([Float](repeating: 0, count: 100_000), sampleRate: rate).isEmpty)
        #expect(try StreamingDecoder.decode([], sampleRate: rate).isEmpty)
    }

    @Test func rejectsBadParameters() {
        #expect(throws: ModemError.invalidTokenLength(0)) { try Modulator().modulate([]) }
        #expect(throws: ModemError.invalidTokenLength(17)) { try Modulator().modulate([UInt8](repeating: 0, count: 17)) }
        #expect(throws: ModemError.self) { try Modulator(sampleRate: 22_050) }
        #expect(throws: ModemError.self) { try Modulator(sampleRate: .nan) }
        #expect(throws: ModemError.self) { try Modulator(level: 3) }
        #expect(throws: ModemError.self) { try StreamingDecoder(sampleRate: 32_000) }
        #expect(throws: ModemError.self) { try StreamingDecoder(sampleRate: -1) }
        // The audible profile works at low rates.
        #expect(throws: Never.self) { try StreamingDecoder(sampleRate: 16_000, profiles: [.audible]) }
    }
}
