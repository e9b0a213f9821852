import Foundation
import SottoTools
import Testing

/// One version number for the command line, the C library and its header, the Python and JavaScript packages, from one
/// place: the file VERSION (scripts/set-version writes it into the others).
struct VersionTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: repository.appendingPathComponent(path), encoding: .utf8)
    }

    /// The first capture of `pattern` in `text`.
    static func first(_ pattern: String, in text: String) -> String? {
        guard let regex = try? NSRegularExpression(pattern: pattern, options: [.anchorsMatchLines]),
              let match = regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)),
              let range = Range(match.range(at: 1), in: text) else { return nil }
        return String(text[range])
    }

    @Test func everyPlaceSaysTheVersionOfTheVersionFile() throws {
        let version = try Self.text("VERSION").trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(version.split(separator: ".").count == 3 && version.split(separator: ".").allSatisfy { Int($0) != nil }, "\(version)")
        let header = try Self.text("Sources/CSotto/include/sotto.h")
        #expect(Self.first(#"^#define SOTTO_VERSION "([^"]*)"$"#, in: header) == version, "sotto.h: run scripts/set-version")
        #expect(Self.first(#"^#define SOTTO_ABI_VERSION ([0-9]+)$"#, in: header) == version.split(separator: ".").first.map(String.init),
                "the major version is the C ABI's (the soname)")
        #expect(Self.first(#"^version = "([^"]*)"$"#, in: try Self.text("bindings/python/pyproject.toml")) == version, "pyproject.toml: run scripts/set-version")
        #expect(Self.first(#"^  "version": "([^"]*)",$"#, in: try Self.text("bindings/js/package.json")) == version, "package.json: run scripts/set-version")
        #expect(SottoVersion.current == version, "Version.swift: run scripts/set-version")
        let printed = try Sotto.run(["--version"])
        #expect(printed.status == 0 && printed.stdout == version + "\n")
    }
}
