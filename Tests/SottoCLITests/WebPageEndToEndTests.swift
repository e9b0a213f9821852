import Foundation
import SottoAudio
import SottoModem
import Testing

/// Chromium, where Debian installs it (scripts/install-deps), if anywhere.
let webChromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }

/// The page of `sotto serve --web` in a real browser: headless Chromium, started here, hears through its fake
/// microphone (a WAV file) the token that `sotto publish --server ... --out` wrote and `sotto simulate` passed
/// through a room, reports it over the web transport, and shows the message `sotto serve` found for it (for
/// its subscription of that type, not for its subscription of another type); the token the page plays,
/// rendered by its OfflineAudioContext, is found by the native decoder; since the publisher hears nobody, the page
/// hears others unheard, and the service's link adaptation moves its token to the robust profile after 10 s: the
/// page says so and plays (renders) it in that profile, found there by the native decoder; a page whose key is bound to another
/// origin is refused, and says that its microphone delivers silence, then clipping; the page publishes through its
/// form, found by a native subscriber that hears the page's token, and shows the publication expired; the publisher
/// stopping shows the message lost. The page mirrors every
/// line it shows on the console, which Chromium logs on its stderr. Three Chromium runs in all.
@Suite(.serialized, .enabled(if: webChromium != nil, "no Chromium (Debian: chromium)"))
struct WebPageEndToEndTests {
    static let chromium = webChromium
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Runs `sotto admin ...` on the store and returns its first line of output.
    func admin(_ arguments: [String], store: String) throws -> String {
        let result = try Sotto.run(["admin"] + arguments + ["--store", store], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.split(separator: "\n").first.map(String.init) ?? ""
    }

    /// Opens `url` in a headless Chromium whose microphone plays `microphone`, until `done` holds for the
    /// console lines of the page (`sotto-event ...`) or `timeout` passes; returns those lines.
    func browse(_ url: String, microphone: String, in directory: URL, timeout: Double, allowMicrophone: Bool = true,
                until done: ([String]) -> Bool) async throws -> [String] {
        let profile = directory.appendingPathComponent("chromium-\(UUID().uuidString.prefix(8))")
        // Without --use-fake-ui-for-media-stream, headless Chromium refuses the microphone as a user would.
        let browser = try SpawnedProcess(try #require(Self.chromium), [
            "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--autoplay-policy=no-user-gesture-required",
            "--use-fake-device-for-media-stream", "--use-file-for-fake-audio-capture=\(microphone)",
            "--enable-logging=stderr", "--v=0", "--user-data-dir=\(profile.path)", url,
        ] + (allowMicrophone ? ["--use-fake-ui-for-media-stream"] : []), environment: [:], directory: directory)
        defer { Task { _ = await browser.stop(SIGTERM, timeout: 10) } }
        let deadline = Date(timeIntervalSinceNow: timeout)
        var lines: [String] = []
        repeat {
            try await Task.sleep(for: .milliseconds(200))
            lines = browser.standardError.split(separator: "\n").compactMap { line in
                guard let start = line.range(of: "\"sotto-event ") else { return nil }
                let rest = line[start.upperBound...]
                return rest.range(of: "\", source:").map { String(rest[..<$0.lowerBound]) }
            }
        } while !done(lines) && Date() < deadline
        _ = await browser.stop(SIGTERM, timeout: 10)
        return lines
    }

    @Test(.timeLimit(.minutes(3))) func thePageHearsAPublicationAndShowsTheMessageFound() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        _ = try admin(["project", "create", "museum"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--web", "127.0.0.1:0", "--store", store,
                                         "--web-page", Self.root.appendingPathComponent("bindings/web").path,
                                         "--web-modem", Self.root.appendingPathComponent("bindings/js").path])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let web = await serve.line(timeout: 30) { $0.hasPrefix("web on ") }
        let grpcPort = try #require(listening?.split(separator: ":").last.map(String.init), "\(serve.standardError)")
        let webPort = try #require(web?.split(separator: ":").last.map(String.init), "\(serve.standardError)")
        let origin = "http://127.0.0.1:\(webPort)"
        let pageKey = try admin(["key", "create", "museum", "--label", "page", "--origin", origin], store: store)
        let elsewhereKey = try admin(["key", "create", "museum", "--label", "elsewhere", "--origin", "https://elsewhere.example"], store: store)
        #expect(try admin(["key", "list", "museum"], store: store).isEmpty == false)

