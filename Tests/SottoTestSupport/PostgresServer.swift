import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Why a test PostgreSQL server could not be made or driven.
public struct PostgresServerError: Error, CustomStringConvertible {
    public let description: String
}

/// A real PostgreSQL server for tests, in a fresh temporary directory of its own: data, log and Unix socket.
/// It listens on 127.0.0.1 (a free port) and in its directory; it trusts every local connection as the
/// `postgres` superuser. Tuned for tests (no fsync), so never for data that matters.
///
/// The server binaries are Debian's (`/usr/lib/postgresql/<version>/bin`, the newest version); as root they
/// run as the `postgres` user the package creates (initdb refuses root). Without them, starting fails and
/// says to run `scripts/install-deps`. A server still running when the test process exits is stopped (fast
/// shutdown) and its directory deleted.
public final class PostgresServer: Sendable {
    /// The temporary directory: `data/`, `server.log`, `commands.log` and the Unix socket.
    public let directory: String
    public let port: Int
    /// The directory of initdb, pg_ctl, postgres, createdb.
    public let binaries: String
    private let runsAsPostgresUser: Bool
    private let running = Mutex(false)

    public var dataDirectory: String { directory + "/data" }
    public var logFile: String { directory + "/server.log" }

    /// Initialises a cluster in a new directory and starts it (at most about a minute).
    public init() async throws {
        binaries = try Self.findBinaries()
        runsAsPostgresUser = getuid() == 0
        var owner: (uid: uid_t, gid: gid_t)?
        if runsAsPostgresUser {
            guard let entry = getpwnam("postgres") else {
                throw PostgresServerError(description: "running as root, the test PostgreSQL server runs as the 'postgres' user, "
                                          + "which does not exist: run scripts/install-deps (Debian's postgresql package creates it)")
            }
            owner = (entry.pointee.pw_uid, entry.pointee.pw_gid)
        }
        directory = "/tmp/sotto-pg-\(UUID().uuidString.prefix(8).lowercased())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        if let owner, chown(directory, owner.uid, owner.gid) != 0 {
            throw PostgresServerError(description: "chown \(directory) to postgres: \(String(cString: strerror(errno)))")
        }
        port = try Self.freePort()
        Self.register(self)
        do {
            try await command("initdb", ["-D", dataDirectory, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"],
                              asServer: true, timeout: 120)
            let settings = """

                # Test server (PostgresServer.swift): fast and disposable.
                listen_addresses = '127.0.0.1'
                port = \(port)
                unix_socket_directories = '\(directory)'
                max_connections = 200
                shared_buffers = 32MB
                fsync = off
                synchronous_commit = off
                full_page_writes = off

                """
            let configuration = try FileHandle(forWritingTo: URL(fileURLWithPath: dataDirectory + "/postgresql.conf"))
            try configuration.seekToEnd()
            try configuration.write(contentsOf: Data(settings.utf8))
            try configuration.close()
            // A first start can fail on a machine busy with other servers starting at the same moment (seen
            // once in a full run beside other PostgreSQL tests): try again, twice, before giving up.
            var attempt = 1
            while true {
                do {
                    try await start()
                    break
                } catch where attempt < 3 {
                    attempt += 1
                    try await Task.sleep(for: .seconds(1))
                }
            }
        } catch {
            await destroy()
            throw error
        }
    }

    /// The server most tests share (started once per test process); each test makes its own database.
    public static func shared() async throws -> PostgresServer {
        let task = sharedServer.withLock { shared in
            if let shared { return shared }
            let task = Task { try await PostgresServer() }
            shared = task
            return task
        }
        return try await task.value
    }

    /// A new, empty database; its URL over TCP (`postgres://postgres@127.0.0.1:PORT/NAME`).
    public func createDatabase() async throws -> String {
        let name = "test_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        try await command("createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", name], asServer: false, timeout: 60)
        return url(database: name)
    }

    /// The URL of `database` over TCP.
    public func url(database: String) -> String { "postgres://postgres@127.0.0.1:\(port)/\(database)" }

    /// The URL of `database` over the Unix socket.
    public func unixURL(database: String) -> String { "postgres://postgres@/\(database)?host=\(directory)&port=\(port)" }

    /// Starts the server (waits until it accepts connections, at most 30 s).
    public func start() async throws {
        try await command("pg_ctl", ["-D", dataDirectory, "-l", logFile, "-w", "-t", "30", "start"], asServer: true, timeout: 45)
        running.withLock { $0 = true }
    }

    /// Stops the server: fast shutdown (sessions are cut, their transactions rolled back); waits at most 30 s.
    public func stop() async throws {
        guard running.withLock({ $0 }) else { return }
        try await command("pg_ctl", ["-D", dataDirectory, "-m", "fast", "-w", "-t", "30", "stop"], asServer: true, timeout: 45)
        running.withLock { $0 = false }
    }

    /// Stops the server if it runs and starts it again: same port, same data.
    public func restart() async throws {
        try await stop()
        try await start()
    }

    /// Stops the server and deletes its directory.
    public func destroy() async {
        try? await stop()
        try? FileManager.default.removeItem(atPath: directory)
        Self.unregister(self)
    }

