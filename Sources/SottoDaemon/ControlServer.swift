import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One client of the control socket: replies go out through ``send(_:)`` from any thread.
public final class ControlConnection: Sendable {
    private let fd: Int32
    /// Whether the client is gone (`closed`), whether the descriptor is closed, and what runs when it is.
    private struct State {
        var closed = false
        var fdClosed = false
        var closeHandlers: [@Sendable () -> Void] = []
    }
    private let state = Mutex(State())
    /// The client's uid (checked to be the daemon's).
    public let peerUID: UInt32

    init(fd: Int32, peerUID: UInt32) {
        self.fd = fd
        self.peerUID = peerUID
    }

    /// Sends `reply` as one frame; false once the client is gone.
    /// - Parameter reply: the reply or event to send.
    @discardableResult
    public func send(_ reply: ControlReply) -> Bool {
        state.withLock { state in
            guard !state.closed else { return false }
            if !UnixSocket.writeAll(fd, ControlProtocol.frame(reply)) {
                state.closed = true
                _ = shutdown(fd, Int32(SHUT_RDWR))
                return false
            }
            return true
        }
    }

    /// Whether the client is gone.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Runs `handler` once when the connection ends (at once if it already has).
    /// - Parameter handler: called from the connection's thread.
    public func onClose(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.closed && state.fdClosed { return true }
            state.closeHandlers.append(handler)
            return false
        }
        if now { handler() }
    }

    /// Ends the connection and runs the close handlers.
    func finish() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            state.closed = true
            state.fdClosed = true
            _ = shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
            defer { state.closeHandlers = [] }
            return state.closeHandlers
        }
        for handler in handlers { handler() }
    }

    /// Wakes the connection's reader (daemon shutdown).
    func interrupt() { state.withLock { if !$0.fdClosed { _ = shutdown(fd, Int32(SHUT_RDWR)) } } }
}

/// Answers requests arriving on the control socket.
public protocol ControlHandler: Sendable {
    /// Handles one decoded request, replying through `connection` (a watch keeps sending until the
    /// connection closes).
    /// - Parameters:
    ///   - request: the client's request.
    ///   - connection: where replies go.
    func handle(_ request: ControlRequest, from connection: ControlConnection) async
}

/// The daemon's control socket: a Unix stream socket (mode 0600, or one systemd passed in), one thread
/// accepting, one thread per client reading frames. Only clients of the daemon's own uid are served
/// (SO_PEERCRED); others get an error frame and are disconnected. A malformed request gets an error reply
/// and the connection goes on; a frame that breaks the stream (oversized, empty, stalled half-way) gets an
/// error reply and the connection is closed. The daemon itself is never affected.
public final class ControlServer: @unchecked Sendable {
    private let listener: Int32
    private let path: URL?
    private let handler: any ControlHandler
    private let lock = NSLock()
    private var connections: [ObjectIdentifier: ControlConnection] = [:]
    private var stopped = false
    private let acceptDone = DispatchSemaphore(value: 0)
    /// Written by ``stop()`` to wake the accept thread: a shutdown(2) of the listener would also end a socket
    /// systemd passed, which it shares (sotto.socket then fails, and no client starts the daemon any more).
    private let wake: (read: Int32, write: Int32)
    /// Where the server reports refusals and protocol errors (for the daemon's log).
    public let log: @Sendable (String) -> Void
    /// At most this many clients at once; more are refused with an error frame.
    public static let maxClients = 32
    /// A client that stops mid-frame for this long (s) is disconnected.
    public static let frameTimeout = 5.0

