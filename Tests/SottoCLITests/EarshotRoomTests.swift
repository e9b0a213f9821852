import SottoExchange
import SottoModem
import SottoTools
import Testing

/// Earshot through a simulated room and the real decoder: the publisher's token frame, played by the nominal
/// speaker in a quiet 60 m^3 room (RT60 0.5 s), decoded 1 m and 8 m away, reported to the matcher with the SNR
/// the decoder measured.
@Suite struct EarshotRoomTests {
    @Test func heardAtOneMetreIsFoundWithEarshotAndAtEightIsNot() throws {
        let a = SessionID("A"), b = SessionID("B")
        let earshot = OperationID(1), plain = OperationID(2)
        let message = try Message(type: "exhibit", content: Array("The Night Watch".utf8))
        for seed in [UInt64(1), 2, 3] {
            for (distance, inEarshot) in [(1.0, true), (8.0, false)] {
                var core = MatcherCore()
                guard case .broadcastToken(_, let token)? = core.handle(.openSession(a, appID: "museum", broadcasts: true), now: 0).first else {
                    Issue.record("no token")
                    return
                }
                _ = core.handle(.openSession(b, appID: "museum", broadcasts: false), now: 0)
                _ = core.handle(.publish(a, OperationID(1), message, .default), now: 0)
                _ = core.handle(.subscribe(b, earshot, .allMyTypes, try Strategy(distanceType: .earshot), lostTimeout: 10), now: 0)
                _ = core.handle(.subscribe(b, plain, .allMyTypes, .default, lostTimeout: 10), now: 0)
                let frame = try #require(try EarshotSweep.hear(Payload.token(token).frameBytes, distance: distance, rt60: 0.5, volume: 60, seed: seed),
                                         "seed \(seed), \(distance) m: not decoded")
                let payload = try #require(Payload(frame: frame.token))
                let events = core.handle(.observe(b, payload, snr: frame.snr, level: frame.level), now: 1)
                // Heard either way: the subscription without earshot finds it.
                #expect(events.contains(.found(b, plain, message)), "seed \(seed), \(distance) m")
                #expect(events.contains(.found(b, earshot, message)) == inEarshot,
                        "seed \(seed), \(distance) m: SNR \(frame.snr) dB, threshold \(core.earshotSNR) dB")
            }
        }
    }

    /// The distance estimated from the same frames: within a factor of 2.5 at 1 m (the room adds its reverberation), and farther at 8 m than at 1 m.
    @Test func theDistanceEstimateSeparatesOneMetreFromEight() throws {
        let token: [UInt8] = [0x10, 1, 2, 3, 4, 5, 6, 7, 8]
        let near = try #require(try EarshotSweep.hear(token, distance: 1, rt60: 0.5, volume: 60, seed: 4))
        let far = try #require(try EarshotSweep.hear(token, distance: 8, rt60: 0.5, volume: 60, seed: 4))
        let estimate = AudioDistance()
        #expect((0.4...2.5).contains(estimate.meters(snr: near.snr)), "\(near.snr) dB")
        #expect(estimate.meters(snr: far.snr) > 2 * estimate.meters(snr: near.snr), "\(near.snr) / \(far.snr) dB")
        #expect(estimate.meters(snr: .nan).isNaN)
        #expect(estimate.meters(snr: 200) == 0.1 && estimate.meters(snr: -50) == AudioDistance.farthest)
    }

    /// `--earshot` is the matcher's rule: refused as a usage error without a matcher to publish through, and
    /// with the daemon, which does not carry it.
    @Test func earshotFlagsAreUsageErrorsWhereTheyCannotApply() throws {
        for arguments in [["publish", "--earshot", "--text", "hi", "--out", "/tmp/never-written.wav"],
                          ["publish", "--earshot", "--daemon", "--text", "hi"],
                          ["subscribe", "--earshot", "--daemon"]] {
            let result = try Sotto.run(arguments)
            #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("--earshot"), "\(arguments): \(result.stderr)")
        }
    }
}