    // MARK: Commands

    /// Runs one of the server's programs, failing with its output (and the server log's end) when it fails.
    private func command(_ program: String, _ arguments: [String], asServer: Bool, timeout: Double) async throws {
        let executable = binaries + "/" + program
        let outputPath = directory + "/commands.log"
        if !FileManager.default.fileExists(atPath: outputPath) { _ = FileManager.default.createFile(atPath: outputPath, contents: nil) }
        guard let output = FileHandle(forWritingAtPath: outputPath) else {
            throw PostgresServerError(description: "cannot write \(outputPath)")
        }
        defer { try? output.close() }
        let start = (try? output.seekToEnd()) ?? 0
        let process = Process()
        // Through bash, which closes every descriptor above stderr first: Foundation's Process (Linux) learns
        // that its child ended when a socket it passes down closes, so a server that pg_ctl leaves running
        // with that socket would make `pg_ctl start` look like it never ends.
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        let closeInherited = #"for fd in /proc/$$/fd/*; do fd=${fd##*/}; if ((fd > 2)); then eval "exec $fd>&-"; fi; done; exec "$@""#
        let target = asServer && runsAsPostgresUser ? ["/usr/sbin/runuser", "-u", "postgres", "--", executable] : [executable]
        process.arguments = ["-c", closeInherited, "bash"] + target + arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        let status = try await Self.run(process, timeout: timeout)
        guard status == 0 else {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)).map { String($0.utf8.dropFirst(Int(start))) ?? "" } ?? ""
            let log = (try? String(contentsOfFile: logFile, encoding: .utf8)).map { $0.split(separator: "\n").suffix(15).joined(separator: "\n") } ?? ""
            throw PostgresServerError(description: "\(program) \(arguments.joined(separator: " ")) failed (status \(status)):\n\(text)\nserver log:\n\(log)")
        }
    }

    /// Runs `process` without blocking a thread; terminates it after `timeout` seconds.
    private static func run(_ process: Process, timeout: Double) async throws -> Int32 {
        let (ended, continuation) = AsyncStream.makeStream(of: Int32.self)
        process.terminationHandler = { process in
            continuation.yield(process.terminationStatus)
            continuation.finish()
        }
        try process.run()
        let watchdog = Task {
            try await Task.sleep(for: .seconds(timeout))
            if process.isRunning { process.terminate() }
        }
        defer { watchdog.cancel() }
        for await status in ended { return status }
        return -1
    }

    /// The newest `/usr/lib/postgresql/<version>/bin` with initdb, pg_ctl and postgres.
    private static func findBinaries() throws -> String {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap { name in Double(name).map { (name, $0) } }
            .sorted { $0.1 > $1.1 }
        for (name, _) in versions {
            let bin = "\(root)/\(name)/bin"
            if ["initdb", "pg_ctl", "postgres", "createdb"].allSatisfy({ FileManager.default.isExecutableFile(atPath: bin + "/" + $0) }) {
                return bin
            }
        }
        throw PostgresServerError(description: "PostgreSQL's server programs (initdb, pg_ctl, postgres) are not installed "
                                  + "under \(root)/*/bin: run scripts/install-deps (it installs Debian's postgresql package)")
    }

    /// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
    private static func freePort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw PostgresServerError(description: "socket: \(String(cString: strerror(errno)))") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(socket, address, length) == 0 && getsockname(socket, address, &length) == 0
            }
        }
        guard bound else { throw PostgresServerError(description: "bind 127.0.0.1:0: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    // MARK: Clean-up at exit

    private static let sharedServer = Mutex<Task<PostgresServer, any Error>?>(nil)
    /// Servers not destroyed yet, stopped when the process exits: (data directory, directory, pg_ctl as postgres).
    private static let live = Mutex<[String: (data: String, directory: String, pgCtl: String, asPostgres: Bool)]>([:])
    private static let exitHook: Void = { _ = atexit { PostgresServer.cleanUpAtExit() } }()

    private static func register(_ server: PostgresServer) {
        _ = exitHook
        live.withLock {
            $0[server.directory] = (server.dataDirectory, server.directory, server.binaries + "/pg_ctl", server.runsAsPostgresUser)
        }
    }

    private static func unregister(_ server: PostgresServer) {
        _ = live.withLock { $0.removeValue(forKey: server.directory) }
    }

    /// Fast shutdown of every server still registered, then their directories go.
    private static func cleanUpAtExit() {
        let servers = live.withLock { live in
            defer { live.removeAll() }
            return Array(live.values)
        }
        for server in servers {
            let process = Process()
            let arguments = ["-D", server.data, "-m", "fast", "-w", "-t", "30", "stop"]
            if server.asPostgres {
                process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
                process.arguments = ["-u", "postgres", "--", server.pgCtl] + arguments
            } else {
                process.executableURL = URL(fileURLWithPath: server.pgCtl)
                process.arguments = arguments
            }
            process.currentDirectoryURL = URL(fileURLWithPath: "/")
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            if (try? process.run()) != nil { process.waitUntilExit() }
            try? FileManager.default.removeItem(atPath: server.directory)
        }
    }
}
