import Foundation
import SottoAudio
import SottoModem
import Synchronization
import Testing

/// A `sotto` process running in the background, its standard output collected line by line.
final class BackgroundSotto: Sendable {
    let process: Process
    private let lines = Mutex<[String]>([])
    private let errors = Mutex<String>("")

    /// Runs `sotto` with `arguments`, or `launcher` (e.g. `ip`, for `ip netns exec NS sotto ...`) with them.
    init(_ arguments: [String], environment: [String: String] = [:], launcher: String? = nil) throws {
        process = Process()
        process.executableURL = launcher.map { URL(fileURLWithPath: $0) } ?? Sotto.executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        out.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            guard !data.isEmpty else { handle.readabilityHandler = nil; return }
            let text = String(decoding: data, as: UTF8.self)
            self.lines.withLock { $0 += text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
        }
        err.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            guard !data.isEmpty else { handle.readabilityHandler = nil; return }
            self.errors.withLock { $0 += String(decoding: data, as: UTF8.self) }
        }
        try process.run()
    }

    var output: [String] { lines.withLock { $0 } }
    var standardError: String { errors.withLock { $0 } }

    /// Waits (at most `timeout` s) for a line of output that satisfies `condition`.
    func line(timeout: Double, where condition: (String) -> Bool) async -> String? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if let line = output.first(where: condition) { return line }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return output.first(where: condition)
    }

    /// SIGINT, then waits (at most `timeout` s) for the process to end; killed after that.
    func interrupt(timeout: Double = 10) async {
        guard process.isRunning else { return }
        process.interrupt()
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// The exchange between machines, from outside: a `sotto serve` process, a publisher process whose token
/// is played through an ALSA PCM, the recording passed through the simulated room, and subscriber processes
/// that hear it through ALSA PCMs of their own (the paced fault-injection plugin: real libasound, no mocks).
@Suite(.serialized) struct ServiceEndToEndTests {
    static let message = "The Night Watch, Rembrandt, 1642: 37B"

    /// Runs a `sotto admin` command and returns its first output line.
    func admin(_ arguments: [String], store: String) throws -> String {
        let result = try Sotto.run(["admin"] + arguments + ["--store", "sqlite:" + store], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.split(separator: "\n").first.map(String.init) ?? ""
    }

    /// The tokens a raw S16_LE mono 48 kHz file holds.
    static func tokens(inRaw url: URL) throws -> [[UInt8]] {
        let data = (try? Data(contentsOf: url)) ?? Data()
        let samples = FilePluginRig.samples(data).map { Float($0) / 32_768 }
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: [.standard])
        return (decoder.process(samples) + decoder.finish()).map(\.token)
    }

    @Test(.timeLimit(.minutes(3))) func aMessageIsFoundThroughTheServiceAndARoomThenLostWhenUnpublished() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("exchange.sqlite").path
        _ = try admin(["project", "create", "museum"], store: store)
        _ = try admin(["project", "create", "elsewhere"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)
        let otherKey = try admin(["key", "create", "elsewhere"], store: store)
        #expect(key.hasPrefix("sotto_") && otherKey.hasPrefix("sotto_") && key != otherKey)

        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")

        // The ALSA PCMs of each "machine": the fault plugin paced to the sample clock.
        let plugin = FilePluginRig.faultPlugin.path
        let publisherOut = directory.appendingPathComponent("publisher-speaker.raw")
        let room = directory.appendingPathComponent("room-microphone.raw")
        var asoundrc = "pcm_type.sottofault { lib \"\(plugin)\" }\n"
        asoundrc += "pcm.a_speaker { type sottofault; rate 48000; outfile \"\(publisherOut.path)\" }\n"
        asoundrc += "pcm.a_microphone { type sottofault; rate 48000 }\n"
        for name in ["b", "c", "d"] {
            asoundrc += "pcm.\(name)_microphone { type sottofault; rate 48000; infile \"\(room.path)\" }\n"
            asoundrc += "pcm.\(name)_speaker { type sottofault; rate 48000; outfile \"\(directory.path)/\(name)-speaker.raw\" }\n"
        }
        let configuration = directory.appendingPathComponent("asoundrc")
        try Data(asoundrc.utf8).write(to: configuration)
        let alsa = ["ALSA_CONFIG_PATH": configuration.path]

        // A publishes a 37-byte message with a namespace and type and plays its token.
        let publisher = try BackgroundSotto(["publish", "--server", address, "--api-key", key, "--namespace", "museum", "--type", "exhibit",
                                             "--text", Self.message, "--ttl", "120", "--device", "a_speaker",
                                             "--capture-device", "a_microphone", "--interval", "1", "--jitter", "0.25"], environment: alsa)
        var played: [[UInt8]] = []
        let playDeadline = Date(timeIntervalSinceNow: 30)
        while played.count < 3 && Date() < playDeadline {
            try await Task.sleep(for: .milliseconds(500))
            played = try Self.tokens(inRaw: publisherOut)
        }
        #expect(played.count >= 3, "publisher played \(played.count) frames: \(publisher.standardError)")
        let token = try #require(played.first)
        #expect(token.first == 0x10 && token.count == 9, "an 8-byte exchange token behind its kind byte")

        // What A's speaker played, through a room: reverberation, noise, another clock.
        let played48k = FilePluginRig.samples(try Data(contentsOf: publisherOut)).map { Float($0) / 32_768 }
        let speakerWav = directory.appendingPathComponent("speaker.wav").path, roomWav = directory.appendingPathComponent("room.wav").path
        try AudioFile.write(played48k, sampleRate: 48_000, to: speakerWav, format: .wav16)
        let simulate = try Sotto.run(["simulate", speakerWav, roomWav, "--rt60", "0.4", "--distance", "2", "--snr", "15", "--ppm", "120", "--seed", "9"], timeout: 60)
        #expect(simulate.status == 0, "\(simulate.stderr)")
        let heard = try AudioFileReader(path: roomWav).readAll()
        try FilePluginRig.raw(heard).write(to: room)

        // B listens for museum/exhibit; C for another type; D is in another project.
        func subscriber(_ name: String, key: String, type: String) throws -> BackgroundSotto {
            try BackgroundSotto(["subscribe", "--server", address, "--api-key", key, "--namespace", "museum", "--type", type,
                                 "--device", "\(name)_microphone", "--playback-device", "\(name)_speaker", "--format", "json",
                                 "--ttl", "120", "--lost-timeout", "60"], environment: alsa)
        }
        let b = try subscriber("b", key: key, type: "exhibit")
        let c = try subscriber("c", key: key, type: "shop")
        let d = try subscriber("d", key: otherKey, type: "exhibit")
        defer { for process in [b, c, d, publisher] { process.process.terminate() } }

        let contentHex = Array(Self.message.utf8).map { String(format: "%02x", $0) }.joined()
        let found = await b.line(timeout: 40) { $0.contains("\"found\"") }
        let foundLine = try #require(found, "B found nothing: \(b.standardError)")
        #expect(foundLine.contains(contentHex) && foundLine.contains("\"museum\"") && foundLine.contains("\"exhibit\""), "\(foundLine)")

        // A unpublishes (Ctrl-C): B loses the message at once, not after its lost timeout (60 s: anything
        // within half of it is the unpublication, however busy the machine).
        let unpublished = Date()
        await publisher.interrupt()
        #expect(publisher.process.terminationStatus == 0, "\(publisher.standardError)")
        let lost = await b.line(timeout: 30) { $0.contains("\"lost\"") }
        #expect(lost?.contains(contentHex) == true, "B did not lose the message: \(b.output)")
        #expect(Date().timeIntervalSince(unpublished) < 30)

        for process in [b, c, d] { await process.interrupt() }
        #expect(b.output.filter { $0.contains("\"found\"") }.count == 1, "\(b.output)")
        #expect(!c.output.contains { $0.contains("\"found\"") }, "another type found something: \(c.output)")
        #expect(!d.output.contains { $0.contains("\"found\"") }, "another project found something: \(d.output)")
        await serve.interrupt()
    }
}

/// Test hosts in network namespaces made by the test (`ip netns`, veth pairs): a service host and two
/// client hosts with addresses of the documentation range 192.0.2.0/24, which exist only inside them.
struct NetworkNamespaces {
    let service: String, publisher: String, subscriber: String
    static let serviceAddressForPublisher = "192.0.2.1", serviceAddressForSubscriber = "192.0.2.5"

    /// Whether namespaces can be made here (root and iproute2).
    static let available: Bool = {
        let name = "sotto-probe-\(getpid())"
        defer { _ = try? run(["ip", "netns", "del", name]) }
        return (try? run(["ip", "netns", "add", name])) == 0
    }()

    @discardableResult
    static func run(_ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    init() throws {
        let tag = "\(getpid() % 100_000)"
        service = "sotto-s\(tag)"; publisher = "sotto-a\(tag)"; subscriber = "sotto-b\(tag)"
        for namespace in [service, publisher, subscriber] {
            try Self.run(["ip", "netns", "add", namespace])
            try Self.run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        }
        for (client, inside, outside, prefix) in [(publisher, "va\(tag)", "sa\(tag)", "192.0.2.0"), (subscriber, "vb\(tag)", "sb\(tag)", "192.0.2.4")] {
            let base = prefix.split(separator: ".").last.flatMap { Int($0) } ?? 0
            try Self.run(["ip", "link", "add", outside, "netns", service, "type", "veth", "peer", "name", inside, "netns", client])
            try Self.run(["ip", "-n", service, "addr", "add", "192.0.2.\(base + 1)/30", "dev", outside])
            try Self.run(["ip", "-n", client, "addr", "add", "192.0.2.\(base + 2)/30", "dev", inside])
            try Self.run(["ip", "-n", service, "link", "set", outside, "up"])
            try Self.run(["ip", "-n", client, "link", "set", inside, "up"])
        }
    }

    func remove() {
        for namespace in [service, publisher, subscriber] { _ = try? Self.run(["ip", "netns", "del", namespace]) }
    }
}

extension ServiceEndToEndTests {
    @Test(.enabled(if: NetworkNamespaces.available, "needs root and iproute2 to make network namespaces"), .timeLimit(.minutes(2)))
    func machinesInSeparateNetworkNamespacesExchangeOverTLS() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try NetworkNamespaces()
        defer { hosts.remove() }
        // A certificate for the service host's two addresses, made here.
        let certificate = directory.appendingPathComponent("cert.pem").path, privateKey = directory.appendingPathComponent("key.pem").path
        let openssl = try NetworkNamespaces.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=sotto-test",
                                                 "-addext", "subjectAltName=IP:192.0.2.1,IP:192.0.2.5", "-keyout", privateKey, "-out", certificate])
        try #require(openssl == 0, "openssl could not make a certificate")
        let store = directory.appendingPathComponent("exchange.sqlite").path
        _ = try admin(["project", "create", "museum"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)

        // Plaintext beyond loopback is refused before anything listens.
        let refused = try Sotto.run(["serve", "--listen", "192.0.2.1:0", "--store", "sqlite:" + store], timeout: 20)
        #expect(refused.status != 0 && refused.stderr.contains("--tls-cert"), "\(refused.stderr)")

        let executable = Sotto.executable.path
        let serve = try BackgroundSotto(["netns", "exec", hosts.service, executable, "serve", "--listen", "0.0.0.0:0", "--store", "sqlite:" + store,
                                         "--tls-cert", certificate, "--tls-key", privateKey], launcher: "/usr/sbin/ip")
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let port = try #require(listening?.split(separator: ":").last.map(String.init), "\(serve.standardError)")

        let message = "A message that crossed two network namespaces over TLS"
        let speaker = directory.appendingPathComponent("a.wav").path
        let publisher = try BackgroundSotto(["netns", "exec", hosts.publisher, executable, "publish",
                                             "--server", "sottos://\(NetworkNamespaces.serviceAddressForPublisher):\(port)", "--ca", certificate,
                                             "--api-key", key, "--namespace", "museum", "--type", "exhibit", "--text", message,
                                             "--ttl", "300", "--out", speaker], launcher: "/usr/sbin/ip")
        defer { publisher.process.terminate() }
        let deadline = Date(timeIntervalSinceNow: 30)
        while !FileManager.default.fileExists(atPath: speaker) && Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
        try #require(FileManager.default.fileExists(atPath: speaker), "\(publisher.standardError)")
        // The first 4 s of what A plays (the file holds its whole TTL): quick to decode even in a debug build
        // beside other tests, so B hears A while A's publication lives.
        let heard = directory.appendingPathComponent("b.wav").path
        try AudioFile.write(Array(try AudioFileReader(path: speaker).readAll().prefix(4 * 48_000)), sampleRate: 48_000, to: heard, format: .wav16)

        let subscriber = try Sotto.run([], environment: [:], timeout: nil, launcher: "/usr/sbin/ip", prefix: [
            "netns", "exec", hosts.subscriber, executable, "subscribe", "--server", "sottos://\(NetworkNamespaces.serviceAddressForSubscriber):\(port)",
            "--ca", certificate, "--api-key", key, "--namespace", "museum", "--type", "exhibit", "--input", heard,
            "--lost-timeout", "2", "--format", "json", "--ttl", "60"])
        let contentHex = Array(message.utf8).map { String(format: "%02x", $0) }.joined()
        #expect(subscriber.status == 0, "\(subscriber.stderr)")
        #expect(subscriber.stdout.contains("\"found\"") && subscriber.stdout.contains(contentHex), "\(subscriber.stdout) \(subscriber.stderr)")
        await publisher.interrupt()
        await serve.interrupt()
    }
}

