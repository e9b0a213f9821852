import ArgumentParser
import Dispatch
import Foundation
import SottoAudio
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

    func validate() throws {
        guard padding.isFinite, (0...60).contains(padding) else { throw ValidationError("--padding must be 0 to 60 seconds") }
        guard (1...1_000_000).contains(`repeat`) else { throw ValidationError("--repeat must be 1 to 1000000") }
        guard interval.isFinite, interval > 0, interval <= 3600 else { throw ValidationError("--interval must be in (0, 3600] s") }
        guard jitter.isFinite, jitter >= 0, jitter <= 3600 else { throw ValidationError("--jitter must be 0 to 3600 s") }
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
    /// every `interval` seconds plus uniform jitter; the gaps are written as silence so that timing follows
    /// the device's sample clock.
    func play(_ bytes: [UInt8]) throws {
        let playback: PCMPlayback
        do {
            playback = try PCMPlayback(configuration: PCMConfiguration(device: device, preferredRate: rate,
                                                                        acceptableRates: profile.minimumSampleRate...384_000))
        } catch { throw CommandError(error.description) }
        let deviceRate = playback.negotiated.sampleRate
        let burst: [Float]
        do { burst = try Modulator(profile: profile, sampleRate: deviceRate, level: volume).modulate(bytes) }
        catch { throw CommandError(error.description) }
        printError("playing \(bytes.hex) on \(device): \(playback.negotiated)")
        let stop = StopFlag()
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        interrupt.setEventHandler { stop.set() }
        interrupt.resume()
        var generator = SystemRandomNumberGenerator()
        var sent = 0
        do {
            while (loop || sent < `repeat`) && !stop.isSet {
                try playback.write(burst)
                sent += 1
                guard loop || sent < `repeat` else { break }
                let gap = max(0, interval - Double(burst.count) / deviceRate) + Double.random(in: 0...jitter, using: &generator)
                try playback.write([Float](repeating: 0, count: Int(gap * deviceRate)))
            }
            playback.drain()
        } catch { throw CommandError(error.description) }
        printError("sent \(sent) frame\(sent == 1 ? "" : "s"), \(playback.underruns) underrun\(playback.underruns == 1 ? "" : "s")")
    }
}
