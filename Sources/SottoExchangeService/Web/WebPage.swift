import Foundation
import NIOCore
import NIOHTTP1

/// The files of the page `sotto serve --web` serves: the page itself (`index.html`, `app.js`, from
/// `bindings/web`) and the modem it loads (`index.js`, `core.js`, `worklet.js`, `sotto.wasm` from
/// `bindings/js`, under `/sotto/`). Only these paths are served (no directory listing, no other file), with
/// a Content-Security-Policy that allows scripts from the page's own origin only, and WebAssembly.
public struct WebPage: Sendable {
    /// The directory of `index.html` and `app.js`.
    public let directory: String
    /// The directory of the JavaScript package (`bindings/js`: index.js, core.js, worklet.js, sotto.wasm).
    public let modem: String

    /// - Parameters:
    ///   - directory: the page's directory.
    ///   - modem: the JavaScript package's directory.
    /// - Throws: `WebPageError` naming a file the page needs that is missing.
    public init(directory: String, modem: String) throws(WebPageError) {
        self.directory = directory
        self.modem = modem
        for (_, entry) in Self.routes {
            let path = (entry.inModem ? modem : directory) + "/" + entry.file
            guard FileManager.default.isReadableFile(atPath: path) else { throw WebPageError(path: path) }
        }
    }

    /// The page's directories installed with `sotto` (`PREFIX/share/sotto/web` and `.../js`, beside
    /// `PREFIX/bin/sotto`), else the source tree's (`bindings/web`, `bindings/js`) when run from a build.
    /// - Parameter executable: the path of the running `sotto`.
    public static func installed(executable: String) -> (page: String, modem: String)? {
        var url = URL(fileURLWithPath: executable).resolvingSymlinksInPath().deletingLastPathComponent()
        let share = url.deletingLastPathComponent().appendingPathComponent("share/sotto")
        if FileManager.default.fileExists(atPath: share.appendingPathComponent("web/index.html").path) {
            return (share.appendingPathComponent("web").path, share.appendingPathComponent("js").path)
        }
        // A build: .build/<triple>/debug/sotto; the package's root holds bindings/.
        for _ in 0..<5 {
            url = url.deletingLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("bindings/web/index.html").path) {
                return (url.appendingPathComponent("bindings/web").path, url.appendingPathComponent("bindings/js").path)
            }
        }
        return nil
    }

    /// URL path to file (in the page's directory or the modem's) and media type.
    static let routes: [String: (file: String, inModem: Bool, type: String)] = [
        "/": ("index.html", false, "text/html; charset=utf-8"),
        "/index.html": ("index.html", false, "text/html; charset=utf-8"),
        "/app.js": ("app.js", false, "text/javascript; charset=utf-8"),
        "/sotto/index.js": ("index.js", true, "text/javascript; charset=utf-8"),
        "/sotto/core.js": ("core.js", true, "text/javascript; charset=utf-8"),
        "/sotto/worklet.js": ("worklet.js", true, "text/javascript; charset=utf-8"),
        "/sotto/sotto.wasm": ("sotto.wasm", true, "application/wasm"),
    ]

    /// Answers the connection's request (GET or HEAD of a route; anything else 404, 405 or 400), then closes it.
    static func serve(_ http: NIOAsyncChannel<HTTPServerRequestPart, HTTPPart<HTTPResponseHead, ByteBuffer>>, page: WebPage?) async throws {
        try await http.executeThenClose { inbound, outbound in
            for try await part in inbound {
                guard case .head(let head) = part else { continue }
                let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
                var headers = HTTPHeaders()
                headers.add(name: "Connection", value: "close")
                headers.add(name: "X-Content-Type-Options", value: "nosniff")
                headers.add(name: "Cache-Control", value: "no-store")
                var status = HTTPResponseStatus.ok
                var body = ByteBuffer()
                if head.method != .GET && head.method != .HEAD {
                    status = .methodNotAllowed
                    body = ByteBuffer(string: "only GET\n")
                } else if path == WebListener.sessionPath {
                    status = .badRequest
                    body = ByteBuffer(string: "\(WebListener.sessionPath) is a WebSocket: open it with new WebSocket(...)\n")
                } else if let page, let route = routes[path],
                          let data = FileManager.default.contents(atPath: (route.inModem ? page.modem : page.directory) + "/" + route.file) {
                    headers.add(name: "Content-Type", value: route.type)
                    headers.add(name: "Content-Security-Policy",
                                value: "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'")
                    body = ByteBuffer(bytes: data)
                } else {
                    status = .notFound
                    body = ByteBuffer(string: page == nil ? "this service serves no page (sotto serve --web-page)\n" : "not found\n")
                }
                if headers["Content-Type"].isEmpty { headers.add(name: "Content-Type", value: "text/plain; charset=utf-8") }
                headers.add(name: "Content-Length", value: "\(body.readableBytes)")
                try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
                if head.method != .HEAD { try await outbound.write(.body(body)) }
                try await outbound.write(.end(nil))
                return
            }
        }
    }
}

/// A file the page needs is missing.
public struct WebPageError: Error, Sendable, CustomStringConvertible {
    /// The missing file.
    public let path: String
    public var description: String { "the web page's file \(path) is missing (scripts/build-wasm makes sotto.wasm)" }
}
