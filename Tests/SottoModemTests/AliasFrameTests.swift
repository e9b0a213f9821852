import Foundation
import SottoChannel
import SottoCodes
import Testing
@testable import SottoModem

/// The short alias frame (two up-chirps, a 12-bit alias and a 16-bit check in 17 symbols): round trips beside token
/// frames, through a room, and what it must reject.
@Suite struct AliasFrameTests {
    /// `frames` (an alias or a token each) at their offsets in silence, with white noise `snr` dB under the bursts'
    /// power (full band) when given.
    func mixed(_ frames: [(alias: UInt16?, token: [UInt8], offset: Int)], rate: Double, length: Int,
               snr: Double? = nil) throws -> [Float] {
        let modulator = try Modulator(sampleRate: rate)
        var out = [Float](repeating: 0, count: length)
        for frame in frames {
            let burst = try frame.alias.map { try modulator.modulate(alias: $0) } ?? modulator.modulate(frame.token)
            for (i, s) in burst.enumerated() where frame.offset + i < length { out[frame.offset + i] += s }
        }
        if let snr {
            var noise = SeededRandom(seed: 3)
            let sigma = Float((Double(modulator.amplitude * modulator.amplitude) / 2 / pow(10, snr / 10)).squareRoot())
            for i in out.indices { out[i] += sigma * noise.sample() }
        }
        return out
    }

    @Test func theAliasFrameIsShortAndCarriesTwelveBits() throws {
        #expect(FrameFormat.aliasSymbolCount == 17)
        #expect(abs(Profile.standard.aliasAirtime - 0.2361) < 0.001, "\(Profile.standard.aliasAirtime)")
        #expect(Profile.standard.aliasAirtime < Profile.standard.airtime(payloadBytes: 2) - 0.05)
        let burst = try Modulator(sampleRate: 48_000).modulate(alias: 0xABC)
        #expect(abs(Double(burst.count) / 48_000 - Profile.standard.aliasAirtime) < 0.001)
        #expect(throws: ModemError.invalidAlias(4096)) { try Modulator().modulate(alias: 4096) }
        #expect(throws: ModemError.invalidAlias(0xFFFF)) { try FrameFormat.aliasSymbols(alias: 0xFFFF, profile: .standard) }
    }

