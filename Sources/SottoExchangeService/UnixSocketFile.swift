import Foundation

/// The path a Unix-domain socket is bound to: only a stale socket (a socket file nobody answers on, left by
/// a service that ended without removing it) may be removed to bind again. A regular file, a directory, the
/// store itself, or the socket of a service still running are never touched: binding there is refused.
enum UnixSocketFile {
    /// Makes `path` free to bind: nothing there, or a stale socket (removed).
    /// - Parameter path: the socket's path.
    /// - Throws: ``MatcherServerError/socketPath(_:_:)`` saying why the path cannot be used.
    static func claim(_ path: String) throws(MatcherServerError) {
        guard !path.isEmpty else { throw .socketPath(path, "an empty path") }
        guard FileManager.default.fileExists(atPath: path) || (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) != nil else {
            return
        }
        let type: FileAttributeType?
        do { type = try FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType } catch {
            throw .socketPath(path, "\(error.localizedDescription)")
        }
        guard type == .typeSocket else {
            let kind = type == .typeDirectory ? "a directory" : type == .typeRegular ? "a regular file" : "not a socket"
            throw .socketPath(path, "it exists and is \(kind), left as it is (give a new path, or remove it first)")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { throw .socketPath(path, "longer than \(capacity - 1) bytes") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard descriptor >= 0 else { throw .socketPath(path, String(cString: strerror(errno))) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let code = errno
        close(descriptor)
        // Connected, or a full backlog (EAGAIN): a service answers there.
        if connected == 0 || code == EAGAIN || code == EINPROGRESS {
            throw .socketPath(path, "a service is listening on it (another sotto serve?)")
        }
        guard code == ECONNREFUSED else { throw .socketPath(path, String(cString: strerror(code))) }
        guard unlink(path) == 0 || errno == ENOENT else { throw .socketPath(path, "a stale socket that cannot be removed: \(String(cString: strerror(errno)))") }
    }
}