extension ServiceEndToEndTests {
    /// `subscribe --ttl` on a device prints `expired` when the TTL elapses and exits (it used to run on).
    @Test(.timeLimit(.minutes(1))) func subscribeOnADeviceEndsWhenItsTTLExpires() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let configuration = directory.appendingPathComponent("asoundrc")
        try Data("pcm_type.sottofault { lib \"\(FilePluginRig.faultPlugin.path)\" }\npcm.quiet_microphone { type sottofault; rate 48000 }\n".utf8)
            .write(to: configuration)
        let result = try Sotto.run(["subscribe", "--ttl", "2", "--device", "quiet_microphone"],
                                   environment: ["ALSA_CONFIG_PATH": configuration.path], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("expired"), "\(result.stdout)")  // and it ended by itself (status 0, not the time-out)
    }
}

extension ServiceEndToEndTests {
    /// `sotto admin`: keys are listed without their secrets and can be revoked; beacons are registered with
    /// attachments within their limits; bad input is refused with a message and a non-zero exit.
    @Test func adminManagesKeysAndBeacons() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        #expect(try Sotto.run(["admin", "project", "create", "museum", "--store", store]).status == 0)
        let duplicate = try Sotto.run(["admin", "project", "create", "museum", "--store", store])
        #expect(duplicate.status != 0 && duplicate.stderr.contains("exists already"), "\(duplicate.stderr)")
        let key = try Sotto.run(["admin", "key", "create", "museum", "--label", "kiosk", "--store", store]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = key.split(separator: "_")
        #expect(parts.count == 3 && parts[0] == "sotto" && parts[2].count == 64, "\(key)")
        let listed = try Sotto.run(["admin", "key", "list", "museum", "--store", store]).stdout
        #expect(listed.contains(String(parts[1])) && listed.contains("active") && !listed.contains(String(parts[2])), "secrets are never listed: \(listed)")
        #expect(try Sotto.run(["admin", "key", "revoke", String(parts[1]), "--store", store]).status == 0)
        #expect(try Sotto.run(["admin", "key", "list", "--store", store]).stdout.contains("revoked"))
        #expect(try Sotto.run(["admin", "key", "create", "nowhere", "--store", store]).status != 0)

        #expect(try Sotto.run(["admin", "beacon", "register", "museum", "0xbeac0001", "--public", "--store", store]).status == 0)
        #expect(try Sotto.run(["admin", "beacon", "attach", "0xbeac0001", "--namespace", "museum", "--type", "room", "--text", "Gallery 2", "--store", store]).status == 0)
        let tooLarge = try Sotto.run(["admin", "beacon", "attach", "0xbeac0001", "--namespace", "museum", "--type", "room",
                                      "--hex", String(repeating: "ab", count: 1_025), "--store", store])
        #expect(tooLarge.status != 0 && tooLarge.stderr.contains("1024"), "\(tooLarge.stderr)")
        let unknown = try Sotto.run(["admin", "beacon", "attach", "0x0102", "--namespace", "museum", "--type", "room", "--text", "x", "--store", store])
        #expect(unknown.status != 0 && unknown.stderr.contains("no beacon"), "\(unknown.stderr)")
        let beacons = try Sotto.run(["admin", "beacon", "list", "--store", store]).stdout
        #expect(beacons.contains("beac0001") && beacons.contains("public") && beacons.contains("Gallery 2"), "\(beacons)")
        // No PostgreSQL on port 1: a clear error within the URL's connect timeout, not a hang.
        let postgres = try Sotto.run(["admin", "project", "list", "--store", "postgres://postgres@127.0.0.1:1/sotto?connect_timeout=2"])
        #expect(postgres.status != 0 && postgres.stderr.contains("cannot reach PostgreSQL"), "\(postgres.stderr)")
    }
}
