import Glibc

/// Where a file written "by rename" (to a temporary name, then renamed over its path) really goes, so that
/// writing never replaces what the path names instead of writing to it.
///
/// - A symbolic link is followed to its final target, which is written (the link stays a link); a link to
///   nothing is refused, since its target's directory may not be the one meant.
/// - An existing file that is not a regular file (a device such as `/dev/null`, a FIFO, a socket) is
///   written through, in place: renaming over it would replace the device node by a regular file.
/// - A directory is refused.
/// - Anything else (a regular file, or nothing yet) is written to a temporary name next to the target and
///   renamed over it when complete.
public struct OutputPath: Sendable, Hashable {
    /// The path as given (for messages).
    public let given: String
    /// The path written: `given` with symbolic links followed.
    public let target: String
    /// True when `target` is written in place (a device, FIFO or socket); false when written by rename.
    public let writesThrough: Bool

    /// Resolves `path` for writing.
    /// - Parameter path: the output path as given by the user.
    /// - Throws: ``OutputPathError`` for a directory, a link to nothing, or a link loop.
    public init(_ path: String) throws(OutputPathError) {
        given = path
        guard !path.isEmpty else { throw OutputPathError(path: path, reason: "an empty path") }
        var link = stat()
        guard lstat(path, &link) == 0 else {
            // Nothing there yet (or an unreachable directory, reported when the file is created).
            target = path
            writesThrough = false
            return
        }
        var resolved = path
        if (link.st_mode & S_IFMT) == S_IFLNK {
            guard let real = realpath(path, nil) else {
                let reason = errno == ELOOP ? "a loop of symbolic links" : "a symbolic link to nothing (\(String(cString: strerror(errno))))"
                throw OutputPathError(path: path, reason: reason + "; give the path to write")
            }
            resolved = String(cString: real)
            free(real)
        }
        var status = stat()
        guard stat(resolved, &status) == 0 else {
            throw OutputPathError(path: path, reason: String(cString: strerror(errno)))
        }
        if (status.st_mode & S_IFMT) == S_IFDIR { throw OutputPathError(path: path, reason: "a directory") }
        target = resolved
        writesThrough = (status.st_mode & S_IFMT) != S_IFREG
    }

    /// Checks, before any long work, that the path can be written: the file is writable if it exists, else
    /// its directory exists and takes new files. Nothing is created.
    /// - Throws: ``OutputPathError`` with the system's reason (no such directory, permission denied).
    public func checkWritable() throws(OutputPathError) {
        var status = stat()
        if stat(target, &status) == 0 {
            guard access(target, W_OK) == 0 else { throw OutputPathError(path: given, reason: String(cString: strerror(errno))) }
            if writesThrough { return }
        }
        let slash = target.lastIndex(of: "/")
        let directory = slash.map { $0 == target.startIndex ? "/" : String(target[..<$0]) } ?? "."
        guard stat(directory, &status) == 0 else {
            throw OutputPathError(path: given, reason: "no directory \(directory) (\(String(cString: strerror(errno))))")
        }
        guard (status.st_mode & S_IFMT) == S_IFDIR else { throw OutputPathError(path: given, reason: "\(directory) is not a directory") }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw OutputPathError(path: given, reason: "cannot create files in \(directory) (\(String(cString: strerror(errno))))")
        }
    }

    /// A hidden name next to ``target``, unique to this process and call: the temporary file of a write by rename.
    public func temporaryName() -> String {
        let slash = target.lastIndex(of: "/")
        let directory = slash.map { String(target[...$0]) } ?? ""
        let name = slash.map { String(target[target.index(after: $0)...]) } ?? target
        var random = SystemRandomNumberGenerator()
        return "\(directory).\(name).\(getpid())-\(random.next() as UInt32).partial"
    }

    /// Writes `bytes` to the path: through, for a device or FIFO; else to a temporary file renamed over
    /// the target once complete (a failure leaves the old file as it was, and no temporary file).
    /// - Parameters:
    ///   - bytes: the whole content.
    ///   - permissions: the mode of a newly created file (before the umask).
    /// - Throws: ``OutputPathError`` naming the path and the system's reason.
    public func write(_ bytes: [UInt8], permissions: mode_t = 0o644) throws(OutputPathError) {
        let destination = writesThrough ? target : temporaryName()
        let flags = writesThrough ? O_WRONLY | O_CLOEXEC : O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC
        let descriptor = open(destination, flags, permissions)
        guard descriptor >= 0 else { throw OutputPathError(path: given, reason: String(cString: strerror(errno))) }
        var failure: Int32 = 0
        var offset = 0
        bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                let n = Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                offset += n
            }
        }
        if failure == 0, !writesThrough, fsync(descriptor) != 0 { failure = errno }
        if close(descriptor) != 0, failure == 0, !writesThrough { failure = errno }
        if failure == 0, !writesThrough, rename(destination, target) != 0 { failure = errno }
        if failure != 0 {
            if !writesThrough { unlink(destination) }
            throw OutputPathError(path: given, reason: String(cString: strerror(failure)))
        }
    }
}

/// An output path that cannot be written as given.
public struct OutputPathError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The path as given.
    public let path: String
    /// Why, for people.
    public let reason: String

    /// An error about `path`.
    /// - Parameters:
    ///   - path: the path as given.
    ///   - reason: why it cannot be written.
    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    public var description: String { "cannot write \(path): \(reason)" }
}
