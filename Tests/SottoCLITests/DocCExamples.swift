import Foundation
import SottoAudio
import SottoDaemon
import SottoDaemonNotify
import SottoLab
import SottoLive
import SottoModem
import SottoNotify
import SottoSupport
import SottoTools
import Testing

/// The worked examples of the SottoLive, SottoDaemon, SottoDaemonNotify, SottoTools and SottoLab catalogs, compiled
/// (the SottoTools and SottoLab ones run) here; `DocCExampleTests` checks that each catalog shows its example exactly as
/// written here (the live ones need a sound card: LiveAudioTests and DaemonTests run the same calls on ALSA's
/// file plugin).
struct DocCExamples {
    /// SottoLive.md: listen on a capture device until Ctrl-C, printing each frame.
    func live(stop: StopFlag) async throws {
        let listener = try Listener(configuration: PCMConfiguration(device: "default"), profiles: Profile.all)
        let watcher = Thread { while !stop.isSet { usleep(50_000) }; listener.stop() }
        watcher.start()
        for await event in listener.events {
            switch event {
            case .started(let format): print("listening at \(format.sampleRate) Hz")
            case .frame(let frame): print(Hex.encode(frame.token), frame.profile, frame.snr)  // SNR in dB
            case .deviceError(let error, let willRetry): print(error, willRetry ? "(retrying)" : "")
            default: break
            }
        }
    }

    /// SottoDaemon.md: the per-user daemon with the embedded matcher, until a stop flag is set.
    func daemon(stop: StopFlag) async throws {
        let configuration = DaemonConfiguration(capture: PCMConfiguration(device: "default"),
                                                playback: PCMConfiguration(device: "default"))
        let daemon = Daemon(configuration: configuration) { print($0) }
        // Clients reach it on $XDG_RUNTIME_DIR/sotto/control.sock (`sotto publish --daemon`, `sotto ops`).
        try await daemon.run(until: stop) { socket in print("listening on \(socket)") }
    }

    /// SottoDaemonNotify.md: what the daemon's subscriptions find, as desktop notifications.
    func notifications(daemon: Daemon) async throws {
        let notifier = try DesktopNotifier()  // the session bus's notification server
        let sink = DaemonNotifications(desktop: notifier, exec: nil) { print($0) }
        await daemon.add(sink: sink)
        // ... after the daemon stopped:
        await sink.finish()
    }

    /// SottoTools.md: decode a recording as `sotto decode --format json` does.
    @Test func tools() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-docc-tools-\(getpid()).wav").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let silence = [Float](repeating: 0, count: 4_800)
        try AudioFile.write(silence + (try Modulator().modulate(Array("hello".utf8))) + silence, sampleRate: 48_000, to: path)
        var lines: [String] = []
        let summary = try RecordingDecoder.decode(path: path, profiles: Profile.all, channel: .channel(0)) { frame in
            lines.append(JSONLines.line(FrameRecord(frame)))  // one JSON Lines record per frame, schema 2
        }
        print(lines.joined(separator: "\n"), summary.seconds)
        #expect(lines.count == 1 && lines[0].contains(#""text":"hello""#) && lines[0].contains(#""snr_db":"#))
    }

    /// SottoLab.md: five devices in a simulated room on the matcher's turns.
    @Test func lab() throws {
        let configuration = CrowdSweep.configuration(devices: 5, rules: "coordinated", seed: 1)!
        let results = try CrowdSweep.run([configuration])
        let summary = CrowdSweep.Summary(results)
        print("pairs heard within 10 s: \(fixed(100 * summary.heardShare, 1)) %, rooms where all were: \(summary.roomsAllHeard)")
        #expect(results.count == 1 && summary.heardShare > 0.9 && summary.falseTokens == 0)
    }
}

/// Every DocC catalog shows a worked example, and each example is one that a test target compiles: a ```swift
/// block of a catalog's articles must appear, whitespace aside, in one of the test targets' DocCExamples.swift.
struct DocCExampleTests {
    @Test func everyCatalogHasAnExampleThatCompiles() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        func squeezed(_ text: String) -> String { String(text.unicodeScalars.filter { !CharacterSet.whitespacesAndNewlines.contains($0) }.map(Character.init)) }
        let tests = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Tests").path).compactMap { target in
            try? String(contentsOf: root.appendingPathComponent("Tests/\(target)/DocCExamples.swift"), encoding: .utf8)
        }.map(squeezed)
        #expect(tests.count >= 5)
        let sources = root.appendingPathComponent("Sources")
        var catalogs = 0
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            let catalog = sources.appendingPathComponent("\(module)/\(module).docc")
            guard let articles = try? FileManager.default.contentsOfDirectory(atPath: catalog.path).filter({ $0.hasSuffix(".md") }) else { continue }
            catalogs += 1
            var examples = 0
            for article in articles {
                let text = try String(contentsOf: catalog.appendingPathComponent(article), encoding: .utf8)
                var block: [Substring]?
                for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                    if line.hasPrefix("```swift") { block = []; continue }
                    if line.hasPrefix("```"), let lines = block {
                        examples += 1
                        let code = squeezed(lines.joined(separator: "\n"))
                        #expect(tests.contains { $0.contains(code) }, "\(module)/\(article): an example no test compiles:\n\(lines.joined(separator: "\n"))")
                        block = nil
                        continue
                    }
                    block?.append(line)
                }
            }
            #expect(examples > 0, "\(module).docc has no worked example")
        }
        #expect(catalogs >= 16)
    }
}
