import CoreMetrics
import Foundation
import GRPCCore

/// Web origins (RFC 6454: `scheme://host[:port]`) as keys are bound to them and as browsers send them in the
/// `Origin` header of a WebSocket handshake. Stored and compared normalised: scheme and host in lower case,
/// no default port (443 for https, 80 for http), no path, query or user.
public enum WebOrigin {
    /// The normal form of an origin given to `sotto admin key create --origin`.
    /// - Parameter text: an origin such as `https://museum.example` or `http://127.0.0.1:8080`.
    /// - Throws: `StoreError.invalid` saying what an origin is, for anything else.
    public static func normalize(_ text: String) throws(StoreError) -> String {
        let invalid = StoreError.invalid("'\(text.prefix(200))' is not a web origin: give scheme://host[:port] (http or https, no path), e.g. https://museum.example")
        guard text.utf8.count <= 300, !text.contains(where: { $0.isWhitespace }), !StoreText.hasControlCharacters(text),
              let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              scheme == "https" || scheme == "http", let host = components.encodedHost?.lowercased(),
              isOriginHost(host),
              components.user == nil, components.password == nil, components.query == nil, components.fragment == nil,
              components.path.isEmpty || components.path == "/"
        else { throw invalid }
        let defaultPort = scheme == "https" ? 443 : 80
        if let port = components.port {
            guard (1...65_535).contains(port) else { throw invalid }
            if port != defaultPort { return "\(scheme)://\(host):\(port)" }
        }
        return "\(scheme)://\(host)"
    }

    /// True for a host as browsers put it in an `Origin` header: a name of ASCII letters, digits, dots and hyphens
    /// (international names arrive in punycode) or a bracketed IPv6 literal. Percent escapes are refused: decoded,
    /// `a%20b` would become a host with a space (which the stored column cannot hold) and `a%2Eb` another name.
    private static func isOriginHost(_ host: String) -> Bool {
        let bytes = Array(host.utf8)
        guard !bytes.isEmpty else { return false }
        func isNameByte(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        if bytes.first == UInt8(ascii: "[") {
            guard bytes.last == UInt8(ascii: "]"), bytes.count > 2 else { return false }
            return bytes.dropFirst().dropLast().allSatisfy { byte in
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
                    || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".")
            }
        }
        return bytes.allSatisfy(isNameByte)
    }

    /// Every origin of a key, normalised, without repeats, in the order given.
    /// - Parameter origins: the origins given.
    /// - Throws: `StoreError.invalid` for an origin that is not one, or more than 20.
    public static func normalize(_ origins: [String]) throws(StoreError) -> [String] {
        guard origins.count <= 20 else { throw .invalid("a key is bound to at most 20 origins, got \(origins.count)") }
        var out: [String] = []
        for origin in origins {
            let normal = try normalize(origin)
            if !out.contains(normal) { out.append(normal) }
        }
        return out
    }

    /// The origins as one column (separated by spaces; no origin holds one).
    static func stored(_ origins: [String]) -> String { origins.joined(separator: " ") }
    /// The origins of a stored column.
    static func parseStored(_ text: String) -> [String] { text.split(separator: " ").map(String.init) }

    /// True when a handshake's `Origin` header names one of `allowed` (compared in normal form).
    /// - Parameters:
    ///   - header: the header's value, if the handshake had one.
    ///   - allowed: the key's origins, normalised.
    public static func allows(_ header: String?, _ allowed: [String]) -> Bool {
        guard let header, let origin = try? normalize(header) else { return false }
        return allowed.contains(origin)
    }
}

/// Which transport carries a session: it names the session in the metrics and decides what a key must allow.
enum SessionTransport: Sendable {
    /// A gRPC stream (native clients): any key of the project.
    case grpc
    /// A WebSocket (pages): only a key bound to the page's origin (the handshake's `Origin` header, if any).
    case web(origin: String?)

    /// The value of the `transport` label of the metrics.
    var label: String {
        switch self {
        case .grpc: return "grpc"
        case .web: return "web"
        }
    }

    /// Refuses a key this transport may not use: on the web, a key bound to no origin (a native client's key
    /// would otherwise be usable from any page that learnt it) or to origins other than the page's.
    /// - Parameters:
    ///   - key: the key the Hello gave, authenticated.
    ///   - metrics: where refusals are counted.
    /// - Throws: `RPCError` (permission denied, `sotto-error: origin`) saying why.
    func admit(_ key: AuthenticatedKey, metrics: ServiceMetrics) throws(RPCError) {
        guard case .web(let origin) = self else { return }
        let message: String
        if key.origins.isEmpty {
            message = "this API key is not bound to any web origin, so no page may use it: create a key for pages with sotto admin key create --origin https://your.site"
        } else if WebOrigin.allows(origin, key.origins) {
            return
        } else if let origin {
            message = "this API key may not be used from the origin \(origin.prefix(200)) (it is bound to \(key.origins.joined(separator: ", ")))"
        } else {
            message = "this API key is bound to web origins and the connection sent no Origin header"
        }
        metrics.transport.originRefused.increment()
        metrics.rejected.increment()
        var metadata = Metadata()
        metadata.addString("origin", forKey: "sotto-error")
        throw RPCError(code: .permissionDenied, message: message, metadata: metadata)
    }
}
