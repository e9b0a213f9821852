import Foundation
import Testing

/// `sotto bench sweep --listen`: the sweeps of one frame per trial decode with the receivers a user's decoder runs
/// (all four, as `sotto decode` and the radio), and say so in their tables; a profile that does not exist, or a
/// sweep that does not decode one frame per trial, is refused.
@Suite struct SweepListenTests {
    @Test(.timeLimit(.minutes(2))) func aSweepDecodesWithTheReceiversItIsToldToListenWith() throws {
        let sweep = try Sotto.run(["bench", "sweep", "snr", "--profile", "fast", "--lengths", "8", "--trials", "2", "--listen", "all",
                                   "--format", "json"], timeout: 100)
        #expect(sweep.status == 0, "\(sweep.stderr)")
        let rows = sweep.stdout.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
        #expect(!rows.isEmpty, "\(sweep.stdout)")
        #expect(rows.allSatisfy { ($0["caption"] as? String)?.contains("The decoder listens for default, fast, robust, audible") == true },
                "\(rows)")
        let plain = try Sotto.run(["bench", "sweep", "snr", "--profile", "fast", "--lengths", "8", "--trials", "2", "--format", "json"],
                                  timeout: 100)
        #expect(plain.status == 0 && !plain.stdout.contains("The decoder listens for"), "\(plain.stderr)")
    }

    @Test func listeningForWhatDoesNotExistIsRefused() throws {
        let unknown = try Sotto.run(["bench", "sweep", "snr", "--listen", "nope", "--trials", "1"])
        #expect(unknown.status == 64 && unknown.stderr.contains("unknown profile 'nope' in --listen"), "\(unknown.stderr)")
        let empty = try Sotto.run(["bench", "sweep", "snr", "--listen", "default,", "--trials", "1"])
        #expect(empty.status == 64 && empty.stderr.contains("unknown profile '' in --listen"), "\(empty.stderr)")
        let crowd = try Sotto.run(["bench", "sweep", "crowd", "--listen", "all", "--trials", "1"])
        #expect(crowd.status == 64 && crowd.stderr.contains("--listen is for the sweeps of one frame per trial"), "\(crowd.stderr)")
    }
}
