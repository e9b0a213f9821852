import Foundation
import Testing

/// The operator's console counts a real `sotto load` run: `scripts/screenshot-console` (the docs' screenshot) starts
/// `sotto serve --admin` on loopback with a fresh store, runs `sotto load` against it, and logs in to the console
/// in headless Chromium, which registers a beacon with an attachment and waits until the live view shows the load's
/// sessions, its sightings a second and sparklines of them; the shot is a PNG of the page.
@Suite(.enabled(if: webChromium != nil && FileManager.default.isExecutableFile(atPath: "/usr/bin/node"), "no Chromium or Node (scripts/install-deps)"))
struct ConsoleUnderLoadTests {
    @Test(.timeLimit(.minutes(3))) func theConsolesLiveViewCountsALoadRun() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let shot = directory.appendingPathComponent("console.png")
        let script = WebPageEndToEndTests.root.appendingPathComponent("scripts/screenshot-console").path
        let run = try SpawnedProcess("/bin/bash", [script, shot.path],
                                     environment: ["SOTTO_BIN": Sotto.executable.path, "LOAD_SESSIONS": "100"], directory: directory)
        let status = await run.waitForExit(timeout: 150)
        if status == nil { await run.stop(SIGTERM, timeout: 10) }
        let output = (try? String(contentsOf: run.standardOutputFile, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(output)\n\(run.standardError)")
        let line = output.split(separator: "\n").first { $0.hasPrefix("{") }.map(String.init) ?? "{}"
        let seen = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
        #expect(seen["counted"] as? Bool == true && seen["step"] as? String == "done", "\(output)")
        #expect(Int(seen["sessions"] as? String ?? "") ?? 0 >= 100, "the load's sessions: \(seen)")
        #expect(Double(seen["sightingsPerSecond"] as? String ?? "") ?? 0 > 0, "\(seen)")
        let png = try Data(contentsOf: shot)
        #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]) && png.count > 10_000, "a PNG of the page")
    }
}
