import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A first contact with a service's address before its real client connects, so that a failure is
/// reported at once with its cause (no such host, refused, nothing listening, TLS against plaintext or the
/// reverse, no answer) instead of a client's retries ending in a time-out without one.
///
/// The probe resolves the host, connects (TCP or a Unix socket) and, for a matcher service, sends the first
/// bytes its client would send: the HTTP/2 preface with an empty SETTINGS frame in plaintext, a TLS
/// ClientHello with TLS. It reads the first bytes of the answer and closes. Blocking calls run on a
/// dedicated thread, never on the cooperative pool.
public enum EndpointProbe {
    /// What was found at an address.
    public enum Outcome: Sendable, Equatable, CustomStringConvertible {
        /// The address answered as expected (or, with no protocol check, accepted the connection).
        case reachable
        /// The host name could not be resolved (DNS); `reason` is the resolver's.
        case unresolved(host: String, reason: String)
        /// The host refused the connection: nothing listens on that port (or socket).
        case refused(address: String)
        /// No Unix socket at the path.
        case noSocket(path: String)
        /// No answer to the connection within `seconds` (s): the host is down or a firewall drops packets.
        case timedOut(address: String, seconds: Double)
        /// Connected, but no byte came back within `seconds` (s).
        case silent(address: String, seconds: Double)
        /// A TLS server where plaintext was meant.
        case speaksTLS(address: String)
        /// A plaintext server where TLS was meant.
        case speaksPlaintext(address: String)
        /// The server closed the connection without a word when greeted (`tls`: the greeting was TLS).
        case closed(address: String, tls: Bool)
        /// Something else answered (`what` says what).
        case notTheService(address: String, what: String)
        /// Any other failure of the connection (`reason`: the system's words).
        case failed(address: String, reason: String)

        /// True for ``reachable``.
        public var isReachable: Bool { self == .reachable }

        public var description: String {
            switch self {
            case .reachable: return "reachable"
            case .unresolved(let host, let reason): return "cannot resolve host '\(host)' (DNS): \(reason)"
            case .refused(let address): return "\(address) refused the connection: nothing listens there"
            case .noSocket(let path): return "no socket at \(path): is the service running?"
            case .timedOut(let address, let seconds):
                return "no answer from \(address) within \(Self.seconds(seconds)) s (timed out: the host is down, or a firewall drops the packets)"
            case .silent(let address, let seconds):
                return "\(address) accepted the connection but said nothing within \(Self.seconds(seconds)) s: not a sotto service?"
            case .speaksTLS(let address):
                return "\(address) speaks TLS: connect with sottos://\(address) (or --tls, --ca)"
            case .speaksPlaintext(let address):
                return "\(address) answered in plaintext, not TLS: connect with sotto://\(address), without --tls or --ca"
            case .closed(let address, let tls):
                return tls ? "\(address) closed the connection on the TLS handshake: a plaintext service? (try sotto://\(address))"
                           : "\(address) closed the connection at once: a TLS service? (try sottos://\(address))"
            case .notTheService(let address, let what): return "\(address) is not a sotto service: it answered \(what)"
            case .failed(let address, let reason): return "cannot connect to \(address): \(reason)"
            }
        }

        private static func seconds(_ value: Double) -> String {
            value == value.rounded() ? String(Int(value)) : String(format: "%.1f", value)
        }
    }

    /// What to check beyond the connection.
    public enum Greeting: Sendable {
        /// Only connect (a database, any TCP service).
        case none
        /// A gRPC service over HTTP/2: plaintext (`tls` false) or TLS.
        case grpc(tls: Bool)
    }