        let message = "The Night Watch, Rembrandt, 1642 <b>oil</b>"
        let speaker = directory.appendingPathComponent("a.wav").path
        let publisher = try BackgroundSotto(["publish", "--server", "127.0.0.1:\(grpcPort)", "--api-key", key, "--namespace", "museum",
                                             "--type", "exhibit", "--text", message, "--ttl", "300", "--out", speaker])
        defer { publisher.process.terminate() }
        // It says "wrote N frames ... to FILE" on stderr once the file is whole.
        let deadline = Date(timeIntervalSinceNow: 30)
        while !publisher.standardError.contains("wrote ") && Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
        try #require(FileManager.default.fileExists(atPath: speaker), "\(publisher.standardError)")
        // The microphone: the first 4 s of what the publisher plays (Chromium loops the file), through a room
        // (reverberation, 1.5 m, noise).
        let excerpt = directory.appendingPathComponent("excerpt.wav").path, microphone = directory.appendingPathComponent("microphone.wav").path
        try AudioFile.write(Array(try AudioFileReader(path: speaker).readAll().prefix(4 * 48_000)), sampleRate: 48_000, to: excerpt, format: .wav16)
        let room = try Sotto.run(["simulate", excerpt, microphone, "--rt60", "0.4", "--distance", "1.5", "--snr", "15", "--seed", "7"], timeout: 60)
        #expect(room.status == 0, "\(room.stderr)")

        // Subscribed to the publication's type and to another: the one is found, the other finds nothing; once
        // found, the publisher stops, and the page shows the message lost. The page renders its own token as it
        // would play it, and publishes through its form (TTL 8 s): a native subscriber that hears the page's
        // rendered token finds that message, and the page shows its publication expired.
        let found = "found museum/exhibit: \(message) [subscription museum/exhibit]"
        let lost = "lost museum/exhibit: \(message) [subscription museum/exhibit]"
        let note = "Audio guide: <i>room 2</i> / 3"
        let page = "\(origin)/#key=\(pageKey)&subscribe=museum/exhibit,museum/poster&listen=1&render=1"
            + "&publish=museum/note/8/" + (note.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        let pageToken = directory.appendingPathComponent("page-token.wav").path
        var listener: BackgroundSotto?
        defer { listener?.process.terminate() }
        let lines = try await browse(page, microphone: microphone, in: directory, timeout: 75) { lines in
            if listener == nil, lines.contains("active publication museum/note active"), let rendering = Self.rendering(in: lines, profile: "default") {
                // What the page plays, heard by a subscriber of museum/note through a recording.
                try? AudioFile.write(rendering.samples, sampleRate: Double(rendering.rate), to: pageToken, format: .wav16)
                listener = try? BackgroundSotto(["subscribe", "--server", "127.0.0.1:\(grpcPort)", "--api-key", key, "--namespace", "museum",
                                                 "--type", "note", "--input", pageToken, "--ttl", "20", "--format", "json"])
            }
            // Once found, and once the page was moved to robust (it hears the publisher unheard: the move needs the
            // publisher's session alive), the publisher stops.
            if lines.contains(found), Self.rendering(in: lines, profile: "robust") != nil, publisher.process.isRunning { publisher.process.interrupt() }
            return lines.contains(found) && lines.contains(lost) && lines.contains("active subscription museum/poster active")
                && lines.contains("expired publication museum/note")
                && Self.rendering(in: lines, profile: "default") != nil && Self.rendering(in: lines, profile: "robust") != nil
                && (listener?.output.contains { $0.contains("\"found\"") && $0.contains("note") } ?? false)
        }
        let shown = lines.filter { !$0.hasPrefix("rendered ") }  // (for the messages)
        #expect(lines.contains { $0.hasPrefix("heard token 10") }, "the page's decoder heard the publisher's token through the room: \(shown)")
        #expect(lines.contains(found), "the page shows the message found: \(shown)\n\(serve.standardError)")
        #expect(lines.contains("active subscription museum/poster active"), "\(shown)")
        #expect(lines.contains(lost), "the publisher stopped: the page shows its message lost: \(shown)")
        // The page's publication, made through its form: active, found by a subscriber that heard the page's token,
        // then expired after its TTL.
        #expect(lines.contains("active publication museum/note active") && lines.contains("expired publication museum/note"), "\(shown)")
        let heard = try #require(listener?.output.first { $0.contains("\"found\"") }, "the page's publication found: \(listener?.output ?? []) \(listener?.standardError ?? "")")
        let record = try #require(try JSONSerialization.jsonObject(with: Data(heard.utf8)) as? [String: Any])
        #expect(record["namespace"] as? String == "museum" && record["type"] as? String == "note", "\(record)")
        #expect((record["content"] as? String).flatMap { Self.bytes(hex: $0) } == Array(note.utf8), "the full message, as the page published it: \(record)")
        #expect(!lines.contains { $0.hasPrefix("found") && $0.hasSuffix("[subscription museum/poster]") }, "another type finds nothing: \(shown)")
        // The playback path: what the page's OfflineAudioContext rendered, decoded by the native decoder.
        let sessionTokens = Set(lines.filter { $0.hasPrefix("token ") }.map { "10" + $0.dropFirst(6) })
        for (name, profile) in [("default", Profile.standard), ("robust", Profile.robust)] {
            let rendered = Self.rendering(in: lines, profile: name)  // (not in #require: it would print every line)
            let rendering = try #require(rendered, "the page rendered its token in \(name): \(shown)")
            #expect(sessionTokens.contains(rendering.token), "the token rendered is the session's (\(rendering.token), \(sessionTokens))")
            // Decoded with every profile: the rendering is in the one named, and only there.
            let decoder = try StreamingDecoder(sampleRate: Double(rendering.rate), profiles: [.standard, .robust, .fast])
            let decoded = decoder.process(rendering.samples) + decoder.finish()
            #expect(decoded.map { $0.token.map { String(format: "%02x", $0) }.joined() } == [rendering.token],
                    "the native decoder finds the page's token in its \(name) rendering (\(rendering.samples.count) samples)")
            #expect(decoded.map(\.profile) == [profile.name], "rendered in \(name): \(decoded.map(\.profile))")
        }
        // Link adaptation as the page shows it: the move to robust, once, after the page had heard the publisher.
        let moves = shown.filter { $0.hasPrefix("profile ") }
        #expect(moves.count == 1 && moves.first?.hasPrefix("profile robust: others hear this page weakly or not at all") == true, "\(moves)")

