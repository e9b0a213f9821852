import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A failure to start or wait for a command.
public struct SpawnFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The command's first word.
    public let program: String
    /// What failed.
    public let reason: String
    public var description: String { "cannot run \(program): \(reason)" }
}

/// Starts commands with posix_spawn: an argument vector (never a shell string), an environment, and optional
/// bytes on standard input (from an unlinked temporary file, so a command that does not read them cannot block
/// the caller or raise SIGPIPE).
enum Spawn {
    /// Starts `argv` (the program found in PATH when it has no slash) and returns its process id.
    static func start(_ argv: [String], environment: [String: String], stdin: [UInt8]?) throws(SpawnFailure) -> pid_t {
        guard let program = argv.first, !program.isEmpty else { throw SpawnFailure(program: "", reason: "empty command") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var inputPath: String? = nil
        defer { if let inputPath { unlink(inputPath) } }
        if let stdin {
            var template = Array((NSTemporaryDirectory() + "/sotto-input-XXXXXX").utf8CString)
            let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            guard fd >= 0 else { throw SpawnFailure(program: program, reason: "temporary file: \(String(cString: strerror(errno)))") }
            let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            inputPath = path
            let written = stdin.withUnsafeBytes { buffer -> Bool in
                var offset = 0
                while offset < buffer.count {
                    let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if n < 0 { if errno == EINTR { continue }; return false }
                    offset += n
                }
                return true
            }
            close(fd)
            guard written else { throw SpawnFailure(program: program, reason: "cannot write its input") }
            posix_spawn_file_actions_addopen(&actions, 0, path, O_RDONLY, 0)
        }
        let cArgs = argv.map { strdup($0) }
        let cEnv = environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") }
        defer { (cArgs + cEnv).forEach { free($0) } }
        // The child starts with no blocked signal and default handlers, whatever this process set up.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t(), all = sigset_t()
        sigemptyset(&empty)
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        var status: Int32 = 0
        for attempt in 0..<5 {
            status = (cArgs + [nil]).withUnsafeBufferPointer { args in
                (cEnv + [nil]).withUnsafeBufferPointer { env in
                    posix_spawnp(&pid, program, &actions, &attributes, args.baseAddress!, env.baseAddress!)
                }
            }
            // ETXTBSY: the program was just written and another thread's fork still holds it open for writing.
            guard status == ETXTBSY, attempt < 4 else { break }
            usleep(20_000)
        }
        guard status == 0 else { throw SpawnFailure(program: program, reason: String(cString: strerror(status))) }
        return pid
    }

    /// Waits for `pid` at most `timeout` seconds (then kills it) and returns its exit status (128 + signal when
    /// killed by a signal).
    static func wait(_ pid: pid_t, timeout: Double) async -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { break }
            if result < 0 && errno != EINTR { return -1 }
            if Date() >= deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                break
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Runs `argv` to its end (bounded by `timeout` seconds) and returns its exit status.
    static func run(_ argv: [String], environment: [String: String], stdin: [UInt8]? = nil, timeout: Double) async throws(SpawnFailure) -> Int32 {
        let pid = try start(argv, environment: environment, stdin: stdin)
        return await wait(pid, timeout: timeout)
    }
}
