import Foundation
import Testing

/// Long work stopped from outside: a sweep interrupted with SIGINT keeps what it printed and exits as the
/// exit-status table says (0: "stopped with Ctrl-C"), with a word on what was left.
@Suite(.serialized) struct LongWorkTests {
    @Test(.timeLimit(.minutes(2))) func anInterruptedSweepKeepsItsRowsAndExitsWithZero() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Far more trials than the test waits for: it is still measuring when interrupted.
        let sweep = try SpawnedProcess(Sotto.executable.path, ["bench", "sweep", "offset", "--trials", "100000"], environment: [:], directory: directory)
        defer { sweep.kill9() }
        let deadline = Date(timeIntervalSinceNow: 30)
        var output = ""
        while Date() < deadline {
            output = (try? String(contentsOf: sweep.standardOutputFile, encoding: .utf8)) ?? ""
            if output.contains("|---|") || !sweep.isRunning { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        try #require(sweep.isRunning && output.contains("|---|"), "the table's head was never printed: \(sweep.standardError)")
        let status = await sweep.stop(SIGINT, timeout: 20)
        #expect(status == 0, "\(String(describing: status)) \(sweep.standardError)")
        #expect(sweep.standardError.contains("interrupted after ") && sweep.standardError.contains("the rows printed are what was measured"),
                "\(sweep.standardError)")
        // The head printed before the signal is still there, whole.
        let kept = (try? String(contentsOf: sweep.standardOutputFile, encoding: .utf8)) ?? ""
        #expect(kept.hasPrefix(output) && kept.hasSuffix("\n"), "\(kept)")
    }
}
