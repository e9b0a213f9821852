import Foundation

/// Where a matcher service listens or a client connects: `HOST:PORT` (IPv4, a name, or `[IPv6]:PORT`), or
/// a Unix-domain socket (`unix:PATH` or a path starting with `/`).
public enum MatcherAddress: Sendable, Hashable, CustomStringConvertible {
    case tcp(host: String, port: Int)
    case unix(path: String)

    /// Parses `HOST:PORT`, `[IPv6]:PORT`, `unix:PATH`, `/PATH`, and the URL forms `sotto://HOST:PORT`,
    /// `sottos://HOST:PORT` (the scheme is dropped here; TLS is the caller's choice).
    public init(parsing text: String) throws(MatcherAddressError) {
        var text = text
        var schemeFound = false
        for scheme in ["sotto://", "sottos://", "http://", "https://", "grpc://", "grpcs://"] where text.hasPrefix(scheme) {
            text.removeFirst(scheme.count)
            if text.hasSuffix("/") { text.removeLast() }
            schemeFound = true
        }
        // A misspelt scheme (`sotto//host:port`, `sotto:/host:port`, `ftp://host:port`) is refused here, at
        // once, instead of being taken for a host name that no resolver will ever find.
        if !schemeFound, !text.hasPrefix("/"), !text.hasPrefix("unix:"), let mark = text.firstIndex(where: { $0 == "/" }) {
            let scheme = text[..<mark].split(separator: ":").first.map(String.init) ?? ""
            throw MatcherAddressError(text: text, reason: text.contains("://")
                ? "unknown scheme '\(scheme)://': expected sotto://HOST:PORT, sottos://HOST:PORT (TLS), HOST:PORT or unix:PATH"
                : "a '/' in the host: expected sotto://HOST:PORT, sottos://HOST:PORT (TLS), HOST:PORT or unix:PATH")
        }
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { throw MatcherAddressError(text: text, reason: "an empty socket path") }
            self = .unix(path: path)
            return
        }
        if text.hasPrefix("/") {
            self = .unix(path: text)
            return
        }
        let host: String, portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw MatcherAddressError(text: text, reason: "expected [IPv6]:PORT")
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                throw MatcherAddressError(text: text, reason: "expected HOST:PORT")
            }
            host = String(text[..<colon])
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty else { throw MatcherAddressError(text: text, reason: "an empty host") }
        // A host name (letters, digits, '-', '.', '_'), an IPv4 address, or within brackets an IPv6 one
        // (with a zone after '%').
        let punctuation: Set<Character> = text.hasPrefix("[") ? [":", ".", "%"] : ["-", ".", "_"]
        guard host.allSatisfy({ ($0.isASCII && ($0.isLetter || $0.isNumber)) || punctuation.contains($0) }) else {
            throw MatcherAddressError(text: text, reason: "'\(host)' is not a host name or address")
        }
        guard portText.allSatisfy({ $0.isASCII && $0.isNumber }), let port = Int(portText), (0...65_535).contains(port) else {
            throw MatcherAddressError(text: text, reason: "the port must be 0 to 65535")
        }
        self = .tcp(host: host, port: port)
    }

    /// Loopback addresses and Unix sockets never leave the machine: plaintext is allowed there only.
    public var isLocal: Bool {
        switch self {
        case .unix: return true
        case .tcp(let host, _):
            return host == "localhost" || host == "::1" || host.hasPrefix("127.")
        }
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}

/// An address that could not be parsed.
public struct MatcherAddressError: Error, Sendable, CustomStringConvertible {
    public let text: String
    public let reason: String
    public var description: String { "'\(text)' is not an address: \(reason)" }
}
