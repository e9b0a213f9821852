import Foundation
import Testing

/// One name for each field of a decoded frame, whichever interface it comes through (issue 33): the command
/// line's JSON Lines (`decode --format json`), the C library's `sotto_frame` (sotto.h), Python's
/// `sotto.Frame` (bindings/python) and the JavaScript package's `Frame` (bindings/js/index.d.ts; what core.js sets
/// is checked against the native decoder's JSON by the Node tests). Read from the real output and the real sources, so that a field added or
/// renamed in one of them without the others fails here.
struct FieldNameTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The fields of `typedef struct sotto_frame { ... }` in sotto.h, in order.
    static func cFields() throws -> [String] {
        let header = try String(contentsOf: repository.appendingPathComponent("Sources/CSotto/include/sotto.h"), encoding: .utf8)
        let start = try #require(header.range(of: "typedef struct sotto_frame {"))
        let end = try #require(header.range(of: "} sotto_frame;", range: start.upperBound..<header.endIndex))
        return header[start.upperBound..<end.lowerBound].split(separator: "\n").compactMap { line in
            // "    double snr_db;   /**< ... */", "    uint8_t token[SOTTO_TOKEN_MAX_BYTES];  /**< ... */"
            guard let declaration = line.split(separator: ";").first, line.contains(";") else { return nil }
            let name = declaration.split(separator: " ").last.map { $0.split(separator: "[").first ?? $0 }
            return name.map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: "*")) }
        }
    }

    /// The fields of Python's `@dataclass class Frame`, in order.
    static func pythonFields() throws -> [String] {
        let source = try String(contentsOf: repository.appendingPathComponent("bindings/python/sotto/__init__.py"), encoding: .utf8)
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false)
        let first = try #require(lines.firstIndex { $0.hasPrefix("class Frame") })
        var fields: [String] = []
        for line in lines[(first + 1)...] {
            if !line.isEmpty && !line.hasPrefix(" ") { break }  // the next top-level statement
            guard line.hasPrefix("    "), !line.hasPrefix("     "), let colon = line.firstIndex(of: ":") else { continue }
            let name = line[line.index(line.startIndex, offsetBy: 4)..<colon]
            if name.allSatisfy({ $0.isLowercase || $0 == "_" || $0.isNumber }) { fields.append(String(name)) }
        }
        return fields
    }

    /// The fields of the JavaScript package's `interface Frame` (bindings/js/index.d.ts) not marked deprecated, in order.
    static func javaScriptFields() throws -> [String] {
        let source = try String(contentsOf: repository.appendingPathComponent("bindings/js/index.d.ts"), encoding: .utf8)
        let start = try #require(source.range(of: "export interface Frame {"))
        let end = try #require(source.range(of: "\n}", range: start.upperBound..<source.endIndex))
        var fields: [String] = [], deprecated = false
        for line in source[start.upperBound..<end.lowerBound].split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("/**") { deprecated = trimmed.contains("@deprecated"); continue }
            guard let colon = trimmed.firstIndex(of: ":"), trimmed.hasSuffix(";") else { continue }
            if !deprecated { fields.append(String(trimmed[..<colon])) }
            deprecated = false
        }
        return fields
    }

    @Test func jsonCPythonAndJavaScriptNameAFrameAlike() throws {
        let c = try Self.cFields()
        let python = try Self.pythonFields()
        let javaScript = try Self.javaScriptFields()
        #expect(javaScript == python, "JavaScript: \(javaScript), Python: \(python)")
        #expect(c.count == 10 && python.count == 8, "C: \(c), Python: \(python)")
        // C's struct adds its size and the token's length (Python's bytes and JSON's hex carry the length).
        #expect(c.filter { $0 != "struct_size" && $0 != "token_length" } == python, "C: \(c), Python: \(python)")

        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "--text", "names", "--out", wav]).status == 0)
        let decoded = try Sotto.run(["decode", "--format", "json", wav])
        let line = try #require(decoded.stdout.split(separator: "\n").first, "\(decoded.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["schema"] as? Int == 2, "\(line)")
        // Every Python (and so C) field is in the JSON under the same name, with a value of the same kind.
        for field in python {
            #expect(object[field] != nil, "\(field) missing from \(line)")
        }
        #expect(object["token"] as? String == "6e616d6573" && object["profile"] as? String == "default", "\(line)")
        let start = try #require(object["start_time_s"] as? Double), end = try #require(object["end_time_s"] as? Double)
        #expect(start > 0.05 && start < 0.15 && end > start, "\(line)")
        #expect(object["corrected_bits"] as? Int != nil && object["level_dbfs"] as? Double != nil, "\(line)")
        // Schema 1's names, kept for release 1.1 with the same values.
        #expect(object["start"] as? Double == start && object["end"] as? Double == end, "\(line)")
        #expect(object["snr"] as? Double == object["snr_db"] as? Double && object["level"] as? Double == object["level_dbfs"] as? Double)
        #expect(object["clockOffsetPPM"] as? Double == object["clock_offset_ppm"] as? Double, "\(line)")
        #expect(object["correctedBits"] as? Int == object["corrected_bits"] as? Int, "\(line)")
        // Nothing else: the JSON-only fields are the input's name and the token as text.
        let python1 = Set(["start", "end", "snr", "level", "clockOffsetPPM", "correctedBits"])
        let known = Set(python).union(python1).union(["schema", "record", "file", "text"])
        #expect(Set(object.keys).subtracting(known).isEmpty, "\(Set(object.keys).subtracting(known)) in \(line)")
    }
}
