import ArgumentParser
import Foundation
import SottoAudio
import SottoModem
import SottoSupport

/// Parses a token given as hex (optional `0x`, optional `:`/`-`/space separators) or as text.
enum TokenInput {
    /// Bytes from hex or text, checked as a modem token (1...16 bytes).
    static func parse(hex: String?, text: String?) throws -> [UInt8] {
        let bytes = try bytes(hex: hex, text: text)
        try check(bytes.count)
        return bytes
    }

    /// Bytes from hex or text, any length.
    static func bytes(hex: String?, text: String?) throws -> [UInt8] {
        switch (hex, text) {
        case (nil, nil): throw ValidationError("give a token as hex (e.g. 0x0123456789abcdef) or with --text")
        case (.some, .some): throw ValidationError("give the token either as hex or with --text, not both")
        case (nil, .some(let text)):
            // The command line is decoded as UTF-8 with invalid bytes replaced by U+FFFD: refuse rather than
            // send the replacement character.
            guard !text.unicodeScalars.contains("\u{FFFD}") else {
                throw ValidationError("--text is not valid UTF-8 (or contains U+FFFD): give the bytes as hex instead")
            }
            return Array(text.utf8)
        case (.some(let hex), nil):
            var digits = hex.lowercased()
            if digits.hasPrefix("0x") { digits.removeFirst(2) }
            digits.removeAll { ":- _".contains($0) }
            // ASCII only: Character.isHexDigit also accepts full-width digits, which UInt8(_:radix:) rejects.
            guard !digits.isEmpty, digits.count % 2 == 0, digits.allSatisfy({ $0.isASCII && $0.isHexDigit }) else {
                throw ValidationError("'\(hex)' is not a hex token: expected an even number of hex digits, e.g. 0x0123456789abcdef")
            }
            var bytes: [UInt8] = []
            var index = digits.startIndex
            while index < digits.endIndex {
                let next = digits.index(index, offsetBy: 2)
                guard let byte = UInt8(digits[index..<next], radix: 16) else {
                    throw ValidationError("'\(hex)' is not a hex token: expected an even number of hex digits, e.g. 0x0123456789abcdef")
                }
                bytes.append(byte)
                index = next
            }
            return bytes
        }
    }

    static func check(_ count: Int) throws {
        guard FrameFormat.payloadBytes.contains(count) else {
            throw ValidationError("a token must be \(FrameFormat.payloadBytes.lowerBound) to \(FrameFormat.payloadBytes.upperBound) bytes, got \(count)")
        }
    }
}

/// The one check of numeric options, used by every command: the value must be finite and within its
/// range, and the message names the option, its range and unit.
struct NumericOption {
    /// The option as typed, e.g. "--duration".
    let name: String
    let lower: Double
    let upper: Double
    /// True when the lower bound itself is refused, as for durations that must be positive.
    let lowerExclusive: Bool
    /// Unit for messages, e.g. "s" or "Hz"; empty for none.
    let unit: String

    /// Values in `range`.
    init(_ name: String, _ range: ClosedRange<Double>, unit: String = "") {
        self.name = name; lower = range.lowerBound; upper = range.upperBound; lowerExclusive = false; self.unit = unit
    }

    /// Values above `lower` up to `upper`.
    init(_ name: String, above lower: Double, upTo upper: Double, unit: String = "") {
        self.name = name; self.lower = lower; self.upper = upper; lowerExclusive = true; self.unit = unit
    }

    func contains(_ value: Double) -> Bool {
        value.isFinite && (lowerExclusive ? value > lower : value >= lower) && value <= upper
    }

    /// Throws a message naming the option when `value` is not finite or out of range; nil (not given) passes.
    func check(_ value: Double?) throws {
        guard let value, !contains(value) else { return }
        let unitSuffix = unit.isEmpty ? "" : " \(unit)"
        let range = lowerExclusive ? "in (\(Self.format(lower)), \(Self.format(upper))]" : "\(Self.format(lower)) to \(Self.format(upper))"
        throw ValidationError("\(name) must be a finite number \(range)\(unitSuffix), got \(value)")
    }

    /// The same for integer options.
    func check(_ value: Int?) throws { try check(value.map(Double.init)) }

    /// Directivity factor Q of a source (1 = omnidirectional), for simulate and bench.
    static let directivity = NumericOption("--directivity", 1...100)
    /// Time to live of a publication or subscription (s).
    static let ttl = NumericOption("--ttl", 1...86_400, unit: "s")

    private static func format(_ x: Double) -> String {
        x == x.rounded() && abs(x) < 1e15 ? String(Int64(x)) : "\(x)"
    }
}

extension Profile: ExpressibleByArgument {
    public init?(argument: String) {
        guard let profile = Profile.named(argument) else { return nil }
        self = profile
    }
    public static var allValueStrings: [String] { Profile.all.map(\.name) }
    public var defaultValueDescription: String { name }
}

/// `--profile a,b|all` for receivers.
struct ProfileSelection: ExpressibleByArgument {
    let profiles: [Profile]
    init?(argument: String) {
        if argument.lowercased() == "all" { profiles = Profile.all; return }
        var chosen: [Profile] = []
        for name in argument.split(separator: ",", omittingEmptySubsequences: false) {
            guard let profile = Profile.named(name.trimmingCharacters(in: .whitespaces)) else { return nil }
            if !chosen.contains(where: { $0.name == profile.name }) { chosen.append(profile) }
        }
        guard !chosen.isEmpty else { return nil }
        profiles = chosen
    }
    init(_ profiles: [Profile]) { self.profiles = profiles }
    static var allValueStrings: [String] { Profile.all.map(\.name) + ["all"] }
    var defaultValueDescription: String { profiles.count == Profile.all.count ? "all" : profiles.map(\.name).joined(separator: ",") }
}

extension [UInt8] {
    /// Lowercase hex without prefix.
    var hex: String {
        Hex.encode(self)
    }
}

/// An old spelling of an option, kept for a release (see CHANGELOG.md): noted on stderr when used.
enum Deprecated {
    /// Says that `old` is deprecated in `command` for `new`, and why.
    static func note(_ old: String, use new: String, in command: String, because reason: String) {
        printError("warning: sotto \(command) \(old) is deprecated: use \(new) (\(reason)); the old spelling goes in a later release")
    }
}

/// Writes to standard error.
func printError(_ message: String) {
    var stream = StandardError()
    print(message, to: &stream)
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) { Self.write(string) }

    /// Writes to stderr; when that fails there is nowhere left to say so: the program ends with status 2
    /// (a run-time failure), instead of going on with its messages lost.
    static func write(_ string: String) {
        if StandardStream.write(string, to: STDERR_FILENO) != 0 { exit(ExitStatus.failure.rawValue) }
    }
}

/// True when standard error is a terminal (progress is shown only then).
var standardErrorIsTerminal: Bool { isatty(2) != 0 }

/// A failure to report on stderr with a non-zero exit (printed as "error: " + description).
struct CommandError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `--channel N|mix` for multi-channel inputs.
struct ChannelArgument: ExpressibleByArgument {
    let selection: ChannelSelection
    init?(argument: String) {
        if argument.lowercased() == "mix" { selection = .mix; return }
        guard let n = Int(argument), n >= 0 else { return nil }
        selection = .channel(n)
    }
    init(_ selection: ChannelSelection) { self.selection = selection }
    var defaultValueDescription: String { "mix" }
}
