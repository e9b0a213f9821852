import Foundation
import SottoAudio
import SottoLive
import SottoModem
import Synchronization
import Testing

/// The live paths through real ALSA: PCMs defined in an asoundrc selected with ALSA_CONFIG_PATH. No sound
/// card, no mocks:
/// - `sotto_capture` / `sotto_playback`: ALSA's `file` plugin (over a `null` slave). Capture reads `infile`
///   (raw S16_LE, mono, 48 kHz, faster than real time); playback writes `file`.
/// - `sotto_faulty_capture` / `sotto_faulty_playback`: the test I/O plugin (Tests/ALSAFaultPlugin), paced
///   to the sample clock, which goes away while `gone` exists and is suspended while `suspended` exists.
struct FilePluginRig {
    let directory: URL
    var input: URL { directory.appendingPathComponent("capture-in.raw") }
    var output: URL { directory.appendingPathComponent("playback-out.raw") }
    var faultyInput: URL { directory.appendingPathComponent("faulty-in.raw") }
    var faultyOutput: URL { directory.appendingPathComponent("faulty-out.raw") }
    var goneMarker: URL { directory.appendingPathComponent("gone") }
    var suspendedMarker: URL { directory.appendingPathComponent("suspended") }
    var refuseMarker: URL { directory.appendingPathComponent("refuse") }
    var configuration: URL { directory.appendingPathComponent("asoundrc") }
    var environment: [String: String] { ["ALSA_CONFIG_PATH": configuration.path] }

    /// The fault-injection plugin, built next to the `sotto` executable.
    static let faultPlugin = Sotto.executable.deletingLastPathComponent().appendingPathComponent("libasound_module_pcm_sottofault.so")

    init() throws {
        directory = try temporaryDirectory()
        let markers = "gone \"\(goneMarker.path)\"; suspended \"\(suspendedMarker.path)\"; refuse \"\(refuseMarker.path)\""
        let text = """
        pcm.sotto_null { type null }
        pcm.sotto_capture { type file; slave.pcm "sotto_null"; file "/dev/null"; infile "\(input.path)"; format "raw" }
        pcm.sotto_playback { type file; slave.pcm "sotto_null"; file "\(output.path)"; format "raw" }
        pcm_type.sottofault { lib "\(Self.faultPlugin.path)" }
        pcm.sotto_faulty_capture { type sottofault; rate 48000; infile "\(faultyInput.path)"; \(markers) }
        pcm.sotto_faulty_playback { type sottofault; rate 48000; outfile "\(faultyOutput.path)"; \(markers) }
        pcm.sotto_24bit_only { type sottofault; rate 48000; format "S24_3LE" }
        """
        try Data(text.utf8).write(to: configuration)
    }

    /// Unplugs the faulty devices (opening fails, running streams fail with ENODEV) or plugs them back.
    func setUnplugged(_ unplugged: Bool) throws { try setMarker(goneMarker, unplugged) }
    /// Makes opening the faulty devices fail with `errno` (e.g. EBUSY), or lets them open again (nil).
    func setRefusal(_ errno: Int32?) throws {
        if let errno { try Data("\(errno)".utf8).write(to: refuseMarker) } else { try setMarker(refuseMarker, false) }
    }
    /// Suspends the faulty devices (running streams fail with ESTRPIPE until resumed) or wakes them.
    func setSuspended(_ suspended: Bool) throws { try setMarker(suspendedMarker, suspended) }

    private func setMarker(_ marker: URL, _ present: Bool) throws {
        if present { try Data().write(to: marker) } else if FileManager.default.fileExists(atPath: marker.path) {
            try FileManager.default.removeItem(at: marker)
        }
    }

    /// Raw S16_LE with the same rounding as the ALSA writer.
    static func raw(_ samples: [Float]) -> Data {
        var data = Data(capacity: 2 * samples.count)
        for s in samples {
            let v = Int16(max(-32_768, min(32_767, (s * 32_768).rounded())))
            withUnsafeBytes(of: v.littleEndian) { data.append(contentsOf: $0) }
        }
        return data
    }

    static func samples(_ data: Data) -> [Int16] {
        data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)).map { Int16(littleEndian: $0) } }
    }
}

