import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Unix-socket plumbing shared by the daemon's server and its clients: addresses, whole writes without
/// SIGPIPE, reads with a time-out.
enum UnixSocket {
    /// A `sockaddr_un` for `path`, or nil when the path is too long for one.
    static func address(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// Writes all of `data` (false when the peer is gone).
    static func writeAll(_ fd: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { buffer -> Bool in
            var sent = 0
            while sent < buffer.count {
                let n = send(fd, buffer.baseAddress! + sent, buffer.count - sent, Int32(MSG_NOSIGNAL))
                if n < 0 { if errno == EINTR { continue }; return false }
                sent += n
            }
            return true
        }
    }

    /// Sets a receive time-out (s) on `fd`.
    static func setReceiveTimeout(_ fd: Int32, seconds: Double) {
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sets a send time-out (s) on `fd`: a client that stops reading cannot hold a writer for longer.
    static func setSendTimeout(_ fd: Int32, seconds: Double) {
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Whether something listens on the Unix socket at `path` (a connection is accepted; a stale socket file
    /// refuses it). /proc/net/unix and sock_diag, which would tell without connecting, do not list Unix
    /// sockets on every kernel.
    static func isListening(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0, var address = address(path) else { if fd >= 0 { close(fd) }; return false }
        defer { close(fd) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        return result == 0 || errno == EAGAIN || errno == EINPROGRESS
    }

    /// The uid of the process at the other end of a connected Unix socket.
    static func peerUID(_ fd: Int32) -> uid_t? {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (glibc declares it only with _GNU_SOURCE).
        var credentials: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0, length == 12 else { return nil }
        return credentials.1
    }
}

/// A connection to the daemon's control socket, for `sotto` commands: one request, its reply, and for a
/// watch the replies that follow. Blocking; each read waits at most the given time-out.
public final class ControlClient: @unchecked Sendable {
    private let fd: Int32
    private var decoder = ControlFrameDecoder()

    /// Connects to the socket at `path`.
    /// - Parameter path: the daemon's control socket.
    /// - Throws: ``DaemonError`` when no daemon listens there (with how to start one).
    public init(path: URL) throws(DaemonError) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DaemonError("cannot create a socket: \(String(cString: strerror(errno)))") }
        guard var address = UnixSocket.address(path.path) else { close(fd); throw DaemonError("socket path too long: \(path.path)") }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw DaemonError("no sotto daemon at \(path.path) (\(reason)): start one with 'sotto daemon' or 'systemctl --user start sotto'")
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Sends `request`.
    /// - Parameter request: what to ask.
    /// - Throws: ``DaemonError`` when the daemon went away.
    public func send(_ request: ControlRequest) throws(DaemonError) {
        guard UnixSocket.writeAll(fd, ControlProtocol.frame(request.payload)) else { throw DaemonError("the daemon closed the connection") }
    }

    /// Sends raw bytes (tests of malformed frames).
    /// - Parameter bytes: anything.
    /// - Returns: whether they were written.
    @discardableResult
    public func sendRaw(_ bytes: Data) -> Bool { UnixSocket.writeAll(fd, bytes) }

    /// The next reply, waiting at most `timeout` seconds (nil: forever).
    /// - Parameter timeout: the longest wait (s).
    /// - Throws: ``DaemonError`` when the daemon closed the connection, sent garbage or said nothing in time.
    public func receive(timeout: Double? = 10) throws(DaemonError) -> ControlReply {
        let deadline = timeout.map { Date(timeIntervalSinceNow: $0) }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            do {
                if let payload = try decoder.next() {
                    do { return try ControlReply.decode(payload) } catch { throw DaemonError(error.description) }
                }
            } catch let error as ControlError { throw DaemonError("bad frame from the daemon: \(error)") } catch let error as DaemonError { throw error } catch {
                throw DaemonError("\(error)")
            }
            if let deadline {
                let left = deadline.timeIntervalSinceNow
                guard left > 0 else { throw DaemonError("the daemon did not answer in \(Int(timeout ?? 0)) s") }
                UnixSocket.setReceiveTimeout(fd, seconds: max(0.01, left))
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { throw DaemonError("the daemon closed the connection") }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { continue }
                throw DaemonError("reading from the daemon: \(String(cString: strerror(errno)))")
            }
            decoder.append(buffer[0..<n])
        }
    }

    /// Sends `request` and returns its reply, throwing the daemon's error reply as a ``DaemonError``.
    /// - Parameters:
    ///   - request: what to ask.
    ///   - timeout: the longest wait for the reply (s).
    public func call(_ request: ControlRequest, timeout: Double = 30) throws(DaemonError) -> ControlReply {
        do { try send(request) } catch {
            // Refused at once (another uid, too many clients): the refusal may already be waiting to be read.
            if let refusal = try? receive(timeout: 1), refusal.reply == "error" { throw DaemonError(refusal.error ?? "the daemon refused") }
            throw error
        }
        let reply = try receive(timeout: timeout)
        if reply.reply == "error" { throw DaemonError(reply.error ?? "the daemon refused") }
        return reply
    }
}
