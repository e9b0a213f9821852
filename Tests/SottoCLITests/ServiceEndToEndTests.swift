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

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        process = Process()
        process.executableURL = Sotto.executable
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
                                 "--ttl", "120"], environment: alsa)
        }
        let b = try subscriber("b", key: key, type: "exhibit")
        let c = try subscriber("c", key: key, type: "shop")
        let d = try subscriber("d", key: otherKey, type: "exhibit")
        defer { for process in [b, c, d, publisher] { process.process.terminate() } }

        let contentHex = Array(Self.message.utf8).map { String(format: "%02x", $0) }.joined()
        let found = await b.line(timeout: 40) { $0.contains("\"found\"") }
        let foundLine = try #require(found, "B found nothing: \(b.standardError)")
        #expect(foundLine.contains(contentHex) && foundLine.contains("\"museum\"") && foundLine.contains("\"exhibit\""), "\(foundLine)")

        // A unpublishes (Ctrl-C): B loses the message at once, not after its lost timeout.
        let unpublished = Date()
        await publisher.interrupt()
        #expect(publisher.process.terminationStatus == 0, "\(publisher.standardError)")
        let lost = await b.line(timeout: 8) { $0.contains("\"lost\"") }
        #expect(lost?.contains(contentHex) == true, "B did not lose the message: \(b.output)")
        #expect(Date().timeIntervalSince(unpublished) < 8)

        for process in [b, c, d] { await process.interrupt() }
        #expect(b.output.filter { $0.contains("\"found\"") }.count == 1, "\(b.output)")
        #expect(!c.output.contains { $0.contains("\"found\"") }, "another type found something: \(c.output)")
        #expect(!d.output.contains { $0.contains("\"found\"") }, "another project found something: \(d.output)")
        await serve.interrupt()
    }
}
