import Foundation
import SottoAudio
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

    /// The profile of an expected token that may come in any profile (a user's own recordings, whose
    /// profile the user need not know).
    public static let anyProfile = "any"

    /// A manifest for a user's own recordings without one: every audio file under `directory` (sorted, in
    /// subdirectories too; `manifest.json` and files of unknown extensions skipped), each expected to yield
    /// each of `tokens` (lowercase hex) in any profile. Group: the file's subdirectory, or `recordings`.
    /// - Parameters:
    ///   - directory: the recordings' directory.
    ///   - tokens: the tokens every file holds (hex, lowercase, no prefix).
    /// - Returns: the manifest.
    /// - Throws: `ToolError` when the directory cannot be read or holds no audio file.
    public static func recordings(in directory: String, expecting tokens: [String]) throws -> FixtureManifest {
        let files = try audioFiles(in: directory)
        return FixtureManifest(fixtures: files.map { file in
            Fixture(file: file, group: group(of: file), description: "", expected: tokens.map { Expected(token: $0, profile: anyProfile) })
        })
    }

    /// A manifest from a CSV of `file,token` rows (paths relative to `directory`; a file on several rows holds
    /// several tokens; a first row `file,token` is a header; blank lines and lines starting with # are skipped).
    /// - Parameters:
    ///   - csv: the CSV's text.
    ///   - directory: the directory the paths are relative to.
    ///   - name: the CSV's name, for errors.
    /// - Returns: the manifest, files in their first row's order.
    /// - Throws: `ToolError` naming the line of a row that is not `file,token` with a token of 1-16 bytes of hex,
    ///   or a file that does not exist.
    public static func recordings(csv: String, directory: String, name: String) throws -> FixtureManifest {
        var order: [String] = []
        var tokens: [String: [String]] = [:]
        for (number, raw) in csv.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let cells = line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            if number == 0 && cells.map({ $0.lowercased() }) == ["file", "token"] { continue }
            guard cells.count == 2, !cells[0].isEmpty, let token = normalizedToken(cells[1]) else {
                throw ToolError("\(name):\(number + 1): expected file,token (a token of 1-16 bytes in hex), got '\(line)'")
            }
            let path = (directory as NSString).appendingPathComponent(cells[0])
            guard FileManager.default.fileExists(atPath: path) else { throw ToolError("\(name):\(number + 1): no such file \(path)") }
            if tokens[cells[0]] == nil { order.append(cells[0]) }
            tokens[cells[0], default: []].append(token)
        }
        guard !order.isEmpty else { throw ToolError("\(name): no file,token rows") }
        return FixtureManifest(fixtures: order.map { file in
            Fixture(file: file, group: group(of: file), description: "", expected: tokens[file]!.map { Expected(token: $0, profile: anyProfile) })
        })
    }

    /// `text` as lowercase hex of 1-16 bytes (an optional 0x), or nil.
    public static func normalizedToken(_ text: String) -> String? {
        var hex = text.lowercased()
        if hex.hasPrefix("0x") { hex.removeFirst(2) }
        guard hex.count % 2 == 0, (2...32).contains(hex.count), hex.allSatisfy({ $0.isHexDigit }) else { return nil }
        return hex
    }

    private static func group(of file: String) -> String {
        let folder = (file as NSString).deletingLastPathComponent
        return folder.isEmpty ? "recordings" : folder
    }

    /// Audio files under `directory`, relative to it, sorted.
    private static func audioFiles(in directory: String) throws -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue,
              let enumerator = FileManager.default.enumerator(atPath: directory) else {
            throw ToolError("cannot read the directory \(directory)")
        }
        let extensions = Set(AudioFileFormat.byExtension.keys).subtracting(["raw", "pcm"])
        var files: [String] = []
        while let next = enumerator.nextObject() as? String {
            if extensions.contains((next as NSString).pathExtension.lowercased()) { files.append(next) }
        }
        guard !files.isEmpty else {
            throw ToolError("no audio file in \(directory) (\(extensions.sorted().joined(separator: ", ")))")
        }
        return files.sorted()
    }

    /// Reads `directory`/manifest.json.
    public static func load(directory: String) throws -> FixtureManifest {
        let path = (directory as NSString).appendingPathComponent("manifest.json")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ToolError("cannot read \(path): is \(directory) a fixture directory? (scripts/make-fixtures makes one; for your own recordings, give the tokens with --expect HEX[,HEX...] or --expect-csv FILE)")
        }
        do { return try JSONDecoder().decode(FixtureManifest.self, from: data) }
        catch { throw ToolError("\(path) is not a valid manifest: \(Self.problem(error))") }
    }

    /// What is wrong with a manifest, said with the place in the document ("fixtures[2].expected"), not as
    /// the decoder's debug description.
    static func problem(_ error: any Error) -> String {
        func place(_ path: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            let keys = path + (last.map { [$0] } ?? [])
            guard !keys.isEmpty else { return "the document" }
            return keys.enumerated().map { index, key in
                key.intValue.map { "[\($0)]" } ?? (index == 0 ? key.stringValue : ".\(key.stringValue)")
            }.joined()
        }
        switch error {
        case DecodingError.keyNotFound(let key, let context): return "\(place(context.codingPath, key)) is missing"
        case DecodingError.valueNotFound(_, let context): return "\(place(context.codingPath)) is null"
        case DecodingError.typeMismatch(let type, let context): return "\(place(context.codingPath)) is not \(Self.kind(of: type))"
        case DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty: return "not JSON"
        case DecodingError.dataCorrupted(let context): return "\(place(context.codingPath)): \(context.debugDescription)"
        default: return "\(error)"
        }
    }

    private static func kind(of type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is any BinaryInteger.Type, is any BinaryFloatingPoint.Type: return "a number"
        case is Bool.Type: return "true or false"
        case is [Any].Type: return "an array"
        default: return "an object"
        }
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