    /// Alias frames between token frames, at every common rate: each reported once, as what it is.
    @Test(arguments: [44_100.0, 48_000.0, 96_000.0])
    func aliasFramesRoundTripBesideTokenFrames(rate: Double) throws {
        let token: [UInt8] = [0x10, 1, 2, 3, 4, 5, 6, 7, 8]
        let sent: [(alias: UInt16?, token: [UInt8], offset: Int)] = [
            (0xABC, [], Int(0.1 * rate)), (nil, token, Int(0.5 * rate)), (0, [], Int(1.2 * rate)), (4095, [], Int(1.6 * rate)),
        ]
        let x = try mixed(sent, rate: rate, length: Int(2.2 * rate))
        // Every profile's receiver at 48 kHz (none may take the alias frame for one of its own), the default elsewhere.
        let profiles = rate == 48_000 ? Profile.all : [.standard]
        let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: profiles, aliasFrames: true)
        #expect(frames.map(\.alias) == [0xABC, nil, 0, 4095], "\(frames.map { ($0.alias, $0.token) })")
        #expect(frames.map(\.token) == [[0x0A, 0xBC], token, [0, 0], [0x0F, 0xFF]])
        for (frame, frameSent) in zip(frames, sent) {
            #expect(abs(frame.startTime - Double(frameSent.offset) / rate) < 0.001, "start \(frame.startTime)")
            #expect(frame.profile == Profile.standard.name)
        }
        if let alias = frames.first {
            #expect(alias.correctedBits == 0)
            #expect(abs(alias.level - Modulator.defaultLevel) < 1, "level \(alias.level)")
            #expect(abs(alias.endTime - alias.startTime - Profile.standard.aliasAirtime) < 0.002)
        }
        // A decoder that does not listen for alias frames hears the token frame alone, as before.
        let plain = try StreamingDecoder.decode(x, sampleRate: rate)
        #expect(plain.map(\.token) == [token])
    }

    /// In white noise 5 dB under the burst (full band; about 16 dB in band) alias frames still decode, chunked or not.
    @Test func aliasFramesDecodeInNoiseWhateverTheChunks() throws {
        let rate = 48_000.0
        let aliases: [UInt16] = [7, 0x5A5, 0xF00, 0x123]
        let x = try mixed(aliases.enumerated().map { (alias: $0.element, token: [], offset: 3_000 + $0.offset * 14_000) },
                          rate: rate, length: 70_000, snr: -5)
        let whole = try StreamingDecoder.decode(x, sampleRate: rate, aliasFrames: true)
        #expect(whole.compactMap(\.alias) == aliases)
        let decoder = try StreamingDecoder(sampleRate: rate, aliasFrames: true)
        var chunked: [DecodedFrame] = []
        var at = 0, size = 777
        while at < x.count {
            let end = min(x.count, at + size)
            chunked += decoder.process(Array(x[at..<end]))
            at = end
            size = size * 3 % 5_000 + 100
        }
        chunked += decoder.finish()
        #expect(chunked == whole)
    }

    /// Through the crowd simulation's room (7 x 5 x 2.6 m, RT60 0.5 s, devices 1-6 m apart, omnidirectional), with
    /// white noise 10 dB under the frame as heard: alias frames are heard, never as another alias. The token frame
    /// beside each is heard too. (With the tone metric alone, 7 of 9 such alias frames, three rooms, decoded; with a preamble of one
    /// chirp, whose room fit has half the known signal, 39 of 45 from one device of five 10-device rooms.)
    @Test func aliasFramesCrossASimulatedRoom() throws {
        let rate = 48_000.0
        let modulator = try Modulator(sampleRate: rate)
        var aliasesHeard = 0, tokensHeard = 0, pairs = 0
        for seed in UInt64(1)...2 {
            let room = CrowdRoom.random(count: 4, seed: seed)
            let alias = UInt16(seed * 1_000 + 5)
            let token: [UInt8] = [0x10] + (0..<8).map { UInt8(truncatingIfNeeded: Int(seed) * 31 + $0) }
            for to in 1..<4 {
                pairs += 1
                var x = [Float](repeating: 0, count: Int(1.6 * rate))
                let aliasHeard = try room.heard(room.played(try modulator.modulate(alias: alias), by: 0, sampleRate: rate), from: 0, to: to, sampleRate: rate)
                let tokenHeard = try room.heard(room.played(try modulator.modulate(token), by: 0, sampleRate: rate), from: 0, to: to, sampleRate: rate)
                for (i, s) in aliasHeard.enumerated() where 2_400 + i < x.count { x[2_400 + i] += s }
                for (i, s) in tokenHeard.enumerated() where 36_000 + i < x.count { x[36_000 + i] += s }
                let power = aliasHeard.prefix(8_000).reduce(0) { $0 + Double($1 * $1) } / 8_000
                var noise = SeededRandom(seed: seed &* 10 &+ UInt64(to))
                let sigma = Float((power / 10).squareRoot())
                for i in x.indices { x[i] += sigma * noise.sample() }
                let frames = try StreamingDecoder.decode(x, sampleRate: rate, aliasFrames: true)
                #expect(frames.allSatisfy { $0.alias == nil ? $0.token == token : $0.alias == alias }, "seed \(seed) to \(to)")
                if frames.contains(where: { $0.alias == alias }) { aliasesHeard += 1 }
                if frames.contains(where: { $0.token == token }) { tokensHeard += 1 }
            }
        }
        #expect(aliasesHeard == pairs, "\(aliasesHeard) of \(pairs) alias frames, \(tokensHeard) token frames")
        #expect(tokensHeard == pairs)
    }

    /// A listener of alias frames hears a token frame through a reverberant crowd room as one that is not.
    /// Every up-chirp it detects pairs with a down-chirp (a token frame) and, when aliases are looked for, with a
    /// second up-chirp too, so the room's echoes and the frame's own chirp-like stretches make twice the
    /// detections; when they overflowed the pending candidates, the oldest (the frame's own preamble) was given up
    /// and the frame lost. In the link survey's rooms (`sotto bench sweep links --devices 20 --trials 2 --seed 1`)
    /// 2.8 % of token frames alone on the air were lost that way (16 pairs of 760 in both tries); the weakest
    /// candidate is given up now. This pair (room of the survey's first seed, device 17 to device 18, 21.7 dB over
    /// the noise) was one of them.
    @Test func aListenerOfAliasFramesHearsTokenFramesThroughAReverberantRoom() throws {
        let rate = 48_000.0
        let room = CrowdRoom.random(count: 20, seed: 12_966_619_160_104_079_557)
        let frame: [UInt8] = [0x10, 0x54, 0x6A, 0x87, 0xFF, 0x24, 0x25, 0x96, 0x04]
        for seed in UInt64(1)...2 {
            let x = try heardAlone(frame, in: room, from: 17, to: 18, noiseBelow: 100, noiseSeed: seed, rate: rate)
            let plain = try StreamingDecoder.decode(x, sampleRate: rate)
            let withAliases = try StreamingDecoder.decode(x, sampleRate: rate, aliasFrames: true)
            #expect(plain.map(\.token) == [frame], "noise \(seed)")
            #expect(withAliases.map(\.token) == [frame], "noise \(seed): \(withAliases.map(\.token))")
        }
    }

    /// The check rejects: a frame whose check is wrong (coded and sent cleanly), and garbage likelihoods.
    @Test func aCorruptedAliasFrameIsRejected() throws {
        let profile = Profile.standard
        var workspace = DecodeWorkspace(profile: profile)
        func likelihoods(_ symbols: [Int]) -> [Float] {
            var rows = [Float](repeating: -8, count: 16 * symbols.count)
            for (s, value) in symbols.enumerated() { rows[16 * s + value] = 0 }
            return rows
        }
        func decode(_ rows: [Float]) -> FrameFormat.Decoded? {
            rows.withUnsafeBufferPointer { FrameFormat.decodeAlias(symbolLogLikelihoods: $0, profile: profile, workspace: &workspace) }
        }
        let good = try FrameFormat.aliasSymbols(alias: 0x2C9, profile: profile)
        #expect(decode(likelihoods(good))?.payload == [0x02, 0xC9])
        // The same alias with each check bit flipped in turn, coded as the modulator codes a frame.
        for bit in 0..<FrameFormat.aliasCheckBits {
            var message = FrameFormat.aliasMessage(0x2C9, profile: profile)
            message[FrameFormat.aliasBits + bit] ^= 1
            let coded = FrameFormat.code.encode(message)
            var symbols = [Int](repeating: 0, count: FrameFormat.aliasSymbolCount)
            coded.withUnsafeBufferPointer { bits in
                symbols.withUnsafeMutableBufferPointer { FrameFormat.packAliasSymbols(codedBits: bits, profile: profile, into: $0) }
            }
            #expect(decode(likelihoods(symbols)) == nil, "check bit \(bit) flipped")
        }
        // Under another profile the frame does not check.
        let other = try FrameFormat.aliasSymbols(alias: 0x2C9, profile: .robust)
        #expect(decode(likelihoods(other)) == nil)
        // Random likelihoods: about 1 in 65 536 would pass; none of 600 may.
        var noise = SeededRandom(seed: 36)
        var accepted = 0
        for _ in 0..<600 {
            let rows = (0..<(16 * FrameFormat.aliasSymbolCount)).map { _ in Float(noise.sample()) * 6 }
            if decode(rows) != nil { accepted += 1 }
        }
        #expect(accepted == 0)
        #expect(decode([1, 2, 3]) == nil)
    }
}
