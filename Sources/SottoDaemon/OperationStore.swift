import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A persistent operation as saved: its id, what it does, and when it ends (s since the Unix epoch; nil:
/// never), so that a restart restores it with its remaining time to live.
public struct SavedOperation: Codable, Sendable, Equatable {
    /// The operation's id.
    public var id: String
    /// What it does.
    public var spec: OperationSpec
    /// When its TTL runs out (Unix time, s); nil for none.
    public var expiresAt: Double?

    /// - Parameters:
    ///   - id: the operation's id.
    ///   - spec: what it does.
    ///   - expiresAt: when it ends (Unix time, s), nil for never.
    public init(id: String, spec: OperationSpec, expiresAt: Double?) {
        self.id = id
        self.spec = spec
        self.expiresAt = expiresAt
    }
}

/// The persistent operations file: saved atomically (a temporary file written and fsynced, renamed over
/// the old one, the directory fsynced), so that a crash or a full disk leaves the previous state whole.
/// A file that cannot be read back is moved aside (`operations.json.corrupt-TIME`), never dropped.
public struct OperationStore: Sendable {
    /// The state file.
    public let file: URL
    /// Version of the file's format.
    public static let formatVersion = 1

    private struct Contents: Codable {
        var version: Int
        var operations: [SavedOperation]
    }

    /// - Parameter file: the state file (its directory is created when saving).
    public init(file: URL) { self.file = file }

    /// What loading found: the operations, and a warning when the file was unreadable and moved aside.
    public struct Loaded: Sendable {
        /// The saved operations (empty when there was no file or it was unreadable).
        public var operations: [SavedOperation]
        /// Set when the file was corrupt: where it was moved and why.
        public var warning: String?
    }

    /// Reads the saved operations; a corrupt or truncated file, or one that cannot be read (not a regular
    /// file, no permission), is renamed aside with a warning (the next save must not replace it unseen).
    public func load() -> Loaded {
        let missing = withUnsafeTemporaryAllocation(of: stat.self, capacity: 1) { status in
            lstat(file.path, status.baseAddress!) != 0 && errno == ENOENT
        }
        if missing { return Loaded(operations: []) }
        let data: Data
        do { data = try Data(contentsOf: file) } catch {
            return Loaded(operations: [], warning: setAside("it cannot be read (\(error.localizedDescription))"))
        }
        do {
            let contents = try JSONDecoder().decode(Contents.self, from: data)
            guard contents.version == Self.formatVersion else {
                return Loaded(operations: [], warning: setAside("format version \(contents.version) is not \(Self.formatVersion)"))
            }
            return Loaded(operations: contents.operations)
        } catch {
            return Loaded(operations: [], warning: setAside("it is not a valid state file (truncated or corrupt)"))
        }
    }

    private func setAside(_ reason: String) -> String {
        let aside = file.deletingLastPathComponent().appendingPathComponent("\(file.lastPathComponent).corrupt-\(Int(Date().timeIntervalSince1970))")
        if rename(file.path, aside.path) == 0 {
            return "\(file.path): \(reason); kept as \(aside.path), starting without its operations"
        }
        return "\(file.path): \(reason), and it could not be moved aside (\(String(cString: strerror(errno)))); starting without its operations"
    }

    /// Replaces the saved operations with `operations`, atomically.
    /// - Parameter operations: every persistent operation.
    /// - Throws: ``DaemonError`` when it could not be written (the previous file is untouched).
    public func save(_ operations: [SavedOperation]) throws(DaemonError) {
        let directory = file.deletingLastPathComponent()
        do { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700]) } catch {
            throw DaemonError("cannot create \(directory.path): \(error.localizedDescription)")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data: Data
        do { data = try encoder.encode(Contents(version: Self.formatVersion, operations: operations)) } catch {
            throw DaemonError("cannot encode the state: \(error)")
        }
        let temporary = directory.appendingPathComponent(".\(file.lastPathComponent).\(getpid()).tmp")
        let fd = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DaemonError("cannot save the state in \(directory.path): \(String(cString: strerror(errno)))") }
        func fail(_ what: String) -> DaemonError {
            let reason = String(cString: strerror(errno))
            close(fd)
            unlink(temporary.path)
            return DaemonError("cannot save the state to \(file.path) (\(what): \(reason)); the previous state is kept")
        }
        var written = 0
        let result: DaemonError? = data.withUnsafeBytes { buffer -> DaemonError? in
            while written < buffer.count {
                let n = write(fd, buffer.baseAddress! + written, buffer.count - written)
                if n < 0 { if errno == EINTR { continue }; return fail("write") }
                written += n
            }
            return nil
        }
        if let result { throw result }
        guard fsync(fd) == 0 else { throw fail("fsync") }
        guard close(fd) == 0 else { unlink(temporary.path); throw DaemonError("cannot save the state to \(file.path) (close); the previous state is kept") }
        guard rename(temporary.path, file.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary.path)
            throw DaemonError("cannot save the state to \(file.path) (rename: \(reason)); the previous state is kept")
        }
        let directoryFD = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 { _ = fsync(directoryFD); close(directoryFD) }
    }
}