    /// Listens on a new socket at `path` (a stale one there is replaced: the caller holds the daemon lock). A
    /// socket there that something still listens on, though no daemon holds the lock, is systemd's
    /// (`sotto.socket`): it is left alone and this daemon refused (the probe's connection makes systemd start
    /// the daemon it manages).
    /// - Parameters:
    ///   - path: the socket file.
    ///   - handler: answers requests.
    ///   - log: receives refusals and protocol errors.
    /// - Throws: ``DaemonError`` when the socket cannot be made.
    public init(path: URL, handler: any ControlHandler, log: @escaping @Sendable (String) -> Void) throws(DaemonError) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DaemonError("cannot create a socket: \(String(cString: strerror(errno)))") }
        guard var address = UnixSocket.address(path.path) else { close(fd); throw DaemonError("socket path too long: \(path.path)") }
        if UnixSocket.isListening(path.path) {
            close(fd)
            throw DaemonError("\(path.path) is listened on by another program, most likely systemd's sotto.socket, which starts the "
                              + "daemon for its clients: see 'systemctl --user status sotto'; to run one by hand, first "
                              + "'systemctl --user stop sotto.socket sotto'")
        }
        unlink(path.path)
        // Created 0600 from the start (no window with a wider mode).
        let oldMask = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(oldMask)
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw DaemonError("cannot listen on \(path.path): \(reason)")
        }
        self.listener = fd
        self.wake = Self.makeWakePipe()
        self.path = path
        self.handler = handler
        self.log = log
    }

    /// Serves a listening socket passed by systemd (socket activation, `sd_listen_fds`: fd 3 when
    /// `LISTEN_PID` is this process and `LISTEN_FDS` is at least 1); nil when none was passed.
    /// - Parameters:
    ///   - environment: the process environment.
    ///   - handler: answers requests.
    ///   - log: receives refusals and protocol errors.
    public init?(activatedBy environment: [String: String], handler: any ControlHandler, log: @escaping @Sendable (String) -> Void) {
        guard let pid = environment["LISTEN_PID"].flatMap(Int32.init), pid == getpid(),
              let count = environment["LISTEN_FDS"].flatMap(Int.init), count >= 1 else { return nil }
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
        _ = fcntl(3, F_SETFD, FD_CLOEXEC)
        self.listener = 3
        self.wake = Self.makeWakePipe()
        self.path = nil
        self.handler = handler
        self.log = log
    }

    /// Starts accepting clients on a thread of its own.
    public func start() {
        let thread = Thread { [self] in acceptLoop(); acceptDone.signal() }
        thread.name = "sotto-control-accept"
        thread.start()
    }

    private static func makeWakePipe() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        _ = pipe(&fds)
        for fd in fds where fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (fds[0], fds[1])
    }

    private func acceptLoop() {
        // Non-blocking: a client that goes away between poll and accept cannot hold the thread.
        _ = fcntl(listener, F_SETFL, fcntl(listener, F_GETFL) | O_NONBLOCK)
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 2, -1)
            if ready < 0 { if errno == EINTR { continue }; return }
            if fds[1].revents != 0 || lock.withLock({ stopped }) { return }
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED || errno == EAGAIN || errno == EWOULDBLOCK { continue }
                if lock.withLock({ stopped }) { return }
                if errno == EMFILE || errno == ENFILE { Thread.sleep(forTimeInterval: 0.1); continue }
                return
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            // A client that stops reading is dropped after this, instead of holding its writer (and shutdown).
            UnixSocket.setSendTimeout(fd, seconds: Self.frameTimeout)
            let uid = UnixSocket.peerUID(fd)
            guard let uid, uid == getuid() else {
                log("refused a control client of uid \(uid.map(String.init) ?? "unknown"): only uid \(getuid()) may control this daemon")
                _ = UnixSocket.writeAll(fd, ControlProtocol.frame(ControlReply.failure("permission denied: this daemon belongs to another user")))
                close(fd)
                continue
            }
            let connection = ControlConnection(fd: fd, peerUID: uid)
            let admitted = lock.withLock { () -> Bool in
                guard !stopped, connections.count < Self.maxClients else { return false }
                connections[ObjectIdentifier(connection)] = connection
                return true
            }
            guard admitted else {
                connection.send(.failure("too many clients (at most \(Self.maxClients))"))
                connection.finish()
                continue
            }
            let thread = Thread { [self] in
                serve(connection, fd: fd)
                lock.withLock { _ = connections.removeValue(forKey: ObjectIdentifier(connection)) }
                connection.finish()
            }
            thread.name = "sotto-control-client"
            thread.start()
        }
    }

    private func serve(_ connection: ControlConnection, fd: Int32) {
        var decoder = ControlFrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        UnixSocket.setReceiveTimeout(fd, seconds: Self.frameTimeout)
        while !connection.isClosed {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 {
                if decoder.hasPartialFrame { log("a control client disconnected in the middle of a frame") }
                return
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    if decoder.hasPartialFrame {
                        log("a control client stopped in the middle of a frame; disconnected")
                        connection.send(.failure("incomplete frame: nothing more for \(Int(Self.frameTimeout)) s"))
                        return
                    }
                    continue
                }
                return
            }
            decoder.append(buffer[0..<n])
            while true {
                let payload: [UInt8]
                do {
                    guard let next = try decoder.next() else { break }
                    payload = next
                } catch {
                    log("control frame refused: \(error)")
                    connection.send(.failure(error.description))
                    return
                }
                let request: ControlRequest
                do { request = try ControlRequest(payload: payload) } catch {
                    log("control request refused: \(error)")
                    connection.send(.failure(error.description))
                    continue
                }
                let done = DispatchSemaphore(value: 0)
                let handler = self.handler
                Task.detached {
                    await handler.handle(request, from: connection)
                    done.signal()
                }
                done.wait()
            }
        }
    }

    /// Stops accepting, disconnects every client and removes the socket file (not one systemd owns).
    public func stop() {
        let clients = lock.withLock { () -> [ControlConnection] in
            stopped = true
            return Array(connections.values)
        }
        _ = write(wake.write, [UInt8(1)], 1)
        acceptDone.wait()
        close(wake.read)
        close(wake.write)
        close(listener)
        for client in clients { client.interrupt() }
        if let path { unlink(path.path) }
    }
}
