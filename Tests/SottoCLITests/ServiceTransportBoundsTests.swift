import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GRPCCore
import GRPCNIOTransportHTTP2
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeWire
import Synchronization
import Testing

/// `sotto serve` under abuse from outside, as issue 35 probed it: silent TCP connections (beyond a lowered
/// descriptor limit), connections that send only the HTTP/2 preface, and thousands of streams that never say
/// Hello. The process's descriptors, CPU and memory are read from /proc; loopback only.
@Suite(.serialized, .timeLimit(.minutes(2))) struct ServiceTransportBoundsTests {
    /// A `sotto serve` on 127.0.0.1 with a project and key, its metrics endpoint, and `ulimit -n` if given.
    final class Node: Sendable {
        let process: BackgroundSotto
        let directory: URL
        let port: Int
        let http: String
        let key: String
        var pid: Int32 { process.process.processIdentifier }

        init(descriptorLimit: Int? = nil, flags: [String]) async throws {
            directory = try temporaryDirectory()
            let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
            #expect(try Sotto.run(["admin", "project", "create", "museum", "--store", store], timeout: 30).status == 0)
            key = try Sotto.run(["admin", "key", "create", "museum", "--rate", "1000", "--burst", "1000", "--store", store], timeout: 30)
                .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let arguments = ["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--store", store] + flags
            if let descriptorLimit {
                process = try BackgroundSotto(["-c", "ulimit -n \(descriptorLimit) && exec \"$0\" \"$@\"", Sotto.executable.path] + arguments,
                                              launcher: "/bin/sh")
            } else {
                process = try BackgroundSotto(arguments)
            }
            let listening = await process.line(timeout: 30) { $0.hasPrefix("listening on ") }
            let httpLine = await process.line(timeout: 5) { $0.hasPrefix("http on ") }
            guard let listening, let httpLine, let port = Int(listening.split(separator: ":").last ?? "") else {
                throw Failure("the service did not start: \(process.standardError)")
            }
            self.port = port
            http = String(httpLine.dropFirst("http on ".count))
        }

        /// A client session (at most `timeout` s to get its Welcome).
        func manager(timeout: Double = 10) async throws -> MessageManager {
            let link = try RemoteMatcher(options: .init(endpoint: .tcp(host: "127.0.0.1", port: port), apiKey: key))
            let manager = MessageManager(link: link, appID: "abuse-test", lostTimeout: 5)
            try await manager.connect(timeout: timeout)
            return manager
        }

        /// A metric without labels from /metrics.
        func metric(_ name: String) async throws -> Double? {
            var request = URLRequest(url: URL(string: "http://\(http)/metrics")!)
            request.timeoutInterval = 5
            let (data, _) = try await URLSession(configuration: .ephemeral).data(for: request)
            for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
                let parts = line.split(separator: " ")
                if parts.count >= 2, parts[0] == name { return Double(parts[1]) }
            }
            return nil
        }

        func stop() async {
            await process.interrupt()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    @Test func silentConnectionsBeyondTheDescriptorLimitAreShedAndClosed() async throws {
        // 200 descriptors: at most 136 connections (64 kept for the store, the runtime and the metrics port).
        let node = try await Node(descriptorLimit: 200, flags: ["--preface-timeout", "4", "--idle-timeout", "4"])
        defer { Task { await node.stop() } }
        let baseline = Proc.descriptors(node.pid)
        // 300 connections that send nothing, opened as fast as the kernel takes them.
        let silent = Sockets.open(300, port: node.port)
        defer { silent.closeAll() }
        #expect(silent.count >= 280, "opened \(silent.count)")
        try await Task.sleep(for: .milliseconds(500))
        #expect(node.process.process.isRunning, "the service survived: \(node.process.standardError)")
        let held = Proc.descriptors(node.pid)
        #expect(held <= 200, "descriptors \(held) (baseline \(baseline))")
        #expect(silent.openCount() <= 140, "the service holds at most its cap: \(silent.openCount()) still open")
        // A legitimate client still gets its Welcome, and the service is not spinning.
        let manager = try await node.manager()
        let cpu = Proc.cpuFraction(node.pid, over: 1)
        #expect(cpu < 0.3, "CPU \(cpu) of a core while 300 silent connections wait")
        // The silent ones are closed once the preface time-out passes; the legitimate session stays.
        #expect(await Proc.eventually(8) { silent.openCount() == 0 }, "\(silent.openCount()) silent connections still open")
        #expect(Proc.descriptors(node.pid) <= baseline + 10, "descriptors back to about \(baseline): \(Proc.descriptors(node.pid))")
        #expect(try await node.metric("sotto_connections_preface_timeouts_total") ?? 0 > 0)
        #expect(try await node.metric("sotto_connections_shed_total") ?? 0 >= 100)
        #expect(try await node.metric("sotto_connections") == 1, "only the legitimate connection is left")
        #expect(try await node.metric("sotto_sessions") == 1, "the legitimate session is still held")
        await manager.close(now: 0)
        #expect(node.process.process.isRunning)
    }

    /// `accept` itself failing for want of descriptors (EMFILE): the descriptor limit is lowered under the
    /// running service (as when something else of the process, or a smaller limit than it started with,
    /// takes the room its connection cap left), so that silent connections reach it before the cap. The
    /// service sheds idle connections, pauses accepting instead of spinning on the readable listener, says so
    /// once, counts it, and serves a legitimate client once the flood has gone.
    @Test func acceptRunningOutOfDescriptorsShedsAndLogsOnceWithoutSpinning() async throws {
        // Long preface and idle time-outs: only the shedding frees descriptors while the flood lasts.
        let node = try await Node(flags: ["--preface-timeout", "60", "--idle-timeout", "120"])
        defer { Task { await node.stop() } }
        let warm = try await node.manager()
        await warm.close(now: 0)
        let baseline = Proc.descriptors(node.pid)
        let limit = baseline + 100
        // prlimit(1) of util-linux (Glibc's prlimit(2) wrapper is not visible to Swift).
        let prlimit = Process()
        prlimit.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        prlimit.arguments = ["--pid", "\(node.pid)", "--nofile=\(limit):\(limit)"]
        try prlimit.run()
        #expect(await Proc.eventually(10) { !prlimit.isRunning })
        try #require(prlimit.terminationStatus == 0, "prlimit failed")
        // 250 connections that send nothing: about 100 fit, the rest wait in the listen backlog.
        let flood = Sockets.open(250, port: node.port)
        defer { flood.closeAll() }
        #expect(flood.count >= 240, "opened \(flood.count)")
        #expect(await Proc.eventually(10) { node.process.standardError.contains("out of file descriptors") },
                "the exhaustion is logged: \(node.process.standardError)")
        // It sheds (the oldest idle connections are closed) and stays within its limit.
        #expect(await Proc.eventually(10) { flood.openCount() < flood.count - 8 }, "no connection shed: \(flood.openCount()) open")
        #expect(Proc.descriptors(node.pid) <= limit, "descriptors \(Proc.descriptors(node.pid)), limit \(limit)")
        // Not spinning on the listener while the backlog is full of connections it cannot take.
        let cpu = await Proc.cpuFraction(node.pid, seconds: 1)
        #expect(cpu < 0.3, "CPU \(cpu) of a core while out of descriptors")
        #expect(node.process.process.isRunning, "the service survived: \(node.process.standardError)")
        // The flood ends: a legitimate client gets its Welcome.
        flood.closeAll()
        let manager = try await node.manager(timeout: 20)
        #expect(try await node.metric("sotto_descriptor_exhaustion_total") ?? 0 >= 1)
        #expect(try await node.metric("sotto_connections_shed_total") ?? 0 >= 8)
        #expect(try await node.metric("sotto_sessions") == 1)
        let lines = node.process.standardError.split(separator: "\n").filter { $0.contains("out of file descriptors") }
        #expect(lines.count == 1, "logged once: \(lines)")
        print(String(format: "EMFILE: limit %d (baseline %d), CPU %.3f of a core while out of descriptors, accept failed %.0f times, %.0f connections shed; %@",
                     limit, baseline, cpu, try await node.metric("sotto_descriptor_exhaustion_total") ?? -1,
                     try await node.metric("sotto_connections_shed_total") ?? -1, lines.first.map(String.init) ?? "no line"))
        await manager.close(now: 0)
    }

    /// The audit lines at the default log level: a failed authentication (the key's public id, never its
    /// secret) and a revocation biting on an open session (`sotto admin key revoke` on the running store).
    @Test func authenticationFailuresAndRevocationsAreAudited() async throws {
        let node = try await Node(flags: [])
        defer { Task { await node.stop() } }
        let wrong = "sotto_0123456789abcdef_notthesecret"
        let link = try RemoteMatcher(options: .init(endpoint: .tcp(host: "127.0.0.1", port: node.port), apiKey: wrong))
        let refused = MessageManager(link: link, appID: "abuse-test", lostTimeout: 5)
        await #expect(throws: (any Error).self) { try await refused.connect(timeout: 10) }
        await refused.close(now: 0)
        #expect(await Proc.eventually(5) { node.process.standardError.contains("audit: authentication failed for key 0123456789abcdef from ") },
                "\(node.process.standardError)")
        #expect(!node.process.standardError.contains("notthesecret"), "a secret in the log")

        let manager = try await node.manager()
        let id = String(node.key.split(separator: "_")[1])
        let store = "sqlite:" + node.directory.appendingPathComponent("exchange.sqlite").path
        #expect(try Sotto.run(["admin", "key", "revoke", id, "--store", store], timeout: 30).status == 0)
        #expect(await Proc.eventually(5) { node.process.standardError.contains("audit: API key \(id) revoked: cut off 1 stream here, ended 1 session") },
                "\(node.process.standardError)")
        var sessions = try await node.metric("sotto_sessions")
        for _ in 0..<50 where sessions != 0 {
            try await Task.sleep(for: .milliseconds(100))
            sessions = try await node.metric("sotto_sessions")
        }
        #expect(sessions == 0, "the revoked key's session ended")
        #expect(!node.process.standardError.contains(String(node.key.split(separator: "_")[2])), "a secret in the log")
        await manager.close(now: 0)
    }

    /// One source address holds at most its share of connections: 40 silent ones from 127.0.0.2 leave 10
    /// open (each new one takes the place of its oldest idle one), and a client from 127.0.0.1 is untouched.
    @Test func oneAddressHoldsAtMostItsConnections() async throws {
        let node = try await Node(flags: ["--max-connections-per-address", "10", "--preface-timeout", "60", "--idle-timeout", "120"])
        defer { Task { await node.stop() } }
        let manager = try await node.manager()  // from 127.0.0.1
        let flood = Sockets.open(40, port: node.port, from: "127.0.0.2")
        defer { flood.closeAll() }
        #expect(flood.count == 40, "opened \(flood.count)")
        #expect(await Proc.eventually(10) { flood.openCount() <= 10 }, "\(flood.openCount()) connections from 127.0.0.2 still open")
        #expect(try await node.metric("sotto_connections_shed_total") ?? 0 >= 30)
        #expect(try await node.metric("sotto_connections") ?? 0 <= 12, "10 from 127.0.0.2, the client's, and this request's")
        // The client from 127.0.0.1 keeps its session, and a new one from there gets in.
        #expect(try await node.metric("sotto_sessions") == 1)
        let another = try await node.manager()
        #expect(try await node.metric("sotto_sessions") == 2)
        await another.close(now: 0)
        await manager.close(now: 0)
    }

    @Test func connectionsThatOnlySendThePrefaceAreClosedWhenIdle() async throws {
        let node = try await Node(flags: ["--preface-timeout", "2", "--idle-timeout", "3"])
        defer { Task { await node.stop() } }
        // The client preface and an empty SETTINGS frame, then nothing.
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 4, 0, 0, 0, 0, 0]
        let sockets = Sockets.open(20, port: node.port, sending: preface)
        defer { sockets.closeAll() }
        try await Task.sleep(for: .seconds(2.5))
        #expect(sockets.openCount() == 20, "past the preface time-out, connections that sent the preface stay")
        #expect(await Proc.eventually(4) { sockets.openCount() == 0 }, "\(sockets.openCount()) idle connections still open")
        #expect(try await node.metric("sotto_connections_preface_timeouts_total") == 0)
    }

    @Test func thousandsOfStreamsWithoutHelloKeepMemoryBounded() async throws {
        let node = try await Node(flags: ["--hello-timeout", "3"])
        defer { Task { await node.stop() } }
        // Warm up: one session, so the baseline includes the gRPC machinery.
        let manager = try await node.manager()
        await manager.close(now: 0)
        try await Task.sleep(for: .milliseconds(500))
        let baseline = Proc.rssKiB(node.pid)
        // 20 connections × 100 streams that never send a frame.
        let tally = Tally()
        try await withThrowingTaskGroup(of: Void.self) { group in
            var clients: [GRPCClient<HTTP2ClientTransport.Posix>] = []
            for _ in 0..<20 {
                let transport = try HTTP2ClientTransport.Posix(target: .ipv4(address: "127.0.0.1", port: node.port), transportSecurity: .plaintext)
                clients.append(GRPCClient(transport: transport))
            }
            for client in clients { group.addTask { try? await client.runConnections() } }
            let sampler = Task {
                while !Task.isCancelled {
                    let rss = Proc.rssKiB(node.pid)
                    tally.peak.withLock { $0 = max($0, rss) }
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            await withTaskGroup(of: Void.self) { streams in
                for client in clients {
                    let exchange = Sotto_Exchange_V1_Exchange.Client(wrapping: client)
                    for _ in 0..<100 {
                        streams.addTask {
                            do {
                                try await exchange.session(requestProducer: { _ in try await Task.sleep(for: .seconds(20)) },
                                                           onResponse: { response in for try await _ in response.messages {} })
                            } catch let error as RPCError {
                                tally.outcomes.withLock { $0[error.code, default: 0] += 1 }
                            } catch {}
                        }
                    }
                }
            }
            sampler.cancel()
            for client in clients { client.beginGracefulShutdown() }
            group.cancelAll()
        }
        let counts = tally.outcomes.withLock { $0 }
        #expect(counts[.resourceExhausted, default: 0] >= 1_800, "\(counts)")
        #expect(counts[.deadlineExceeded, default: 0] <= 200, "\(counts)")
        let growth = (tally.peak.withLock { $0 } - baseline) / 1_024
        let after = (Proc.rssKiB(node.pid) - baseline) / 1_024
        print("streams without Hello: RSS baseline \(baseline / 1_024) MiB, peak +\(growth) MiB, after +\(after) MiB, outcomes \(counts)")
        // Before the bounds: +72 MiB, never returned (every stream held for the 10 s Hello time-out).
        #expect(growth < 50, "RSS grew \(growth) MiB for 2 000 streams without Hello")
        #expect(try await node.metric("sotto_streams_without_hello_refused_total") ?? 0 >= 1_800)
        // The node still serves.
        let again = try await node.manager()
        await again.close(now: 0)
    }
}

/// How the streams ended, and the highest RSS seen (KiB).
final class Tally: Sendable {
    let outcomes = Mutex<[RPCError.Code: Int]>([:])
    let peak = Mutex(0)
}

/// Figures of a process from /proc.
enum Proc {
    static func descriptors(_ pid: Int32) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
    }

    /// Resident set size (KiB).
    static func rssKiB(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// User plus system CPU time (clock ticks).
    static func cpuTicks(_ pid: Int32) -> Int {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14 and stime 15 (1-based over the whole line).
        return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
    }

    /// Fraction of one core the process used over `seconds`, waiting without blocking a thread.
    static func cpuFraction(_ pid: Int32, seconds: Double) async -> Double {
        let before = cpuTicks(pid), start = ContinuousClock.now
        try? await Task.sleep(for: .seconds(seconds))
        let elapsed = ContinuousClock.now - start
        return Double(cpuTicks(pid) - before) / Double(sysconf(Int32(_SC_CLK_TCK))) / max(0.1, elapsed.inSeconds)
    }

    /// Fraction of one core the process used over `seconds`.
    static func cpuFraction(_ pid: Int32, over seconds: Double) -> Double {
        let before = cpuTicks(pid)
        Thread.sleep(forTimeInterval: seconds)
        return Double(cpuTicks(pid) - before) / Double(sysconf(Int32(_SC_CLK_TCK))) / seconds
    }

    static func eventually(_ seconds: Double, _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return condition()
    }
}

/// Plain TCP sockets to 127.0.0.1 held open by the test.
final class Sockets: Sendable {
    let descriptors: [Int32]
    private init(_ descriptors: [Int32]) { self.descriptors = descriptors }

    var count: Int { descriptors.count }

    /// Opens up to `count` connections (2 s to connect each), sending `bytes` on each; from the loopback
    /// address `source` if given (any 127.x.y.z is this machine).
    static func open(_ count: Int, port: Int, sending bytes: [UInt8] = [], from source: String? = nil) -> Sockets {
        var descriptors: [Int32] = []
        for _ in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { break }
            if let source {
                var local = sockaddr_in()
                local.sin_family = sa_family_t(AF_INET)
                local.sin_addr.s_addr = inet_addr(source)
                let bound = withUnsafePointer(to: &local) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard bound == 0 else { close(fd); break }
            }
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { close(fd); continue }
            if !bytes.isEmpty { _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
            descriptors.append(fd)
        }
        return Sockets(descriptors)
    }

    /// How many the service has not closed yet (reads what it sent; 0 bytes or a reset: closed).
    func openCount() -> Int {
        var buffer = [UInt8](repeating: 0, count: 1_024)
        var open = 0
        for fd in descriptors {
            var closed = false
            while true {
                let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if n > 0 { continue }
                closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)
                break
            }
            if !closed { open += 1 }
        }
        return open
    }

    private let closed = Mutex(false)

    /// Closes every socket, once: a second call (a `defer` after an explicit close) must not close descriptor
    /// numbers the process has reused meanwhile (NIO's sockets then fail with EBADF and trap).
    func closeAll() {
        guard closed.withLock({ closed in defer { closed = true }; return !closed }) else { return }
        for fd in descriptors { close(fd) }
    }
}
