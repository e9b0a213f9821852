import Foundation
import SottoModem
import SottoTools
import Testing

/// Every command that prints records prints JSON Lines of the one schema of SottoTools' JSONLines, and the
/// article that documents it shows a valid example of every record type.
@Suite(.serialized) struct JSONLinesSchemaTests {
    /// Decodes `line` as the record type its `record` field names and checks that it is of the current
    /// schema and encodes back to exactly the same object: no field unknown to the type, none missing,
    /// none of another JSON type. Returns the record type.
    @discardableResult
    static func validate(_ line: Substring) throws -> String? {
        let data = Data(line.utf8)
        let object = try JSONSerialization.jsonObject(with: data) as? NSDictionary
        guard let name = object?["record"] as? String, let type = JSONLines.recordTypes[name] else {
            Issue.record("no known record type: \(line)")
            return nil
        }
        #expect(object?["schema"] as? Int == JSONLines.schemaVersion, "\(line)")
        func decode<Record: JSONRecord>(_ type: Record.Type) throws -> String { JSONLines.line(try JSONDecoder().decode(type, from: data)) }
        let again = try JSONSerialization.jsonObject(with: Data(try decode(type).utf8)) as? NSDictionary
        #expect(again == object, "\(line) is not exactly a \(name) record")
        return name
    }

    /// Validates every line of `output`; returns their record types.
    static func validateAll(_ output: String) throws -> [String] {
        try output.split(separator: "\n").compactMap { try validate($0) }
    }

    @Test func everyCommandPrintsTheSchema() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("a.wav").path
        #expect(try Sotto.run(["send", "--text", "hi/\"x\"", "--out", wav]).status == 0)

        #expect(try Self.validateAll(Sotto.run(["decode", "--format", "json", wav, wav]).stdout) == ["frame", "frame"])
        #expect(try Self.validateAll(Sotto.run(["profiles", "--format", "json"]).stdout) == Array(repeating: "profile", count: Profile.all.count))

        let published = dir.appendingPathComponent("p.wav").path
        // A fixed jitter seed: the file's frame times decide whether signal events come between found and lost.
        #expect(try Sotto.run(["publish", "--text", "hello", "--ttl", "4", "--seed", "1", "--out", published]).status == 0)
        let subscribed = try Sotto.run(["subscribe", "--input", published, "--lost-timeout", "2", "--format", "json"])
        #expect(try Self.validateAll(subscribed.stdout) == ["event", "event"], "\(subscribed.stdout)\(subscribed.stderr)")

        let json = #"{"version": 1, "generator": "test", "fixtures": [{"file": "a.wav", "group": "g", "description": "d", "expected": [{"token": "99", "profile": "default"}]}]}"#
        try Data(json.utf8).write(to: dir.appendingPathComponent("manifest.json"))
        let bench = try Sotto.run(["bench", "fixtures", dir.path, "--format", "json"])
        #expect(try Self.validateAll(bench.stdout) == ["fixtureGroup", "fixtureGroup", "fixtureProblem", "fixtureProblem"])
        let sweep = try Sotto.run(["bench", "sweep", "latency", "--trials", "2", "--format", "json"])
        #expect(try Self.validateAll(sweep.stdout) == ["sweepRow"], "\(sweep.stderr)")

        // Live capture and devices through ALSA's file plugin (see LiveAudioTests).
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        let modulator = try Modulator()
        try FilePluginRig.raw([Float](repeating: 0, count: 4_800) + modulator.modulate([7, 7]) + [Float](repeating: 0, count: 48_000)).write(to: rig.input)
        let listen = try Sotto.run(["listen", "--device", "sotto_capture", "--format", "json", "--duration", "1.5"], environment: rig.environment)
        #expect(try Self.validateAll(listen.stdout) == ["frame"], "\(listen.stderr)")
        let devices = try Sotto.run(["devices", "--format", "json"], environment: ["ALSA_CONFIG_PATH": "/usr/share/alsa/alsa.conf"])
        let types = try Self.validateAll(devices.stdout)
        #expect(!types.isEmpty && types.allSatisfy { $0 == "device" }, "\(devices.stdout)")
    }

    /// The article's examples: one per record type, each valid.
    @Test func theArticleHasAValidExampleOfEveryRecordType() throws {
        let article = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/SottoTools/SottoTools.docc/JSONLinesSchema.md")
        let text = try String(contentsOf: article, encoding: .utf8)
        var examples: [String] = []
        var inBlock = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { inBlock = line == "```json"; continue }
            if inBlock && line.hasPrefix("{") { examples.append(String(line)) }
        }
        let types = try examples.compactMap { try Self.validate(Substring($0)) }
        #expect(Set(types) == Set(JSONLines.recordTypes.keys), "\(types)")
    }
}
