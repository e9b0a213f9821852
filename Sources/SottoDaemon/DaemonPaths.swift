import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where the daemon keeps its files, per user: the control socket and the lock in the runtime directory
/// (`$XDG_RUNTIME_DIR/sotto`, else `/tmp/sotto-UID`), the persistent operations in the state directory
/// (`$XDG_STATE_HOME/sotto`, else `~/.local/state/sotto`).
public struct DaemonPaths: Sendable, Equatable {
    /// The runtime directory (mode 0700).
    public var runtime: URL
    /// The state directory.
    public var state: URL

    /// The paths for the current user from the environment.
    /// - Parameter environment: the variables to read (the process's by default).
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty {
            runtime = URL(fileURLWithPath: xdg).appendingPathComponent("sotto")
        } else {
            runtime = URL(fileURLWithPath: "/tmp/sotto-\(getuid())")
        }
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty {
            state = URL(fileURLWithPath: xdg).appendingPathComponent("sotto")
        } else {
            let home = environment["HOME"].map { URL(fileURLWithPath: $0) } ?? FileManager.default.homeDirectoryForCurrentUser
            state = home.appendingPathComponent(".local/state/sotto")
        }
    }

    /// The control socket.
    public var socket: URL { runtime.appendingPathComponent("control.sock") }
    /// The lock held by the running daemon.
    public var lock: URL { runtime.appendingPathComponent("daemon.lock") }
    /// The persistent operations.
    public var operations: URL { state.appendingPathComponent("operations.json") }

    /// Creates the runtime directory (0700), refusing one owned by another user.
    /// - Throws: ``DaemonError`` when it cannot be made private.
    public func prepareRuntime() throws(DaemonError) {
        do { try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700]) } catch {
            throw DaemonError("cannot create \(runtime.path): \(error.localizedDescription)")
        }
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: runtime.path),
              let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value,
              let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue else { throw DaemonError("cannot read \(runtime.path)") }
        guard owner == getuid() else { throw DaemonError("\(runtime.path) belongs to another user") }
        if mode & 0o077 != 0 { _ = chmod(runtime.path, 0o700) }
    }
}

/// A daemon failure with what happened in words.
public struct DaemonError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed and why.
    public let description: String
    /// - Parameter description: what failed and why.
    public init(_ description: String) { self.description = description }
}

/// The one-daemon-per-user lock: an exclusive `flock` on a file in the runtime directory, held while the
/// process lives (the kernel drops it when the process dies, even after `kill -9`).
public final class DaemonLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock at `path`, writing this process's id into the file.
    /// - Parameter path: the lock file.
    /// - Throws: ``DaemonError`` when another daemon holds it (with its process id) or the file cannot be opened.
    public init(path: URL) throws(DaemonError) {
        let fd = open(path.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DaemonError("cannot open the lock \(path.path): \(String(cString: strerror(errno)))") }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let holder = (try? String(contentsOf: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            close(fd)
            throw DaemonError("another sotto daemon is running for this user (it holds \(path.path)\(holder.isEmpty ? "" : ", process \(holder)"))")
        }
        _ = ftruncate(fd, 0)
        let pid = "\(getpid())\n"
        _ = pid.withCString { write(fd, $0, strlen($0)) }
        descriptor = fd
    }

    deinit { close(descriptor) }
}
