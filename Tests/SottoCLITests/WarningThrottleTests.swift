import Foundation
import SottoSupport
import Testing

/// Repeated warnings rate-limited with counts: the pure throttle, and `send --self-check` from outside
/// through ALSA's file plugin (a capture that hears nothing: every transmission is missed).
struct WarningThrottleTests {
    @Test func theFirstOfAKindIsSaidThenOnePerIntervalWithTheCountHeldBack() {
        var throttle = WarningThrottle(interval: 30)
        #expect(throttle.admit("gone 1", kind: "gone", at: 0) == "gone 1")
        #expect(throttle.admit("gone 2", kind: "gone", at: 1) == nil)
        #expect(throttle.admit("busy", kind: "busy", at: 2) == "busy")          // another kind: said at once
        #expect(throttle.admit("gone 3", kind: "gone", at: 29.9) == nil)
        #expect(throttle.admit("gone 4", kind: "gone", at: 31) == "gone 4 (2 more like it in the last 31 s, held back)")
        #expect(throttle.admit("gone 5", kind: "gone", at: 32) == nil)
        #expect(throttle.admit("gone 6", kind: "gone", at: 33) == nil)
        // At the end: the last held back of each kind, with its count; then nothing is left.
        #expect(throttle.finish() == ["gone 6 (2 like it since the last said, held back)"])
        #expect(throttle.finish().isEmpty)
    }

    @Test func aLoopOfMissedSelfChecksSaysOneWarningAndTheCount() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        try FilePluginRig.raw([Float](repeating: 0, count: 48_000)).write(to: rig.input)
        let result = try Sotto.run(["send", "0x0a0b", "--device", "sotto_playback", "--repeat", "5", "--interval", "0.3", "--self-check", "sotto_capture"],
                                   environment: rig.environment, timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        let warnings = result.stderr.split(separator: "\n").filter { $0.contains("own token not heard") }
        // Five transmissions missed: the first said, the last at the end with the four held back.
        #expect(warnings.count == 2, "\(result.stderr)")
        #expect(warnings.first?.contains("(1 transmission in a row)") == true, "\(result.stderr)")
        #expect(warnings.last?.contains("own token not heard (5 transmissions in a row)") == true
                && warnings.last?.contains("(4 like it since the last said, held back)") == true, "\(result.stderr)")
    }
}
