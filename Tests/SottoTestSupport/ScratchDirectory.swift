import Foundation
import Synchronization

/// The directories ``processScratchDirectory(_:)`` made, removed at the process's exit.
private let scratchDirectories = Mutex<[String]>([])

/// Registers, once, the removal of every scratch directory at the process's exit.
private let removeScratchDirectoriesAtExit: Void = {
    atexit {
        for path in scratchDirectories.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
    }
}()

/// `/tmp/PREFIX-PID`, created, and removed with everything in it when the test process exits (tests that make
/// their files inside it leave nothing behind in `/tmp`; the path stays short for Unix socket names).
/// - Parameter prefix: the directory's name before the process id.
/// - Returns: the directory's path.
public func processScratchDirectory(_ prefix: String) -> String {
    let path = "/tmp/\(prefix)-\(getpid())"
    _ = removeScratchDirectoriesAtExit
    scratchDirectories.withLock { if !$0.contains(path) { $0.append(path) } }
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}
