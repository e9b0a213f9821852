import SottoChannel
import Testing
@testable import SottoModem

/// Reverberant rooms, where the tone-energy metric alone fails and the coherent detector (room estimated
/// from the chirps, decision feedback) has to carry the frame.
@Suite struct ReverberationTests {
    /// Frames of `profile` through a synthetic room (20 dB SNR), one per seed, each decoded on its own.
    func decodedThroughRoom(profile: Profile, rt60: Double, distance: Double, directivity: Double,
                            seeds: ClosedRange<UInt64>) throws -> (decoded: Int, sent: Int) {
        var decoded = 0
        for seed in seeds {
            var random = SeededRandom(seed: seed)
            let token = random.bytes(8)
            let x = try recording(frames: [(token, 4_800)], profile: profile, rate: 48_000, length: 4_800 + 96_000)
            var channel = ChannelModel(seed: seed)
            channel.rt60 = rt60
            channel.distance = distance
            channel.directivity = directivity
            channel.snrDB = 20
            let (y, rate) = try channel.apply(x, sampleRate: 48_000)
            let frames = try StreamingDecoder.decode(y, sampleRate: rate, profiles: [profile])
            #expect(frames.allSatisfy { $0.token == token }, "seed \(seed): a wrong token")
            if frames.map(\.token) == [token] { decoded += 1 }
        }
        return (decoded, seeds.count)
    }

    /// A small speaker (Q = 4) 3 m away in a 0.5 s room: the diffuse field at 19 kHz is about 4 dB stronger
    /// than the direct sound. The tone metric alone decoded about 80 % of such frames.
    @Test func defaultProfileThreeMetresInAnOrdinaryRoom() throws {
        let result = try decodedThroughRoom(profile: .standard, rt60: 0.5, distance: 3, directivity: 4, seeds: 1...12)
        #expect(result.decoded == result.sent, "\(result.decoded) of \(result.sent)")
    }

    /// The same with an omnidirectional source (diffuse field about 8 dB over the direct sound): the tone
    /// metric alone decoded about 30 %.
    @Test func defaultProfileThreeMetresFromAnOmnidirectionalSource() throws {
        let result = try decodedThroughRoom(profile: .standard, rt60: 0.5, distance: 3, directivity: 1, seeds: 1...12)
        #expect(result.decoded >= 9, "\(result.decoded) of \(result.sent)")
    }

    /// The robust profile 5 m away in a 1.0 s room (diffuse field about 10 dB over the direct sound).
    @Test func robustProfileFiveMetresInALiveRoom() throws {
        let result = try decodedThroughRoom(profile: .robust, rt60: 1.0, distance: 5, directivity: 4, seeds: 1...8)
        #expect(result.decoded == result.sent, "\(result.decoded) of \(result.sent)")
    }

    /// The coherent path reads the stream's ring buffer at fixed positions: chunking must not matter.
    @Test func reverberantDecodeDoesNotDependOnChunking() throws {
        var random = SeededRandom(seed: 99)
        let tokens = [random.bytes(8), random.bytes(3)]
        let x = try recording(frames: [(tokens[0], 2_000), (tokens[1], 40_000)], profile: .standard, rate: 48_000, length: 120_000)
        var channel = ChannelModel(seed: 5)
        channel.rt60 = 0.5
        channel.distance = 3
        channel.snrDB = 20
        let (y, rate) = try channel.apply(x, sampleRate: 48_000)
        let whole = try StreamingDecoder.decode(y, sampleRate: rate)
        #expect(whole.map(\.token) == tokens)
        for trial in 0..<3 {
            let decoder = try StreamingDecoder(sampleRate: rate)
            var frames: [DecodedFrame] = []
            var position = 0
            while position < y.count {
                let size = min(y.count - position, Int(random.next() % 6_000) + 1)
                frames += decoder.process(Array(y[position..<(position + size)]))
                position += size
            }
            frames += decoder.finish()
            #expect(frames == whole, "chunking \(trial)")
        }
    }
}

/// A time scale measured hundreds or thousands of ppm off in a room. The audible profile's estimate moves
/// about 2 660 ppm a baseband sample of the chirps' measured delay, and through the measured close living
/// room its detections reported +300 to +700 ppm with no offset applied, and those frames failed. A
/// detection is tried again at scale 1 when nothing decodes at the estimate
/// (`PreambleDetection.nominalStart`, ``ReceiverTuning/retriesAtUnitScale``).
@Suite struct TimeScaleHypothesisTests {
    /// An audible frame (token from `seed`) through a synthetic live room (RT60 1 s, 5 m, omnidirectional
    /// source, room drawn from `seed`), decoded by a receiver of `tuning`.
    func decode(seed: UInt64, tuning: ReceiverTuning = .standard) throws -> (token: [UInt8], frames: [DecodedFrame]) {
        var random = SeededRandom(seed: seed)
        let token = random.bytes(8)
        let x = try recording(frames: [(token, 4_800)], profile: .audible, rate: 48_000, length: 4_800 + 96_000)
        var channel = ChannelModel(seed: seed)
        channel.rt60 = 1.0
        channel.distance = 5
        channel.directivity = 1
        channel.snrDB = 20
        let (y, rate) = try channel.apply(x, sampleRate: 48_000)
        let receiver = FrameReceiver(profile: .audible, sampleRate: rate, tuning: tuning)
        var frames: [DecodedFrame] = []
        let tail = [Float](repeating: 0, count: 96_000)
        y.withUnsafeBufferPointer { receiver.process($0, into: &frames) }
        tail.withUnsafeBufferPointer { receiver.process($0, into: &frames) }
        return (token, frames)
    }

    /// Rooms whose reverberation biases the measured delay between the chirps (seeds found by decoding seeds
    /// 1-30; again on 2026-11-29, when the room fit's direct-sound anchor let seed 13's frame decode at the
    /// estimated scale, and 5, 8, 9, 16, 17, 24 and 26 qualified): the frame decodes at scale 1 (0 ppm reported)
    /// and only because scale 1 is tried; without the retry nothing decodes.
    @Test(arguments: [UInt64(5), 8, 9, 16])
    func aScaleThatDecodesNothingIsTriedAtOne(seed: UInt64) throws {
        let (token, frames) = try decode(seed: seed)
        #expect(frames.map(\.token) == [token], "\(frames.map(\.token))")
        #expect(frames.map(\.clockOffsetPPM) == [0])
        var noRetry = ReceiverTuning.standard
        noRetry.retriesAtUnitScale = false
        let (_, without) = try decode(seed: seed, tuning: noRetry)
        #expect(without.isEmpty, "\(without.map(\.clockOffsetPPM))")
    }

    /// Unbiased, the estimate decodes and is what is reported: scale 1 is the second hypothesis, not the
    /// first.
    @Test func theEstimateComesFirst() throws {
        let (token, frames) = try decode(seed: 3)
        #expect(frames.map(\.token) == [token], "\(frames.map(\.token))")
        #expect(frames.allSatisfy { $0.clockOffsetPPM != 0 }, "\(frames.map(\.clockOffsetPPM))")
    }
}
