import Foundation
import SottoDaemon
import Testing

extension DaemonTests {
    /// `sotto ops watch ID` follows one operation: it ends by itself (status 0) once that operation has ended,
    /// by a cancel or its time to live, instead of waiting for Ctrl-C; a watch of everything goes on.
    @Test func watchingOneOperationEndsWithIt() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        let cancelled = try rig.run(["subscribe", "--daemon"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let expiring = try rig.run(["publish", "--daemon", "--text", "hi", "--ttl", "2"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(OperationID.isValid(cancelled) && OperationID.isValid(expiring))
        let one = try BackgroundSotto(["ops", "watch", cancelled], environment: rig.environment)
        defer { one.process.terminate() }
        let other = try BackgroundSotto(["ops", "watch", expiring, "--format", "json"], environment: rig.environment)
        defer { other.process.terminate() }
        let all = try BackgroundSotto(["ops", "watch"], environment: rig.environment)
        defer { all.process.terminate() }
        try await Task.sleep(for: .milliseconds(500))

        #expect(try rig.run(["ops", "cancel", cancelled]).status == 0)
        #expect(await one.waitForExit(timeout: 10), "\(one.output) \(one.standardError)")
        #expect(one.process.terminationStatus == 0 && one.output.last?.contains("operation ended: cancelled") == true, "\(one.output)")

        // The publication's two seconds run out: its watch prints the notice (JSON Lines) and ends.
        #expect(await other.waitForExit(timeout: 15), "\(other.output) \(daemon.standardError)")
        #expect(other.process.terminationStatus == 0, "\(other.standardError)")
        #expect(other.output.last?.contains(#""status":"expired""#) == true, "\(other.output)")
        #expect(try JSONLinesSchemaTests.validateAll(other.output.joined(separator: "\n") + "\n").last == "notice")

        // Watching everything is not tied to one operation.
        #expect(all.process.isRunning, "\(all.output) \(all.standardError)")
        #expect(all.output.contains { $0.contains(cancelled) } && all.output.contains { $0.contains(expiring) }, "\(all.output)")
        await all.interrupt()
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
    }
}
