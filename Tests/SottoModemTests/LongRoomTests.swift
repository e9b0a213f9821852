import SottoChannel
import SottoDSP
import Testing
@testable import SottoModem

/// Long rooms: a diffuse tail of seconds, stronger than the direct sound, most of it beyond the coherent
/// detector's room model (74 ms). There the tail is spread over every tone, so the tone metric measured
/// no reverberant tail (the energy a tone keeps one symbol later stayed under 0.08) and never asked the
/// coherent detector: about 60 % of frames decoded (`sotto bench sweep longroom`).
@Suite struct LongRoomTests {
    /// Frames of 4, 8 and 16 bytes in turn, one per seed, each through its own seeded long room, with
    /// white noise at 20 dB in-band SNR (the received frame's power, its tail included, over the noise's
    /// power in the profile's band), each decoded on its own.
    static func decodedThroughLongRoom(room: LongRoom, seeds: ClosedRange<UInt64>,
                                       lengths: [Int] = [4, 8, 16]) throws -> (decoded: Int, sent: Int, wrong: Int) {
        let rate = 48_000.0, profile = Profile.standard, lead = 4_800
        var decoded = 0, wrong = 0
        for seed in seeds {
            var random = SeededRandom(seed: seed)
            let token = random.bytes(lengths[Int(seed) % lengths.count])
            let burst = try Modulator(profile: profile, sampleRate: rate).modulate(token)
            let x = [Float](repeating: 0, count: lead) + burst + [Float](repeating: 0, count: 2_400)
            let response = try room.impulseResponse(sampleRate: rate, rng: &random)
            let direct = Int((room.directDelay * rate).rounded())
            var y = try fftConvolve(x, response)
            let signal = Channel.power(Array(y[(lead + direct)..<(lead + direct + burst.count)]))
            let bandwidth = profile.highFrequency - profile.lowFrequency
            let sigma = Float((signal / 100 * (rate / 2) / bandwidth).squareRoot())
            for i in y.indices { y[i] += sigma * random.sample() }
            let frames = try StreamingDecoder.decode(y, sampleRate: rate, profiles: [profile])
            wrong += frames.filter { $0.token != token }.count
            if frames.map(\.token) == [token] { decoded += 1 }
        }
        return (decoded, seeds.count, wrong)
    }

    /// RT60 3 s, direct-to-reverberant ratio -10 dB (the tail ten times the direct sound), cut at 1.2 s
    /// (what follows a frame's end does not change its decision). Before, 10 of these 24 frames decoded;
    /// with the long-room floor test, 19.
    @Test func frameThroughALongRoomWithAWeakDirectSound() throws {
        let room = LongRoom(rt60: 3, directToReverberantDB: -10, length: 1.2)
        let result = try Self.decodedThroughLongRoom(room: room, seeds: 1...24)
        #expect(result.wrong == 0)
        #expect(result.decoded >= 17, "\(result.decoded) of \(result.sent)")
    }

    /// 16-byte frames (79 symbols, 0.78 s) in the same room: by their end the tail beyond the room model
    /// is about 8 dB over the direct sound, and the coherent detector decides a third of the late symbols
    /// wrong, each wrong one subtracting a wrong echo from the next ones. With soft feedback (echoes of the
    /// values' posteriors) and, when the header came out nearly right, the frame decided again with the
    /// echoes of what the code's decision re-encodes to, more of them decode: 12 of these 16 (8 before).
    @Test func longFramesThroughALongRoom() throws {
        let room = LongRoom(rt60: 3, directToReverberantDB: -10, length: 1.2)
        let result = try Self.decodedThroughLongRoom(room: room, seeds: 1...16, lengths: [16])
        #expect(result.wrong == 0)
        #expect(result.decoded >= 11, "\(result.decoded) of \(result.sent)")
    }
}

/// The long room's per-symbol weighting of the coherent detector's costs.
@Suite struct LongRoomWeightingTests {
    /// Costs of `symbols` symbols: value `symbol % 16` costs `residual(k)`, the others `residual(k) + gap`.
    static func costs(symbols: Int, gap: Float, residual: (Int) -> Float) -> [Float] {
        (0..<symbols).flatMap { k in (0..<16).map { m in residual(k) + (m == k % 16 ? 0 : gap) } }
    }

    /// The margin of symbol `k`'s best value over its second (log-likelihood).
    static func margin(_ likelihoods: [Float], _ k: Int) -> Float {
        let row = likelihoods[(16 * k)..<(16 * k + 16)].sorted(by: >)
        return row[0] - row[1]
    }

    /// A tail that builds up halfway through the frame: the clean first half weighs far more than the
    /// buried second half (a frame-wide variance weighed them the same), and each symbol keeps its
    /// decision.
    @Test func cleanSymbolsWeighMoreThanBuriedOnes() {
        let symbols = 40, window = 64
        let costs = Self.costs(symbols: symbols, gap: 640) { $0 < symbols / 2 ? 64 : 6_400 }
        let likelihoods = LongRoomWeighting.likelihoods(costs: costs, symbols: symbols, windowSamples: window, noiseVariance: 1e-6)
        for k in 0..<symbols {
            let row = Array(likelihoods[(16 * k)..<(16 * k + 16)])
            #expect(row.firstIndex(of: row.max()!) == k % 16)
        }
        // Far from the change (more than `neighbours` symbols): 1 per sample before, 100 after.
        #expect(abs(Self.margin(likelihoods, 5) - 640) < 1e-3)
        #expect(abs(Self.margin(likelihoods, 35) - 6.4) < 1e-4)
    }

    /// Residuals under the noise measured before the frame do not make a symbol more certain than that noise allows.
    @Test func theNoiseBeforeTheFrameIsTheFloor() {
        let costs = Self.costs(symbols: 10, gap: 64) { _ in 0 }
        let likelihoods = LongRoomWeighting.likelihoods(costs: costs, symbols: 10, windowSamples: 64, noiseVariance: 2)
        for k in 0..<10 { #expect(abs(Self.margin(likelihoods, k) - 32) < 1e-4) }
    }
}
