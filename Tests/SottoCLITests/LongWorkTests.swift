import Foundation
import SottoTools
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

    /// Interrupted in the middle of a row (a row of the offset sweep is 11 points), the rows done and the row under
    /// way are printed, the latter with "-" for the points not measured: in the table and in JSON Lines.
    @Test(.timeLimit(.minutes(2)), arguments: ["text", "json"]) func anInterruptedSweepPrintsTheRowUnderWay(format: String) async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let sweep = try SpawnedProcess(Sotto.executable.path, ["bench", "sweep", "offset", "--trials", "1", "--profile", "fast",
                                                              "--lengths", "1,2,3,4", "--format", format], environment: [:], directory: directory)
        defer { sweep.kill9() }
        func rows() -> [String] {
            let text = (try? String(contentsOf: sweep.standardOutputFile, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init).filter { $0.hasPrefix("| fast") || $0.hasPrefix("{") }
        }
        func waitForRows(_ count: Int) async throws -> Date {
            let deadline = Date(timeIntervalSinceNow: 60)
            while Date() < deadline, sweep.isRunning, rows().count < count { try await Task.sleep(for: .milliseconds(10)) }
            try #require(sweep.isRunning && rows().count == count, "not \(count) rows: \(rows()) \(sweep.standardError)")
            return Date()
        }
        // About half of the third row: rows take about as long as each other (the second one is the measure), so
        // the third has some points done and some not, whatever the machine's speed.
        let first = try await waitForRows(1)
        let second = try await waitForRows(2)
        try await Task.sleep(for: .seconds(second.timeIntervalSince(first) * 0.45))
        let status = await sweep.stop(SIGINT, timeout: 20)
        #expect(status == 0, "\(String(describing: status)) \(sweep.standardError)")
        let printed = rows()
        try #require(printed.count >= 3 && printed.count <= 4, "\(printed)")
        let last = try #require(printed.last)
        #expect(sweep.standardError.contains("the last one, partial, has \"-\" for the points not measured"), "\(sweep.standardError)")
        if format == "text" {
            let cells = last.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(cells.count == 13 && cells.last == "-" && cells[2].hasSuffix("%"), "\(last)")
            #expect(!printed[0].split(separator: "|").contains { $0.trimmingCharacters(in: .whitespaces) == "-" }, "\(printed[0])")
        } else {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
            #expect(object["partial"] as? Bool == true, "\(last)")
            let cells = try #require(object["cells"] as? [String: String])
            #expect(cells["5000 ppm"] == "-" && cells["-5000 ppm"]?.hasSuffix("%") == true, "\(last)")
            let values = try #require(object["values"] as? [String: Double])
            #expect(values["minus_5000_ppm_percent"] != nil && values["5000_ppm_percent"] == nil, "\(last)")
            #expect(!printed[0].contains("partial"), "\(printed[0])")
        }
    }
}

/// A sweep's progress: on a terminal (a pseudo-terminal made by script(1)) the row of how many and the time
/// left; nothing when standard error is a pipe.
struct SweepProgressTests {
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs script(1) for a terminal"))
    func progressShowsRowsAndTimeLeftOnATerminalOnly() throws {
        let arguments = ["bench", "sweep", "latency", "--trials", "12", "--lengths", "1,8"]  // rows of over 0.1 s: the line is redrawn at most ten times a second
        let command = ([Sotto.executable.path] + arguments).joined(separator: " ")
        let terminal = try Sotto.run(["-qc", command, "/dev/null"], timeout: 120, launcher: "/usr/bin/script")
        #expect(terminal.status == 0, "\(terminal.stderr)")
        // script(1) puts the terminal's output (stderr too) on its standard output.
        #expect(terminal.stdout.contains("latency: default, 1 bytes (row 1 of 2, "), "\(terminal.stdout)")
        #expect(terminal.stdout.contains("(row 2 of 2, ") && terminal.stdout.contains(" left)"), "\(terminal.stdout)")
        let piped = try Sotto.run(arguments, timeout: 120)
        #expect(piped.status == 0 && !piped.stderr.contains("row 1 of"), "\(piped.stderr)")
    }
}

/// Sweep rows in JSON: numbers with their unit in the key, and the columns in the table's order.
struct SweepJSONTests {
    @Test func valueKeysCarryTheirUnits() {
        #expect(SweepRowRecord.valueKey(column: "Eb/N0 90% (dB)", percent: false) == "eb_n0_90_percent_db")
        #expect(SweepRowRecord.valueKey(column: "-300 ppm", percent: true) == "minus_300_ppm_percent")
        #expect(SweepRowRecord.valueKey(column: "RT60 0.3 s at 1 m", percent: true) == "rt60_0_3_s_at_1_m_percent")
        #expect(SweepRowRecord.valueKey(column: "success", percent: true) == "success_percent")
        let row = SweepRowRecord(sweep: "speech", caption: "c", columns: ["profile", "bytes", "success", "false tokens", "x"],
                                 cells: ["default", "8", "97.5%", "0", "-"])
        #expect(row.values == ["bytes": 8, "success_percent": 97.5, "false_tokens": 0])
        #expect(row.cells["success"] == "97.5%" && row.columns.last == "x")
    }

    @Test func aSweepPrintsTypedValues() throws {
        let sweep = try Sotto.run(["bench", "sweep", "latency", "--trials", "2", "--lengths", "1", "--format", "json"], timeout: 120)
        #expect(sweep.status == 0, "\(sweep.stderr)")
        let line = try #require(sweep.stdout.split(separator: "\n").first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["columns"] as? [String] == ["profile", "bytes", "median (ms)", "95th percentile (ms)", "max (ms)"], "\(line)")
        let values = try #require(object["values"] as? [String: Double], "\(line)")
        #expect(values["bytes"] == 1 && values["median_ms"] != nil && values["max_ms"] != nil, "\(line)")
    }
}
