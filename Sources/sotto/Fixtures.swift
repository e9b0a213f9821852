import Foundation
#if canImport(CoreFoundation)
import CoreFoundation
#endif

/// The fixture manifest (`Fixtures/manifest.json`): every recording with the tokens it must yield.
struct FixtureManifest: Codable {
    struct Expected: Codable, Hashable {
        /// Lowercase hex.
        var token: String
        var profile: String
    }
    struct Fixture: Codable {
        /// Path relative to the manifest.
        var file: String
        /// Group the benchmark reports it under.
        var group: String
        var description: String
        /// Tokens the decoder must find, in order.
        var expected: [Expected]
        /// License and attribution of real recordings used to make it, when any.
        var attribution: String?
    }
    var version = 1
    var generator = "scripts/make-fixtures"
    var fixtures: [Fixture]

    static func load(directory: String) throws -> FixtureManifest {
        let path = (directory as NSString).appendingPathComponent("manifest.json")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CommandError("cannot read \(path): is \(directory) a fixture directory? (scripts/make-fixtures makes one)")
        }
        do { return try JSONDecoder().decode(FixtureManifest.self, from: data) }
        catch { throw CommandError("\(path) is not a valid manifest: \(error)") }
    }

    func write(directory: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(self)
        try data.write(to: URL(fileURLWithPath: (directory as NSString).appendingPathComponent("manifest.json")))
    }
}

/// CPU time of the calling thread (s).
func threadCPUTime() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}