@Suite(.serialized) struct LiveAudioTests {
    @Test func listenDecodesWhatIsPlayedIntoTheCapturePCM() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        let tokens: [[UInt8]] = [[1, 2, 3, 4, 5, 6, 7, 8], Array("live".utf8)]
        let modulator = try Modulator()
        var signal = [Float](repeating: 0, count: 4_800)
        for token in tokens { signal += try modulator.modulate(token) + [Float](repeating: 0, count: 9_600) }
        try FilePluginRig.raw(signal).write(to: rig.input)
        let record = rig.directory.appendingPathComponent("record.wav").path
        let listen = try Sotto.run(["listen", "--device", "sotto_capture", "--format", "json", "--duration", "3", "--record", record],
                                   environment: rig.environment)
        #expect(listen.status == 0, "\(listen.stderr)")
        let live = listen.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(live.compactMap { $0["token"] as? String } == tokens.map { $0.map { String(format: "%02x", $0) }.joined() })
        #expect(listen.stderr.contains("48000 Hz") && listen.stderr.contains("2 frames"))
        // The recording holds exactly what was captured, and decoding it offline gives the same frames.
        let (recorded, _) = try AudioFile.read(path: record)
        #expect(recorded.count == 3 * 48_000)
        #expect(zip(recorded, signal).allSatisfy { abs($0 - $1) <= 1.0 / 32_768 + 1e-6 })
        let offline = try Sotto.run(["decode", "--format", "json", record])
        #expect(offline.stdout == listen.stdout)
    }

    @Test func sendWritesExactlyTheEncodersSamples() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        let send = try Sotto.run(["send", "0xa1b2c3d4", "--device", "sotto_playback", "--repeat", "2", "--interval", "0.75", "--jitter", "0"],
                                 environment: rig.environment)
        #expect(send.status == 0, "\(send.stderr)")
        #expect(send.stderr.contains("sent 2 frames"))
        let burst = try Modulator().modulate([0xA1, 0xB2, 0xC3, 0xD4])
        let gap = Int((0.75 - Double(burst.count) / 48_000) * 48_000)
        let expected = FilePluginRig.samples(FilePluginRig.raw(burst + [Float](repeating: 0, count: gap) + burst))
        let written = FilePluginRig.samples(try Data(contentsOf: rig.output))
        #expect(written == expected)
    }

    @Test func sendThenListenRoundTripThroughTwoPCMs() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        #expect(try Sotto.run(["send", "--text", "round trip", "--device", "sotto_playback"], environment: rig.environment).status == 0)
        try FileManager.default.moveItem(at: rig.output, to: rig.input)
        let listen = try Sotto.run(["listen", "--device", "sotto_capture", "--format", "hex", "--duration", "1.5"], environment: rig.environment)
        #expect(listen.stdout == Array("round trip".utf8).map { String(format: "%02x", $0) }.joined() + "\n")
    }

    @Test func devicesListsPCMsWithTheirRates() throws {
        // The system configuration always defines the null PCM, with a hint.
        let result = try Sotto.run(["devices"], environment: ["ALSA_CONFIG_PATH": "/usr/share/alsa/alsa.conf"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("null\tcapture any rate\tplayback any rate"), "\(result.stdout)")
    }

    @Test func deviceErrorsAreTypedAndExplained() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        let missing = try Sotto.run(["listen", "--device", "no_such_pcm", "--duration", "1"], environment: rig.environment)
        #expect(missing.status != 0 && missing.stderr.contains("no audio device 'no_such_pcm'"))
        let missingPlayback = try Sotto.run(["send", "0x01", "--device", "no_such_pcm"], environment: rig.environment)
        #expect(missingPlayback.status != 0 && missingPlayback.stderr.contains("no audio device"))
        // 8 kHz is below what the inaudible profiles need: the device is refused, with the reason.
        try FilePluginRig.raw([Float](repeating: 0, count: 48_000)).write(to: rig.input)
        let rate = try Sotto.run(["listen", "--device", "sotto_capture", "--profile", "default", "--rate", "8000", "--duration", "1"], environment: rig.environment)
        #expect(rate.status != 0 && rate.stderr.contains("cannot run at 8000 Hz"), "\(rate.stderr)")
    }
}

