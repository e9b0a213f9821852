import Foundation
#if canImport(CoreFoundation)
import CoreFoundation
#endif

/// The fixture manifest (`Fixtures/manifest.json`): every recording with the tokens it must yield.
public struct FixtureManifest: Codable, Sendable {
    /// A token a fixture must yield.
    public struct Expected: Codable, Hashable, Sendable {
        /// Lowercase hex.
        public var token: String
        public var profile: String
        public init(token: String, profile: String) { self.token = token; self.profile = profile }
    }
    /// One recording.
    public struct Fixture: Codable, Sendable {
        /// Path relative to the manifest.
        public var file: String
        /// Group the benchmark reports it under.
        public var group: String
        public var description: String
        /// Tokens the decoder must find, in order.
        public var expected: [Expected]
        /// License and attribution of real recordings used to make it, when any.
        public var attribution: String?
    }
    public var version = 1
    public var generator = "scripts/make-fixtures"
    public var fixtures: [Fixture]

    public init(fixtures: [Fixture]) { self.fixtures = fixtures }

    /// Reads `directory`/manifest.json.
    public static func load(directory: String) throws -> FixtureManifest {
        let path = (directory as NSString).appendingPathComponent("manifest.json")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ToolError("cannot read \(path): is \(directory) a fixture directory? (scripts/make-fixtures makes one)")
        }
        do { return try JSONDecoder().decode(FixtureManifest.self, from: data) }
        catch { throw ToolError("\(path) is not a valid manifest: \(error)") }
    }

    /// Writes `directory`/manifest.json.
    public func write(directory: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(self)
        try data.write(to: URL(fileURLWithPath: (directory as NSString).appendingPathComponent("manifest.json")))
    }
}

/// CPU time of the calling thread (s).
public func threadCPUTime() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

/// A failure of a tool (a missing data directory, a manifest that does not parse), with what to do.
public struct ToolError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
