import Foundation
import SottoChannel
import SottoDSP
import Testing
@testable import SottoModem

/// Receivers of profiles that need the same band share one front end, and a preamble belongs to the
/// profile whose templates matched it best.
@Suite struct FrontEndSharingTests {
    @Test func theDefaultAndRobustProfilesShareOneFrontEnd() throws {
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: Profile.all)
        #expect(decoder.frontEnds.count == 3)
        let shared = try #require(decoder.frontEnds.first { $0.receivers.count == 2 })
        #expect(Set(shared.receivers.map(\.profile.name)) == ["default", "robust"])
        // The shared history is long enough for the robust profile's longest frame.
        let robust = FrameReceiver.historyNeeded(profile: .robust, basebandRate: shared.frontEnd.decimator.outputRate)
        #expect(shared.frontEnd.history.capacity >= robust)
        #expect(shared.receivers.allSatisfy { $0.history === shared.frontEnd.history })
    }

    @Test func aPreambleBelongsToTheReceiverThatMatchedItBest() {
        let frontEnd = BasebandFrontEnd(FrameReceiver.frontEndParameters(profile: .standard, sampleRate: 48_000), profiles: [.standard])
        let first = ObjectIdentifier(Profile.self), second = ObjectIdentifier(Int.self)
        frontEnd.record(.init(receiver: first, start: 1_000, strength: 1.6))
        #expect(frontEnd.isOutranked(second, start: 1_050, strength: 0.9, window: 160))
        #expect(!frontEnd.isOutranked(second, start: 1_050, strength: 1.7, window: 160))
        #expect(!frontEnd.isOutranked(second, start: 1_500, strength: 0.9, window: 160))
        #expect(!frontEnd.isOutranked(first, start: 1_000, strength: 0.5, window: 160))
        frontEnd.recordDecoded(first, start: 1_000, end: 3_000)
        #expect(frontEnd.isInsideOtherFrame(second, 2_000) && !frontEnd.isInsideOtherFrame(second, 3_000))
        #expect(!frontEnd.isInsideOtherFrame(first, 2_000))
        // Bounded: the oldest detections are forgotten.
        for n in 0..<BasebandFrontEnd.detectionsKept { frontEnd.record(.init(receiver: first, start: Double(10_000 + n), strength: 0.1)) }
        #expect(frontEnd.detections.count == BasebandFrontEnd.detectionsKept)
        #expect(!frontEnd.isOutranked(second, start: 1_050, strength: 0.9, window: 160))
    }

    @Test func aDetectionInsideAFrameAnotherProfileMatchedFarBetterIsGivenUp() {
        let board = DetectionBoard()
        let robust = ObjectIdentifier(Profile.self), fast = ObjectIdentifier(Int.self)
        board.record(.init(receiver: robust, start: 1.0, strength: 1.7, latestEnd: 2.5))
        #expect(board.isUnderDominantFrame(fast, start: 1.2, strength: 0.35), "a stray inside the frame, five times weaker")
        #expect(!board.isUnderDominantFrame(fast, start: 1.2, strength: 1.9), "a frame as strong: its own")
        #expect(!board.isUnderDominantFrame(fast, start: 0.9, strength: 0.35), "before the frame")
        #expect(!board.isUnderDominantFrame(fast, start: 2.6, strength: 0.35), "after the longest frame could end")
        #expect(!board.isUnderDominantFrame(robust, start: 1.2, strength: 0.35), "the receiver's own detections are not judged here")
        // Decoded: the frame ends where it ended.
        board.settle(robust, start: 1.0, end: 1.5)
        #expect(board.isUnderDominantFrame(fast, start: 1.4, strength: 0.35))
        #expect(!board.isUnderDominantFrame(fast, start: 1.6, strength: 0.35), "after the decoded frame's end")
        // Come to nothing: it holds nothing off.
        board.forget(robust, start: 1.0)
        #expect(!board.isUnderDominantFrame(fast, start: 1.4, strength: 0.35))
        // Bounded.
        for n in 0..<(2 * DetectionBoard.kept) { board.record(.init(receiver: robust, start: Double(n), strength: 1, latestEnd: Double(n) + 1)) }
        #expect(!board.isUnderDominantFrame(fast, start: 0.5, strength: 0.1), "the oldest are forgotten")
        #expect(board.isUnderDominantFrame(fast, start: Double(2 * DetectionBoard.kept) - 0.5, strength: 0.1))
    }

    /// `bursts` at their offsets (s) in `seconds` of white noise `snr` dB under their power (full band), 48 kHz.
    func mixed(_ bursts: [(profile: Profile, token: [UInt8], offset: Double)], seconds: Double, snr: Double) throws -> [Float] {
        let rate = 48_000.0
        var out = [Float](repeating: 0, count: Int(seconds * rate))
        var amplitude: Float = 0
        for burst in bursts {
            let modulator = try Modulator(profile: burst.profile, sampleRate: rate)
            amplitude = modulator.amplitude
            let samples = try modulator.modulate(burst.token)
            let first = Int(burst.offset * rate)
            for (i, s) in samples.enumerated() where first + i < out.count { out[first + i] += s }
        }
        var noise = SeededRandom(seed: 5)
        let sigma = Float((Double(amplitude * amplitude) / 2 / pow(10, snr / 10)).squareRoot())
        for i in out.indices { out[i] += sigma * noise.sample() }
        return out
    }

    /// A robust frame's symbols look like the fast profile's chirps here and there: the fast receiver used to
    /// try every length at both time scales on each such detection (about 170 decodes per robust frame). Now
    /// they are given up while the robust frame may be on the air, and frames of every profile still decode,
    /// one right after another.
    @Test func strayDetectionsInsideAnotherProfilesFrameCostLittle() throws {
        let token: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let robustFrames = (0..<4).map { (profile: Profile.robust, token: token, offset: 0.3 + 1.5 * Double($0)) }
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: Profile.all)
        let frames = decoder.process(try mixed(robustFrames, seconds: 6.5, snr: 0)) + decoder.finish()
        #expect(frames.map(\.profile) == Array(repeating: "robust", count: 4) && frames.allSatisfy { $0.token == token })
        let fast = try #require(decoder.frontEnds.flatMap(\.receivers).first { $0.profile == .fast })
        #expect(fast.toneMetricDecodes < 4 * 20, "the fast receiver decoded \(fast.toneMetricDecodes) times inside four robust frames")

        // A short robust frame, then at once a fast and a default frame (inside the time a 16-byte robust frame
        // would take), at a lower SNR: both heard.
        let short: [UInt8] = [9]
        let sequence = [(profile: Profile.robust, token: short, offset: 0.3),
                        (profile: Profile.fast, token: token, offset: 0.3 + Profile.robust.airtime(payloadBytes: 1) + 0.02),
                        (profile: Profile.standard, token: token, offset: 1.3)]
        let second = try StreamingDecoder(sampleRate: 48_000, profiles: Profile.all)
        let heard = second.process(try mixed(sequence, seconds: 2.5, snr: -3)) + second.finish()
        #expect(heard.map(\.profile) == ["robust", "fast", "default"], "\(heard.map { ($0.profile, $0.startTime) })")
    }
}
