import Foundation
import SottoAudio
import Testing

/// `--earshot` on the command line, end to end: a registered beacon recorded loud and quiet (`sotto simulate`,
/// white noise at 25 and 5 dB full band: about 36 and 16 dB in band), reported to a running `sotto serve` by
/// `sotto subscribe --beacons --input`. With `--earshot` the loud recording finds the beacon's attachment and
/// the quiet one nothing (threshold 30 dB); without it the quiet one finds it too. `publish --earshot`
/// likewise: a plain subscriber that heard the publisher's token loud finds the message, quiet it does not
/// (though the token decodes).
@Suite(.serialized) struct EarshotCommandLineTests {
    func admin(_ arguments: [String], store: String) throws -> String {
        let result = try Sotto.run(["admin"] + arguments + ["--store", store], timeout: 30)
        #expect(result.status == 0, "\(arguments): \(result.stderr)")
        return result.stdout.split(separator: "\n").first.map(String.init) ?? ""
    }

    /// The found events of `subscribe --input recording` (extra arguments `options`) through the service.
    func found(_ recording: String, _ options: [String], address: String, key: String) throws -> [String] {
        let result = try Sotto.run(["subscribe", "--server", address, "--api-key", key, "--input", recording,
                                    "--format", "json", "--lost-timeout", "1", "--ttl", "20"] + options, timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init).filter { $0.contains("\"found\"") }
    }

    /// The first 4 s of `recording` after 1 s of silence (so that the noise is heard before the first frame,
    /// as the decoder measures it: a frame at a recording's first sample reads about 12 dB whatever the noise),
    /// through `sotto simulate` with white noise at `snr` dB (full band), into `out`.
    func noisy(_ recording: String, snr: Double, seed: Int, to out: String) throws {
        let padded = out + ".clean.wav"
        try AudioFile.write([Float](repeating: 0, count: 48_000) + Array(try AudioFileReader(path: recording).readAll().prefix(4 * 48_000)),
                            sampleRate: 48_000, to: padded, format: .wav16)
        let result = try Sotto.run(["simulate", padded, out, "--snr", String(snr), "--seed", String(seed)], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test(.timeLimit(.minutes(3))) func subscribeEarshotFindsOnlyALoudBeacon() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        _ = try admin(["project", "create", "museum"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)
        _ = try admin(["beacon", "register", "museum", "0x5077000000000030"], store: store)
        _ = try admin(["beacon", "attach", "0x5077000000000030", "--namespace", "museum", "--type", "room", "--text", "Gallery 30"], store: store)
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")

        let clean = directory.appendingPathComponent("beacon.wav").path
        let beacon = try Sotto.run(["beacon", "0x5077000000000030", "--duration", "4", "--interval", "1", "--jitter", "0", "--out", clean])
        #expect(beacon.status == 0, "\(beacon.stderr)")
        let loud = directory.appendingPathComponent("loud.wav").path, quiet = directory.appendingPathComponent("quiet.wav").path
        try noisy(clean, snr: 25, seed: 1, to: loud)
        try noisy(clean, snr: 5, seed: 2, to: quiet)
        let roomHex = Array("Gallery 30".utf8).map { String(format: "%02x", $0) }.joined()
        #expect(try found(loud, ["--beacons", "--earshot"], address: address, key: key).contains { $0.contains(roomHex) })
        let quietEarshot = try found(quiet, ["--beacons", "--earshot"], address: address, key: key)
        #expect(quietEarshot.isEmpty, "\(quietEarshot)")
        #expect(try found(quiet, ["--beacons"], address: address, key: key).contains { $0.contains(roomHex) })
        await serve.interrupt()
    }

    @Test(.timeLimit(.minutes(3))) func publishEarshotReachesOnlyALoudSubscriber() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        _ = try admin(["project", "create", "museum"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")

        // The publication lives while `publish` runs (its TTL); the file holds what it plays.
        let speaker = directory.appendingPathComponent("speaker.wav").path
        let publisher = try BackgroundSotto(["publish", "--server", address, "--api-key", key, "--namespace", "museum", "--type", "exhibit",
                                             "--text", "Earshot only", "--earshot", "--ttl", "90", "--interval", "1", "--jitter", "0", "--out", speaker])
        defer { publisher.process.terminate() }
        let deadline = Date(timeIntervalSinceNow: 60)
        while !publisher.standardError.contains("wrote ") && Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
        try #require(publisher.standardError.contains("wrote "), "\(publisher.standardError)")
        let loud = directory.appendingPathComponent("loud.wav").path, quiet = directory.appendingPathComponent("quiet.wav").path
        try noisy(speaker, snr: 25, seed: 3, to: loud)
        try noisy(speaker, snr: 5, seed: 4, to: quiet)
        let textHex = Array("Earshot only".utf8).map { String(format: "%02x", $0) }.joined()
        let subscription = ["--namespace", "museum", "--type", "exhibit"]
        #expect(try found(loud, subscription, address: address, key: key).contains { $0.contains(textHex) })
        let quietFound = try found(quiet, subscription, address: address, key: key)
        #expect(quietFound.isEmpty, "\(quietFound)")
        // Not for want of hearing it: the quiet recording decodes to the publisher's token at about 17 dB.
        let decoded = try Sotto.run(["decode", quiet, "--format", "json"], timeout: 60)
        #expect(decoded.stdout.split(separator: "\n").filter { $0.contains("\"token\":\"10") }.count >= 3, "\(decoded.stdout)")
        await publisher.interrupt()
        await serve.interrupt()
    }
}
