import ArgumentParser
import Foundation
import SottoAudio
import SottoLive
import SottoModem
import SottoSupport
import SottoTools

/// `sotto send`: encode a token and write it to a file (or play it, with the live-audio support).
struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Encode a token as sound and write it to a file or play it.",
        discussion: """
            With --out, the file holds what would be played: --padding of silence, the frame, and with --repeat N \
            the next frames every --interval seconds (plus --jitter, seeded by --seed). The format follows the \
            extension (\(AudioFileFormat.byExtension.keys.sorted().joined(separator: ", "))); - writes WAV to \
            standard output. A file or pipe holds at most \(Int(FrameScheduleWriter.longestDuration)) s (24 h) in any \
            format (16-bit WAV and AIFF: 4 GiB, about 12 h at 48 kHz); Ctrl-C while writing leaves no file. Without \
            --out, the frames are played on --device.
            """)

    @Argument(help: "The token as hex (1-16 bytes, optional 0x), e.g. 0x0123456789abcdef; - reads it from standard input.")
    var token: String?
    @Option(help: "The token as text (UTF-8, 1-16 bytes) instead of hex; - reads it from standard input.")
    var text: String?
    @Option(name: [.customShort("o"), .long], help: "Write the sound to this file instead of playing it (format by extension; - for standard output).")
    var out: String?
    @Option(help: "Waveform profile: \(Profile.all.map(\.name).joined(separator: ", ")).")
    var profile: Profile = .standard
    @Option(parsing: .unconditional, help: "Sample rate of the output (Hz).")
    var rate: Double = 48_000
    @Option(parsing: .unconditional, help: "Peak level (dBFS, -120...0). The envelope is constant: this is the level of the whole burst.")
    var volume: Double = Modulator.defaultLevel
    @Option(parsing: .unconditional, help: "Seconds of silence before the first frame and after the last in the file.")
    var padding: Double = 0.1
    @Option(help: "ALSA playback PCM to play on (default: default; not with --out).")
    var device: String?
    @Option(parsing: .unconditional, help: "Send the frame this many times (into the file, with --out).")
    var `repeat`: Int = 1
    @Flag(help: "Send until interrupted (Ctrl-C); not with --out.")
    var loop = false
    @Option(parsing: .unconditional, help: "Seconds from the start of one frame to the start of the next.")
    var interval: Double = 1
    @Option(name: .customLong("jitter"), parsing: .unconditional, help: "Random extra delay (s, uniform 0...jitter) before each repetition, so that two senders do not collide every time (default: \(fixed(FramePlayer.Schedule.defaultJitter, 2)) s, or --interval when shorter, as in publish, beacon and daemon).")
    var jitterOption: Double?
    /// --jitter as given, or the default every transmitting command shares.
    var jitter: Double { jitterOption ?? FramePlayer.Schedule.defaultJitter(interval: interval) }
    @Option(parsing: .unconditional, help: "Seed of the jitter in --out files (reproducible).")
    var seed: UInt64 = 1
    @Option(help: "While playing, listen on this capture PCM (full duplex) and warn when the own token is not heard; not with --out.")
    var selfCheck: String?

    func validate() throws {
        try NumericOption("--padding", 0...60, unit: "s").check(padding)
        try NumericOption("--repeat", 1...1_000_000).check(`repeat`)
        try NumericOption("--interval", above: 0, upTo: 3600, unit: "s").check(interval)
        try NumericOption("--jitter", 0...3600, unit: "s").check(jitterOption)
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
        try NumericOption("--volume", -120...0, unit: "dBFS").check(volume)
        if let out {
            if loop { throw ValidationError("--loop sends until interrupted, but a file needs an end: give --repeat N with --out") }
            if selfCheck != nil { throw ValidationError("--self-check listens to what is played: it needs a device, not --out") }
            if device != nil { throw ValidationError("--device plays the sound: give either --device or --out") }
            do { _ = try AudioFileFormat(path: out) } catch { throw ValidationError(error.description) }
        }
        if token == "-" && text == "-" { throw ValidationError("only one of the token and --text can be read from standard input") }
        _ = try makeModulator()
        // A token from standard input is checked once it is read, in run().
        if token != "-" && text != "-" { try check(tokenBytes()) }
    }

    /// The modulator of --profile, --rate and --volume (a rate too low for the profile is a usage error).
    func makeModulator() throws -> Modulator {
        do { return try Modulator(profile: profile, sampleRate: rate, level: volume) } catch { throw ValidationError(error.description) }
    }

    /// The token, read from standard input for `-`.
    func tokenBytes() throws -> [UInt8] {
        try TokenInput.parse(hex: StandardInput.resolve(token, asHex: true), text: StandardInput.resolve(text, asHex: false))
    }

    /// Refuses repetitions closer than the frame's airtime.
    func check(_ bytes: [UInt8]) throws {
        let airtime = profile.airtime(payloadBytes: bytes.count)
        if `repeat` > 1 || loop, interval < airtime {
            throw ValidationError("--interval \(interval) s is shorter than the frame (\(fixed(airtime, 3)) s): frames would overlap")
        }
    }

    func run() throws {
        let bytes = try tokenBytes()
        try check(bytes)
        let modulator = try makeModulator()
        guard let out else {
            try ConsentCheck.require(mayAsk: false)
            try play(bytes)
            return
        }
        let airtime: Double
        do { airtime = Double(try modulator.modulate(bytes).count) / rate } catch { throw ValidationError(error.description) }
        let times = Array(FrameTimes(interval: interval, jitter: jitter, seed: seed, offset: padding, firstWithoutJitter: true, count: `repeat`))
        let duration = times.last! + airtime + padding
        let format = try AudioFileFormat(path: out)
        if let problem = FrameScheduleWriter.lengthProblem(duration: duration, path: out, format: format, sampleRate: rate) {
            throw ValidationError(problem + " (--repeat x --interval, plus up to --jitter each)")
        }
        let frames: Int
        do {
            frames = try FrameScheduleWriter.write(to: out, format: format, sampleRate: rate, modulator: modulator,
                                                   times: times, duration: duration, stop: Interruption.stop, frameAt: { _ in bytes })
        } catch {
            throw CommandError("\(error)")
        }
        printError("sent \(bytes.hex) (\(bytes.count) bytes, profile \(profile.name), \(fixed(airtime, 3)) s\(frames > 1 ? ", \(frames) frames" : "")) to \(out == "-" ? "standard output" : out)")
    }

    /// Plays the frame on an ALSA device, `repeat` times (or until interrupted with --loop), one frame
    /// every `interval` seconds plus uniform jitter; with --self-check, listens at the same time and warns
    /// of own tokens not heard.
    func play(_ bytes: [UInt8]) throws {
        let device = self.device ?? "default"
        let player: FramePlayer
        do {
            player = try FramePlayer(configuration: PCMConfiguration(device: device, preferredRate: rate), profile: profile, level: volume,
                                     frameAt: { _ in bytes }, selfCheck: selfCheck.map { PCMConfiguration(device: $0) })
        } catch { throw CommandError("\(error)") }
        let interrupt = Interruption.onStop { player.stop() }
        defer { interrupt.cancel() }
        let summary: FramePlayer.Summary
        // One warning of a kind every 30 s at most, with the count held back (--loop would say one a frame).
        let warnings = WarningGate { printError($0) }
        do {
            summary = try player.run(.init(interval: interval, jitter: jitter, count: loop ? nil : `repeat`)) { event in
                switch event {
                case .started(let negotiated): printError("playing \(bytes.hex) on \(device): \(negotiated)")
                case .ownTokenNotHeard(let missed):
                    warnings.warn("warning: own token not heard (\(missed) transmission\(missed == 1 ? "" : "s") in a row): is the microphone muted, filtered or too far?",
                                  kind: "own token not heard")
                default: DeviceStatusText.print(event, device: device, warnings: warnings)
                }
            }
        } catch {
            warnings.finish()
            throw CommandError("\(error)")
        }
        warnings.finish()
        if summary.ownTokenMissed == 0 { printError("self-check: own token heard") }
        printError("sent \(summary.sent) frame\(summary.sent == 1 ? "" : "s"), \(summary.underruns) underrun\(summary.underruns == 1 ? "" : "s")")
    }
}

/// Device problems of a player, on standard error.
enum DeviceStatusText {
    static func print(_ event: FramePlayer.Event, device: String, warnings: WarningGate? = nil) {
        switch event {
        case .deviceError(let error, let retry):
            let line = "device error: \(error)\(retry ? " (retrying)" : "")"
            if let warnings { warnings.warn(line) } else { printError(line) }
        case .reopened(let negotiated): printError("device \(device) is back: \(negotiated)")
        case .started, .ownTokenNotHeard: break
        }
    }
}
