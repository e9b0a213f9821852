import Foundation
import Testing

/// `sotto bench DIR --expect HEX[,HEX...]` or `--expect-csv FILE`: a user's own recordings benchmarked without a
/// manifest.json (issue 33).
struct BenchExpectTests {
    @Test(.timeLimit(.minutes(2))) func ownRecordingsWithTheirTokensOnTheCommandLineOrInACSV() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("kitchen"), withIntermediateDirectories: true)
        // The same token twice in one file (counted once), and another token in another profile in a subdirectory.
        #expect(try Sotto.run(["send", "0x0102", "--repeat", "2", "--interval", "1", "--out", dir.appendingPathComponent("a.wav").path]).status == 0)
        #expect(try Sotto.run(["send", "--text", "hi", "--profile", "fast", "--out", dir.appendingPathComponent("kitchen/b.flac").path]).status == 0)
        try Data("not audio".utf8).write(to: dir.appendingPathComponent("notes.txt"))

        // One token for every file: b.flac misses it and holds another.
        let every = try Sotto.run(["bench", dir.path, "--expect", "0x0102", "--format", "json"], timeout: 60)
        #expect(every.status == 1, "\(every.stderr)")
        let records = every.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let groups = records.filter { $0["record"] as? String == "fixtureGroup" }
        #expect(groups.map { $0["group"] as? String } == ["recordings", "kitchen", "all"], "\(every.stdout)")
        #expect(groups.first?["found"] as? Int == 1 && groups.first?["falseTokens"] as? Int == 0, "\(every.stdout)")
        let problems = records.filter { $0["record"] as? String == "fixtureProblem" }.map { "\($0["file"] ?? "") \($0["problem"] ?? "") \($0["token"] ?? "")" }
        #expect(problems == ["kitchen/b.flac missed 0102", "kitchen/b.flac unexpected 6869"], "\(problems)")

        // Each file its tokens, from a CSV: everything found, nothing false.
        let csv = dir.appendingPathComponent("expected.csv").path
        try Data("file,token\na.wav,0102\nkitchen/b.flac,0x6869\n".utf8).write(to: URL(fileURLWithPath: csv))
        let listed = try Sotto.run(["bench", dir.path, "--expect-csv", csv], timeout: 60)
        #expect(listed.status == 0, "\(listed.stdout) \(listed.stderr)")
        #expect(listed.stdout.contains("| all | 2 | 2 | 2 | 100.0% | 0 |"), "\(listed.stdout)")

        // Mistakes are said with where they are.
        let badToken = try Sotto.run(["bench", dir.path, "--expect", "0102,xyz"])
        #expect(badToken.status == 64 && badToken.stderr.contains("--expect") && badToken.stderr.contains("'xyz'"), "\(badToken.stderr)")
        try Data("a.wav,0102\nmissing.wav,0102\n".utf8).write(to: URL(fileURLWithPath: csv))
        let badRow = try Sotto.run(["bench", dir.path, "--expect-csv", csv])
        #expect(badRow.status == 2 && badRow.stderr.contains("expected.csv:2: no such file"), "\(badRow.stderr)")
        let noManifest = try Sotto.run(["bench", dir.path])
        #expect(noManifest.status == 2 && noManifest.stderr.contains("--expect HEX"), "\(noManifest.stderr)")
    }

    /// A broken manifest.json is said with the place in the document, not as the JSON decoder's debug text.
    @Test(.timeLimit(.minutes(1))) func aBrokenManifestSaysWhereItIsBroken() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let manifest = dir.appendingPathComponent("manifest.json")
        for (json, says) in [("{\"fixtures\": []}", "version is missing"),
                             ("{\"version\": 1, \"generator\": \"me\", \"fixtures\": {}}", "fixtures is not an array"),
                             ("{\"version\": 1, \"generator\": \"me\", \"fixtures\": [{\"file\": 7}]}", "fixtures[0].file is not a string"),
                             ("{\"version\": 1, ", "is not a valid manifest: not JSON")] {
            try Data(json.utf8).write(to: manifest)
            let run = try Sotto.run(["bench", dir.path])
            #expect(run.status == 2 && run.stderr.contains(says) && !run.stderr.contains("DecodingError"), "\(json): \(run.stderr)")
        }
    }
}