@Suite(.serialized) struct LiveLibraryTests {
    /// One rig for the whole process: ALSA keeps one configuration per process, and another test target's
    /// live suite (the exchange's AudioRadioTests) runs in this process at the same time. Every in-process
    /// suite sets the same list of files, each writing its own, with PCM names of its own.
    static let rig: FilePluginRig = {
        let rig = try! FilePluginRig()
        let base = FileManager.default.temporaryDirectory.path + "/sotto-alsa-\(getpid())"
        try! FileManager.default.copyItem(atPath: rig.configuration.path, toPath: base + "-live.conf")
        setenv("ALSA_CONFIG_PATH", base + "-radio.conf:" + base + "-live.conf", 1)
        return rig
    }()

    @Test func listenerDeliversFramesAsAnAsyncSequence() async throws {
        let rig = Self.rig
        let tokens: [[UInt8]] = [[9, 9, 9, 9], [7, 7, 7, 7, 7, 7, 7, 7]]
        let modulator = try Modulator(profile: .fast)
        var signal = [Float](repeating: 0, count: 2_000)
        for token in tokens { signal += try modulator.modulate(token) + [Float](repeating: 0, count: 5_000) }
        try FilePluginRig.raw(signal).write(to: rig.input)
        let listener = try Listener(configuration: PCMConfiguration(device: "sotto_capture"), profiles: Profile.all)
        var started: NegotiatedFormat?
        var heard: [DecodedFrame] = []
        for await event in listener.events {
            switch event {
            case .started(let format): started = format
            case .frame(let frame): heard.append(frame)
            default: break
            }
            if heard.count == tokens.count { listener.stop() }
        }
        #expect(started?.sampleRate == 48_000)
        #expect(heard.map(\.token) == tokens)
        #expect(heard.allSatisfy { $0.profile == "fast" })
    }

    @Test func selfCheckReportsAMissingOwnToken() throws {
        let rig = Self.rig
        try FilePluginRig.raw([Float](repeating: 0, count: 48_000)).write(to: rig.input)
        let quiet = try Sotto.run(["send", "0x0a0b", "--device", "sotto_playback", "--repeat", "2", "--interval", "0.4", "--self-check", "sotto_capture"],
                                  environment: rig.environment)
        #expect(quiet.status == 0)
        #expect(quiet.stderr.contains("own token not heard (2 transmissions in a row)"), "\(quiet.stderr)")
        // Now the capture hears the token (the file plugin cannot loop back, so frames are put there; it
        // runs faster than real time, so there are enough of them to last while the sender sends).
        let frame = try Modulator().modulate([0x0A, 0x0B]) + [Float](repeating: 0, count: 9_600)
        try FilePluginRig.raw(Array([[Float]](repeating: frame, count: 300).joined())).write(to: rig.input)
        let heard = try Sotto.run(["send", "0x0a0b", "--device", "sotto_playback", "--repeat", "2", "--interval", "0.4", "--self-check", "sotto_capture"],
                                  environment: rig.environment)
        #expect(heard.stderr.contains("self-check: own token heard") && !heard.stderr.contains("not heard"), "\(heard.stderr)")
    }

    @Test func framePlayerRefusesWhatCannotBePlayed() throws {
        #expect(throws: FramePlayer.ParameterError.self) {
            try FramePlayer(configuration: PCMConfiguration(device: "sotto_playback"), frameAt: { _ in [1] }, changesEvery: 1,
                            selfCheck: PCMConfiguration(device: "sotto_capture"))
        }
        #expect(throws: FramePlayer.ParameterError.self) {
            try FramePlayer(configuration: PCMConfiguration(device: "sotto_playback"), frameAt: { _ in [1] }, changesEvery: 0)
        }
        let player = try FramePlayer(configuration: PCMConfiguration(device: "sotto_playback"), frameAt: { _ in [1] })
        #expect(throws: FramePlayer.ParameterError.self) { try player.run(.init(interval: 0, count: 1)) }
        #expect(throws: FramePlayer.ParameterError.self) { try player.run(.init(interval: 1, jitter: .nan, count: 1)) }
    }
}