    /// Probes `address` on a dedicated thread.
    /// - Parameters:
    ///   - address: Where the service listens.
    ///   - greeting: What to check after connecting.
    ///   - connectTimeout: Longest wait for the connection (s).
    ///   - answerTimeout: Longest wait for the first bytes of an answer (s).
    /// - Returns: What was found.
    public static func probe(_ address: MatcherAddress, greeting: Greeting, connectTimeout: Double = 10,
                             answerTimeout: Double = 5) async -> Outcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
            let thread = Thread {
                continuation.resume(returning: probeNow(address, greeting: greeting, connectTimeout: connectTimeout, answerTimeout: answerTimeout))
            }
            thread.name = "sotto-probe"
            thread.start()
        }
    }

    /// The probe on the calling thread (it blocks for up to `connectTimeout` + `answerTimeout` s).
    /// - Parameters:
    ///   - address: Where the service listens.
    ///   - greeting: What to check after connecting.
    ///   - connectTimeout: Longest wait for the connection (s).
    ///   - answerTimeout: Longest wait for the first bytes of an answer (s).
    /// - Returns: What was found.
    public static func probeNow(_ address: MatcherAddress, greeting: Greeting, connectTimeout: Double = 10,
                                answerTimeout: Double = 5) -> Outcome {
        let socket: Int32
        switch connect(address, timeout: connectTimeout) {
        case .connected(let connected): socket = connected
        case .failed(let outcome): return outcome
        }
        defer { close(socket) }
        guard case .grpc(let tls) = greeting else { return .reachable }
        let name = address.description
        let hello = tls ? clientHello : http2Preface
        let sent = hello.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if sent < 0 {
            if errno == ECONNRESET || errno == EPIPE { return .closed(address: name, tls: tls) }
            return .failed(address: name, reason: String(cString: strerror(errno)))
        }
        var answer: [UInt8] = []
        let deadline = now() + answerTimeout
        var buffer = [UInt8](repeating: 0, count: 64)
        while answer.count < 9 {
            let left = deadline - now()
            guard left > 0 else { break }
            var poller = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(left * 1_000, 1_000).rounded(.up)))
            if ready < 0 && errno != EINTR { return .failed(address: name, reason: String(cString: strerror(errno))) }
            if ready <= 0 { continue }
            let n = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == ECONNRESET { break }
                return .failed(address: name, reason: String(cString: strerror(errno)))
            }
            if n == 0 { break }
            answer += buffer[0..<n]
        }
        if answer.isEmpty {
            return now() >= deadline ? .silent(address: name, seconds: answerTimeout) : .closed(address: name, tls: tls)
        }
        switch classify(answer) {
        case .tls: return tls ? .reachable : .speaksTLS(address: name)
        case .http2: return tls ? .speaksPlaintext(address: name) : .reachable
        case .other(let what): return .notTheService(address: name, what: what)
        }
    }

    /// What the first bytes of an answer are.
    enum Answer: Equatable {
        case tls, http2
        case other(String)
    }

    /// Classifies the first bytes a server sent: a TLS record (handshake or alert), an HTTP/2 frame
    /// (SETTINGS or GOAWAY), or something else.
    static func classify(_ bytes: [UInt8]) -> Answer {
        if bytes.count >= 2, bytes[0] == 0x16 || bytes[0] == 0x15, bytes[1] == 0x03 { return .tls }
        if bytes.starts(with: Array("HTTP/".utf8)) { return .other("as an HTTP/1 server (gRPC needs HTTP/2)") }
        if bytes.count >= 9, bytes[3] == 0x04 || bytes[3] == 0x07, bytes[0] == 0 { return .http2 }
        if bytes.starts(with: Array("SSH-".utf8)) { return .other("as an SSH server") }
        return .other("\(bytes.count) bytes that are neither HTTP/2 nor TLS")
    }

    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// A connected socket, or why there is none.
    private enum Connection {
        case connected(Int32)
        case failed(Outcome)
    }

    private static func connect(_ address: MatcherAddress, timeout: Double) -> Connection {
        switch address {
        case .unix(let path):
            let socket = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard socket >= 0 else { return .failed(.failed(address: address.description, reason: String(cString: strerror(errno)))) }
            var unixAddress = sockaddr_un()
            unixAddress.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            let capacity = MemoryLayout.size(ofValue: unixAddress.sun_path)
            guard bytes.count < capacity else {
                close(socket)
                return .failed(.failed(address: address.description, reason: "the path is longer than \(capacity - 1) bytes"))
            }
            withUnsafeMutableBytes(of: &unixAddress.sun_path) { $0.copyBytes(from: bytes) }
            let result = withUnsafePointer(to: &unixAddress) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            if result == 0 { return .connected(socket) }
            let code = errno
            close(socket)
            switch code {
            case ENOENT: return .failed(.noSocket(path: path))
            case ECONNREFUSED: return .failed(.refused(address: address.description))
            default: return .failed(.failed(address: address.description, reason: String(cString: strerror(code))))
            }
        case .tcp(let host, let port):
            var hints = addrinfo()
            hints.ai_family = AF_UNSPEC
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            let status = getaddrinfo(host, String(port), &hints, &list)
            guard status == 0, let list else {
                let reason = status == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(status))
                return .failed(.unresolved(host: host, reason: reason))
            }
            defer { freeaddrinfo(list) }
            let deadline = now() + timeout
            var outcome: Outcome = .failed(address: address.description, reason: "no address to connect to")
            var entry: UnsafeMutablePointer<addrinfo>? = list
            while let current = entry {
                entry = current.pointee.ai_next
                let socket = Glibc.socket(current.pointee.ai_family,
                                          Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                guard socket >= 0 else { continue }
                var code: Int32 = 0
                if Glibc.connect(socket, current.pointee.ai_addr, current.pointee.ai_addrlen) != 0 {
                    code = errno
                    if code == EINPROGRESS {
                        code = ETIMEDOUT
                        while now() < deadline {
                            var poller = pollfd(fd: socket, events: Int16(POLLOUT), revents: 0)
                            let ready = poll(&poller, 1, Int32(min((deadline - now()) * 1_000, 1_000).rounded(.up)))
                            if ready < 0 && errno == EINTR { continue }
                            if ready > 0 {
                                var error: Int32 = 0
                                var length = socklen_t(MemoryLayout<Int32>.size)
                                getsockopt(socket, SOL_SOCKET, SO_ERROR, &error, &length)
                                code = error
                                break
                            }
                        }
                    }
                }
                if code == 0 { return .connected(socket) }
                close(socket)
                switch code {
                case ECONNREFUSED: outcome = .refused(address: address.description)
                case ETIMEDOUT: outcome = .timedOut(address: address.description, seconds: timeout)
                default: outcome = .failed(address: address.description, reason: String(cString: strerror(code)))
                }
                if now() >= deadline { break }
            }
            return .failed(outcome)
        }
    }

    /// The HTTP/2 client preface and an empty SETTINGS frame: what a plaintext gRPC client sends first.
    static let http2Preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 0x04, 0, 0, 0, 0, 0]

    /// A TLS 1.2/1.3 ClientHello (no server name; ECDHE with AES-GCM or ChaCha20; a TLS 1.3 server answers
    /// it with a HelloRetryRequest for a key share, which is still a TLS record). Its random is fixed: it
    /// starts no session.
    static let clientHello: [UInt8] = {
        let suites: [UInt8] = [0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0, 0x2b, 0xc0, 0x2f, 0xc0, 0x2c, 0xc0, 0x30, 0xcc, 0xa8, 0xcc, 0xa9]
        var extensions: [UInt8] = []
        func add(_ type: UInt16, _ body: [UInt8]) {
            extensions += [UInt8(type >> 8), UInt8(type & 0xff), UInt8(body.count >> 8), UInt8(body.count & 0xff)] + body
        }
        add(0x002b, [4, 0x03, 0x04, 0x03, 0x03])                              // supported_versions: 1.3, 1.2
        add(0x000a, [0, 6, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18])               // supported_groups: x25519, P-256, P-384
        add(0x000d, [0, 12, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x03, 0x08, 0x05, 0x05, 0x01])  // signature_algorithms
        add(0x000b, [1, 0])                                                   // ec_point_formats: uncompressed
        add(0x0010, [0, 3, 2] + Array("h2".utf8))                             // ALPN: one protocol, h2
        var body: [UInt8] = [0x03, 0x03] + [UInt8](repeating: 0x5a, count: 32) + [0]
        body += [UInt8(suites.count >> 8), UInt8(suites.count & 0xff)] + suites + [1, 0]
        body += [UInt8(extensions.count >> 8), UInt8(extensions.count & 0xff)] + extensions
        let handshake: [UInt8] = [0x01, 0, UInt8(body.count >> 8), UInt8(body.count & 0xff)] + body
        return [0x16, 0x03, 0x01, UInt8(handshake.count >> 8), UInt8(handshake.count & 0xff)] + handshake
    }()
}
