import ArgumentParser
import Dispatch
import Foundation
import SottoAudio
import SottoLive
import SottoModem

/// `sotto send`: encode a token and write it to a file (or play it, with the live-audio support).
struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Encode a token as sound and write it to a WAV file or play it.")

    @Argument(help: "The token as hex (1-16 bytes, optional 0x), e.g. 0x0123456789abcdef.")
    var token: String?
    @Option(help: "The token as text (UTF-8, 1-16 bytes) instead of hex.")
    var text: String?
    @Option(name: .long, help: "Write the sound to this file (WAV, FLAC or AIFF by extension) instead of playing it.")
    var out: String?
    @Option(help: "Waveform profile: \(Profile.all.map(\.name).joined(separator: ", ")).")
    var profile: Profile = .standard
    @Option(help: "Sample rate of the output (Hz).")
    var rate: Double = 48_000
    @Option(help: "Peak level (dBFS, -120...0). The envelope is constant: this is the level of the whole burst.")
    var volume: Double = Modulator.defaultLevel
    @Option(help: "Seconds of silence before and after the frame in the file.")
    var padding: Double = 0.1
    @Option(help: "ALSA playback PCM to play on (when there is no --out).")
    var device: String = "default"
    @Option(help: "Send the frame this many times.")
    var `repeat`: Int = 1
    @Flag(help: "Send until interrupted (Ctrl-C).")
    var loop = false
    @Option(help: "Seconds from the start of one frame to the start of the next.")
    var interval: Double = 1
    @Option(help: "Random extra delay (s, uniform 0...jitter) before each repetition, so that two senders do not collide every time.")
    var jitter: Double = 0
    @Option(help: "While playing, listen on this capture PCM (full duplex) and warn when the own token is not heard.")
    var selfCheck: String?

    func validate() throws {
        try NumericOption("--padding", 0...60, unit: "s").check(padding)
        try NumericOption("--repeat", 1...1_000_000).check(`repeat`)
        try NumericOption("--interval", above: 0, upTo: 3600, unit: "s").check(interval)
        try NumericOption("--jitter", 0...3600, unit: "s").check(jitter)
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
        try NumericOption("--volume", -120...0, unit: "dBFS").check(volume)
    }

    func run() throws {
        let bytes = try TokenInput.parse(hex: token, text: text)
        let modulator: Modulator
        do { modulator = try Modulator(profile: profile, sampleRate: rate, level: volume) } catch { throw ValidationError(error.description) }
        let burst = try modulator.modulate(bytes)
        guard let out else {
            try play(bytes)
            return
        }
        let silence = [Float](repeating: 0, count: Int(padding * rate))
        do {
            try AudioFile.write(silence + burst + silence, sampleRate: rate, to: out, format: AudioFileFormat(path: out))
        } catch {
            throw CommandError("\(error)")
        }
        printError("sent \(bytes.hex) (\(bytes.count) bytes, profile \(profile.name), \(fixed(Double(burst.count) / rate, 3)) s) to \(out)")
    }

    /// Plays the frame on an ALSA device, `repeat` times (or until interrupted with --loop), one frame
    /// every `interval` seconds plus uniform jitter; the gaps are played as silence so that timing follows
    /// the device's sample clock. With --self-check, listens at the same time and reports missed own tokens.
    func play(_ bytes: [UInt8]) throws {
        let broadcaster: Broadcaster
        do {
            broadcaster = try Broadcaster(configuration: PCMConfiguration(device: device, preferredRate: rate), token: bytes,
                                          profile: profile, level: volume)
        } catch { throw CommandError("\(error)") }
        printError("playing \(bytes.hex) on \(device): \(broadcaster.negotiated)")
        let check = SelfCheck(token: bytes)
        var listener: Listener?
        if let selfCheck {
            do { listener = try Listener(configuration: PCMConfiguration(device: selfCheck), profiles: [profile]) }
            catch { throw CommandError("\(error)") }
            let events = listener!.events
            Task.detached {
                for await event in events { if case .frame(let frame) = event { check.heard(frame) } }
            }
        }
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        signal(SIGINT, SIG_IGN)
        interrupt.setEventHandler { broadcaster.stop() }
        interrupt.resume()
        let failure = ErrorBox()
        let heardAfter = broadcaster.airtime + 0.5
        let checking = listener != nil
        let judged = DispatchGroup()
        let bufferTime = Double(broadcaster.negotiated.bufferFrames) / broadcaster.negotiated.sampleRate
        broadcaster.start(interval: interval, jitter: jitter, count: loop ? nil : `repeat`, generator: SystemRandomNumberGenerator(),
                          onSent: { _ in
                              guard checking else { return }
                              // Queued now: played within a buffer, decoded within its airtime plus latency.
                              let sentAt = Date()
                              judged.enter()
                              DispatchQueue.global().asyncAfter(deadline: .now() + heardAfter + bufferTime) {
                                  let missed = check.judge(sentAt: sentAt)
                                  if missed > 0 { printError("warning: own token not heard (\(missed) transmission\(missed == 1 ? "" : "s") in a row): is the microphone muted, filtered or too far?") }
                                  judged.leave()
                              }
                          }, onStatus: { [device] status in
                              switch status {
                              case .deviceError(let error, let retry): printError("device error: \(error)\(retry ? " (retrying)" : "")")
                              case .reopened(let negotiated): printError("device \(device) is back: \(negotiated)")
                              }
                          }, onEnd: { failure.error = $0 })
        broadcaster.wait()
        if checking {
            judged.wait()
            listener?.stop()
            if check.missed == 0 { printError("self-check: own token heard") }
        }
        if let error = failure.error { throw CommandError("\(error)") }
        printError("sent \(broadcaster.sent) frame\(broadcaster.sent == 1 ? "" : "s"), \(broadcaster.underruns) underrun\(broadcaster.underruns == 1 ? "" : "s")")
    }
}

/// Holds an error set on another thread.
final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: (any Error)?
    var error: (any Error)? {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}
