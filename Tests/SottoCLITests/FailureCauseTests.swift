import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing

/// Failures reported fast and with their cause, from outside: real processes, real sockets on loopback,
/// real files. Every run is bounded (the time-outs are generous: the causes come in well under a second on
/// an idle machine, where the old client waited 15 s and said only "not connected").
@Suite(.serialized) struct FailureCauseTests {
    /// A TCP socket bound to a free loopback port, listening (backlog 8) when `listening`; the caller closes it.
    static func loopbackSocket(listening: Bool) throws -> (socket: Int32, port: Int) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socket >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ready = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && (!listening || listen(socket, 8) == 0) && getsockname(socket, $0, &length) == 0
            }
        }
        if !ready { close(socket) }
        try #require(ready)
        return (socket, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A loopback port nobody listens on (bound, then closed).
    static func freePort() throws -> Int {
        let (socket, port) = try loopbackSocket(listening: false)
        close(socket)
        return port
    }

    /// `subscribe` through the service at `server` (a recording as input: no device needed); the probe
    /// runs before the key is ever sent, so any key does.
    static func subscribe(_ server: [String]) throws -> Sotto.Result {
        try Sotto.run(["subscribe"] + server + ["--api-key", "sotto_test_key", "--input", "/dev/null", "--ttl", "1"], timeout: 30)
    }

    @Test func aMisspeltSchemeIsAUsageErrorAtOnce() throws {
        for server in ["sotto//127.0.0.1:7457", "sotto:/127.0.0.1:7457", "ftp://127.0.0.1:7457"] {
            let started = Date()
            let result = try Self.subscribe(["--server", server])
            #expect(result.status == 64, "\(server): \(result.status) \(result.stderr)")
            #expect(result.stderr.hasPrefix("error: --server \(server): "), "\(server): \(result.stderr)")
            #expect(result.stderr.contains("sotto://HOST:PORT"), "\(server): \(result.stderr)")
            // Refused before any connection: nothing about connecting is said.
            #expect(!result.stderr.contains("connecting"), "\(server): \(result.stderr)")
            #expect(Date().timeIntervalSince(started) < 14, "\(server): it waited as the old client did")
        }
    }

    @Test func aPortNobodyListensOnIsReportedAsRefused() throws {
        let port = try Self.freePort()
        let started = Date()
        let result = try Self.subscribe(["--server", "127.0.0.1:\(port)"])
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("matcher: connecting to 127.0.0.1:\(port) (plaintext)"), "\(result.stderr)")
        #expect(result.stderr.contains("error: matcher: 127.0.0.1:\(port) refused the connection"), "\(result.stderr)")
        #expect(Date().timeIntervalSince(started) < 14, "it waited as the old client did: \(result.stderr)")
    }

    @Test func aMissingUnixSocketIsReportedAsSuch() throws {
        let result = try Self.subscribe(["--server", "unix:/nonexistent-\(UUID().uuidString).sock"])
        #expect(result.status == 2 && result.stderr.contains("no socket at /nonexistent-"), "\(result.status) \(result.stderr)")
    }

    @Test func anUnknownHostIsReportedAsADNSFailure() throws {
        // .invalid never resolves (RFC 2606); --insecure: plaintext beyond loopback is otherwise refused first.
        let result = try Self.subscribe(["--server", "no-such-host.invalid:7457", "--insecure"])
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("cannot resolve host 'no-such-host.invalid' (DNS)"), "\(result.stderr)")
    }

    @Test func aServerThatSaysNothingIsReportedAsSilent() throws {
        // A listener that accepts (the kernel does, from its backlog) and never answers.
        let (listener, port) = try Self.loopbackSocket(listening: true)
        defer { close(listener) }
        let result = try Self.subscribe(["--server", "127.0.0.1:\(port)"])
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("accepted the connection but said nothing within 5 s"), "\(result.stderr)")
    }

    @Test(.timeLimit(.minutes(2))) func tlsAgainstPlaintextAndTheReverseAreReportedAsSuch() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let certificate = directory.appendingPathComponent("cert.pem").path, privateKey = directory.appendingPathComponent("key.pem").path
        let openssl = try await offThePool { try NetworkNamespaces.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", "/CN=sotto-test", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", privateKey, "-out", certificate]) }
        try #require(openssl == 0, "openssl could not make a certificate")
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path

        let secure = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", store, "--tls-cert", certificate, "--tls-key", privateKey])
        defer { secure.process.terminate() }
        let plain = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + directory.appendingPathComponent("plain.sqlite").path])
        defer { plain.process.terminate() }
        let securePort = try #require(await secure.line(timeout: 30) { $0.hasPrefix("listening on ") }?.split(separator: ":").last.map(String.init), "\(secure.standardError)")
        let plainPort = try #require(await plain.line(timeout: 30) { $0.hasPrefix("listening on ") }?.split(separator: ":").last.map(String.init), "\(plain.standardError)")

        let plaintextToTLS = try await offThePool { try Self.subscribe(["--server", "sotto://127.0.0.1:\(securePort)"]) }
        #expect(plaintextToTLS.status == 2, "\(plaintextToTLS.status) \(plaintextToTLS.stderr)")
        #expect(plaintextToTLS.stderr.contains("127.0.0.1:\(securePort) speaks TLS: connect with sottos://"), "\(plaintextToTLS.stderr)")

        let tlsToPlaintext = try await offThePool { try Self.subscribe(["--server", "sottos://127.0.0.1:\(plainPort)", "--ca", certificate]) }
        #expect(tlsToPlaintext.status == 2, "\(tlsToPlaintext.status) \(tlsToPlaintext.stderr)")
        #expect(tlsToPlaintext.stderr.contains("matcher: connecting to 127.0.0.1:\(plainPort) (TLS)"), "\(tlsToPlaintext.stderr)")
        #expect(tlsToPlaintext.stderr.contains("answered in plaintext, not TLS") || tlsToPlaintext.stderr.contains("closed the connection on the TLS handshake"),
                "\(tlsToPlaintext.stderr)")

        // A certificate the client does not trust (self-signed, no --ca: the system's roots) is reported as such at
        // once (the client's retries took 15 s and said "not connected"), by publish/subscribe and by load alike.
        for command in [["subscribe"], ["load"]] {
            let started = Date()
            let untrusted = try await offThePool {
                command == ["load"]
                    ? try Sotto.run(["load", "--server", "sottos://127.0.0.1:\(securePort)", "--api-key", "sotto_test_key", "--sessions", "1", "--duration", "1"], timeout: 30)
                    : try Self.subscribe(["--server", "sottos://127.0.0.1:\(securePort)"])
            }
            #expect(untrusted.status == 2, "\(command): \(untrusted.status) \(untrusted.stderr)")
            #expect(untrusted.stderr.contains("matcher: connecting to 127.0.0.1:\(securePort) (TLS)"), "\(command): \(untrusted.stderr)")
            #expect(untrusted.stderr.contains("error: matcher: 127.0.0.1:\(securePort): its certificate failed verification: not signed by a trusted CA"),
                    "\(command): \(untrusted.stderr)")
            #expect(Date().timeIntervalSince(started) < 14, "\(command): it waited as the old client did: \(untrusted.stderr)")
        }

        // The matching modes get past the probe: the service answers (the key is unknown there).
        let matching = try await offThePool { try Self.subscribe(["--server", "sottos://127.0.0.1:\(securePort)", "--ca", certificate]) }
        #expect(!matching.stderr.contains("speaks TLS") && !matching.stderr.contains("plaintext, not TLS"), "\(matching.stderr)")
        #expect(matching.status != 0, "an unknown key: \(matching.stderr)")
    }

    /// sotto load takes the same first contact: a refused port is said as such, at once.
    @Test func loadReportsARefusedPortAsSuch() throws {
        let port = try Self.freePort()
        let result = try Sotto.run(["load", "--server", "127.0.0.1:\(port)", "--api-key", "sotto_test_key", "--sessions", "1", "--duration", "1"], timeout: 30)
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("matcher: connecting to 127.0.0.1:\(port) (plaintext)"), "\(result.stderr)")
        #expect(result.stderr.contains("error: matcher: 127.0.0.1:\(port) refused the connection"), "\(result.stderr)")
    }

    @Test func aRefusedPostgreSQLIsReportedQuicklyWithItsCause() throws {
        let port = try Self.freePort()
        let started = Date()
        let result = try Sotto.run(["admin", "project", "list", "--store", "postgres://sotto@127.0.0.1:\(port)/sotto"], timeout: 30)
        #expect(result.status == 2, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("error: the store is unavailable: cannot reach PostgreSQL at 127.0.0.1:\(port): connection refused"), "\(result.stderr)")
        #expect(Date().timeIntervalSince(started) < 9, "it waited for the pool's time-out: \(result.stderr)")
    }

    @Test func audioInputsThatCannotBeReadSayWhy() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("nope.wav").path
        let empty = directory.appendingPathComponent("empty.wav").path
        try #require(FileManager.default.createFile(atPath: empty, contents: Data()))
        let cases: [(arguments: [String], input: Data?, message: String)] = [
            (["decode", missing], nil, "error: cannot open \(missing): no such file\n"),
            (["decode", directory.path], nil, "error: cannot open \(directory.path): a directory, not an audio file\n"),
            (["decode", empty], nil, "error: \(empty) is empty: it holds no audio samples\n"),
            (["decode", "-"], Data(), "error: standard input is empty: it holds no audio samples (nothing was piped in?)\n"),
        ]
        for (arguments, input, message) in cases {
            let result = try Sotto.run(arguments, timeout: 30, input: input)
            #expect(result.status == 2, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr == message, "\(arguments): \(result.stderr)")
        }
    }

    @Test func aFileWithAHeaderGivenARawRateIsRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let wav = directory.appendingPathComponent("token.wav").path
        #expect(try Sotto.run(["send", "0x0102030405060708", "--out", wav]).status == 0)
        let file = try Sotto.run(["decode", wav, "--rate", "44100"], timeout: 30)
        #expect(file.status == 64, "\(file.status) \(file.stderr)")
        #expect(file.stderr.contains("\(wav) is a WAV file with its own header: --rate, --encoding and --channels are for headerless PCM only"), "\(file.stderr)")
        #expect(file.stdout.isEmpty)
        // The same on a pipe, whose head is peeked and left for the reader.
        let piped = try Sotto.run(["decode", "-", "--rate", "48000"], timeout: 30, input: try Data(contentsOf: URL(fileURLWithPath: wav)))
        #expect(piped.status == 64 && piped.stderr.contains("standard input is a WAV file with its own header"), "\(piped.status) \(piped.stderr)")
        // Without --rate the header is read.
        let decoded = try Sotto.run(["decode", wav, "--format", "hex"], timeout: 30)
        #expect(decoded.status == 0 && decoded.stdout == "0102030405060708\n", "\(decoded.stdout) \(decoded.stderr)")
    }
}

/// Runs blocking work (a child process waited for) on a thread of its own, never on the cooperative pool.
func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