        // A key bound to another origin: the session is refused, nothing is found. Its microphone delivers 2 s of
        // silence, then 2 s of a loud tone clipped at full scale: the page says so, each in turn.
        let silentThenClipped = directory.appendingPathComponent("silent-then-clipped.wav").path
        let tone = (0..<(2 * 48_000)).map { i in max(-1, min(1, 4 * Float(sin(2 * Double.pi * 1_000 * Double(i) / 48_000)))) }
        try AudioFile.write([Float](repeating: 0, count: 2 * 48_000) + tone, sampleRate: 48_000, to: silentThenClipped, format: .wav16)
        let refused = try await browse("\(origin)/#key=\(elsewhereKey)&subscribe=museum/exhibit&listen=1", microphone: silentThenClipped,
                                       in: directory, timeout: 30) { lines in
            lines.contains { $0.contains("may not be used from the origin") }
                && lines.contains { $0.contains("delivers silence") } && lines.contains { $0.contains("is clipping") }
        }
        #expect(refused.contains { $0.hasPrefix("error") && $0.contains("may not be used from the origin \(origin)") }, "\(refused)")
        #expect(!refused.contains { $0.hasPrefix("found") }, "\(refused)")
        #expect(refused.contains { $0.hasPrefix("warning The microphone delivers silence") }, "\(refused)")
        #expect(refused.contains { $0.hasPrefix("warning The microphone is clipping") }, "\(refused)")
        #expect(!refused.contains { $0.hasPrefix("heard") }, "\(refused)")
        // The microphone refused: the page says so, and its session goes on (the subscription is active).
        let deaf = try await browse(page, microphone: microphone, in: directory, timeout: 30, allowMicrophone: false) { lines in
            lines.contains { $0.contains("microphone was refused") } && lines.contains { $0.hasPrefix("active") }
        }
        #expect(deaf.contains { $0.hasPrefix("error The microphone was refused") }, "\(deaf)")
        #expect(deaf.contains { $0.hasPrefix("active subscription museum/exhibit") }, "\(deaf)")
        #expect(!deaf.contains { $0.hasPrefix("heard") }, "\(deaf)")
        await publisher.interrupt()
        await serve.interrupt()
        #expect(serve.process.terminationStatus == 0, "\(serve.standardError)")
    }

    /// The page's rendering of its token in a profile (the render hook's lines `rendered TOKEN RATE PROFILE I/N
    /// BASE64`, all N of the first token rendered in that profile): the modem token in hex, the rate (Hz) and the
    /// samples; nil until all have come.
    static func rendering(in lines: [String], profile: String) -> (token: String, rate: Int, samples: [Float])? {
        let parts = lines.filter { $0.hasPrefix("rendered ") }.map { $0.split(separator: " ").map(String.init) }
            .filter { $0.count == 6 && $0[3] == profile }
        guard let firstPart = parts.first else { return nil }
        let token = firstPart[1]
        guard let rate = Int(firstPart[2]), let count = firstPart[4].split(separator: "/").last.flatMap({ Int($0) }), count > 0 else { return nil }
        var chunks = [String?](repeating: nil, count: count)
        for part in parts where part[1] == token {
            let index = part[4].split(separator: "/")
            if let i = index.first.flatMap({ Int($0) }), (1...count).contains(i) { chunks[i - 1] = part[5] }
        }
        guard !chunks.contains(where: { $0 == nil }), let bytes = Data(base64Encoded: chunks.compactMap { $0 }.joined()) else { return nil }
        let samples = bytes.withUnsafeBytes { raw in (0..<(bytes.count / 4)).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 4 * $0, as: UInt32.self))) } }
        return (token, rate, samples)
    }

    /// Bytes of a hex string (nil if it is not one).
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        return stride(from: 0, to: digits.count, by: 2).map { i in UInt8(String(decoding: digits[i..<i + 2], as: UTF8.self), radix: 16) }
            .reduce(into: [UInt8]?([])) { all, byte in if let byte { all?.append(byte) } else { all = nil } }
    }
}
