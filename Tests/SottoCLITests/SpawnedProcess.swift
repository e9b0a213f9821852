import Foundation

/// A program started with posix_spawn and reaped by this object alone (`waitpid` on its pid, never a wait for
/// any child), for programs that Foundation's `Process` must not watch: swift-corelibs-foundation learns that
/// a child ended from a descriptor the child inherits, and a program that closes its inherited descriptors
/// (systemd-socket-activate does) makes Foundation's one monitoring thread block in `wait4` until it ends,
/// which stalls every other `Process` of the test run.
///
/// The child gets standard input from /dev/null, standard output and error in files, no other descriptor of
/// the test run (closefrom 3: it cannot hold another child's descriptors open), an empty signal mask and
/// default SIGINT, SIGTERM and SIGPIPE (the test runner blocks SIGTERM, and a mask survives exec).
final class SpawnedProcess: @unchecked Sendable {
    let pid: pid_t
    let standardOutputFile: URL
    let standardErrorFile: URL
    private let lock = NSLock()
    private var status: Int32?

    /// Starts `executable` with `arguments` and the test run's environment merged with `environment`; its
    /// output goes to files in `directory` (standard output to `standardOutput` instead when given, appended).
    init(_ executable: String, _ arguments: [String], environment: [String: String], directory: URL, standardOutput: URL? = nil) throws {
        standardOutputFile = standardOutput ?? directory.appendingPathComponent("spawned-\(UUID().uuidString.prefix(8)).out")
        standardErrorFile = directory.appendingPathComponent("spawned-\(UUID().uuidString.prefix(8)).err")
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        let merged = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in envp { free(p) } }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, standardOutputFile.path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, standardErrorFile.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // glibc declares posix_spawn_file_actions_addclosefrom_np (2.34) only with _GNU_SOURCE: looked up.
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            throw POSIXError(.ENOSYS)
        }
        _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        self.pid = pid
    }

    /// The exit status (or 128 + the signal) once it has ended and been reaped; nil while it runs.
    var exitStatus: Int32? {
        lock.withLock {
            if let status { return status }
            var raw: Int32 = 0
            let reaped = waitpid(pid, &raw, WNOHANG)
            guard reaped == pid else { return nil }
            // WIFEXITED / WEXITSTATUS / WTERMSIG, spelled out (the C macros are not imported).
            let signal = raw & 0x7F
            status = signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
            return status
        }
    }

    var isRunning: Bool { exitStatus == nil }

    var standardError: String { (try? String(contentsOf: standardErrorFile, encoding: .utf8)) ?? "" }

    /// Waits (at most `timeout` s) until standard error contains `text`.
    func saidOnStandardError(_ text: String, timeout: Double = 5) async -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while !standardError.contains(text) && Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return standardError.contains(text)
    }

    /// Waits (at most `timeout` s) for the end; returns its status, nil if it still runs.
    func waitForExit(timeout: Double) async -> Int32? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        return exitStatus
    }

    /// `signal`, then waits (at most `timeout` s); SIGKILL and a reap if it is still running. Returns the
    /// status it ended with after `signal` (nil: it had to be killed).
    @discardableResult
    func stop(_ signal: Int32 = SIGTERM, timeout: Double = 10) async -> Int32? {
        if let status = exitStatus { return status }
        kill(pid, signal)
        if let status = await waitForExit(timeout: timeout) { return status }
        kill(pid, SIGKILL)
        _ = await waitForExit(timeout: 5)
        return nil
    }

    /// Kills and reaps it if it still runs (for `defer`, which cannot await): bounded, blocking at most 5 s.
    func kill9() {
        guard isRunning else { return }
        kill(pid, SIGKILL)
        let deadline = Date(timeIntervalSinceNow: 5)
        while isRunning && Date() < deadline { usleep(10_000) }
    }
}
