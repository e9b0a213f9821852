import Foundation
import SottoExchange
import SottoExchangeCore

/// A rotating beacon's provisioning file (`BeaconProvisioning`) on disk: written once, private to its
/// owner (mode 600), and refused, as ssh refuses a private key, when group or others may read it.
public enum BeaconKeyFile {
    /// Why a key file cannot be read or written.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong, naming the file.
        public let description: String
    }

    /// Reads and checks `path`: a regular file, at most `BeaconProvisioning.maximumSize` bytes, not
    /// readable or writable by group or others, holding a valid provisioning text.
    /// - Parameter path: the key file.
    public static func read(_ path: String) throws(Failure) -> BeaconProvisioning {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard descriptor >= 0 else { throw Failure(description: "\(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw Failure(description: "\(path): \(String(cString: strerror(errno)))") }
        guard status.st_mode & S_IFMT == S_IFREG else { throw Failure(description: "\(path): not a regular file") }
        guard status.st_mode & 0o077 == 0 else {
            throw Failure(description: "\(path): permissions \(String(status.st_mode & 0o777, radix: 8)) are too open: a beacon key "
                          + "must be private to its owner (chmod 600 \(path))")
        }
        guard status.st_size <= BeaconProvisioning.maximumSize else {
            throw Failure(description: "\(path): \(status.st_size) bytes is too long for a beacon key file")
        }
        var bytes = [UInt8](repeating: 0, count: BeaconProvisioning.maximumSize + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Foundation.read(descriptor, $0.baseAddress! + count, $0.count - count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw Failure(description: "\(path): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            count += n
        }
        guard count <= BeaconProvisioning.maximumSize else { throw Failure(description: "\(path): too long for a beacon key file") }
        guard let text = String(validating: bytes[..<count], as: UTF8.self) else {
            throw Failure(description: "\(path): not a sotto beacon key file (not text)")
        }
        do { return try BeaconProvisioning(text: text) } catch { throw Failure(description: "\(path): \(error)") }
    }

    /// Creates `path` with mode 600 and writes `provisioning` to it; refuses to replace an existing file.
    /// - Parameters:
    ///   - provisioning: the beacon's ID, period and identity key.
    ///   - path: the new file.
    public static func write(_ provisioning: BeaconProvisioning, to path: String) throws(Failure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw Failure(description: "\(path): \(String(cString: strerror(errno)))\(errno == EEXIST ? " (a key file is never overwritten)" : "")")
        }
        defer { close(descriptor) }
        let bytes = Array(provisioning.text.utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason = String(cString: strerror(errno))
                unlink(path)
                throw Failure(description: "\(path): \(reason)")
            }
            written += n
        }
        guard fsync(descriptor) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(path)
            throw Failure(description: "\(path): \(reason)")
        }
    }
}
