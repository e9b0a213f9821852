import ArgumentParser
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

    func validate() throws {
        guard padding.isFinite, (0...60).contains(padding) else { throw ValidationError("--padding must be 0 to 60 seconds") }
    }

    func run() throws {
        let bytes = try TokenInput.parse(hex: token, text: text)
        let modulator: Modulator
        do { modulator = try Modulator(profile: profile, sampleRate: rate, level: volume) } catch { throw ValidationError(error.description) }
        let burst = try modulator.modulate(bytes)
        guard let out else {
            throw ValidationError("playing to a sound card is not available in this build yet: use --out FILE.wav")
        }
        let silence = [Float](repeating: 0, count: Int(padding * rate))
        do {
            try AudioFile.write(silence + burst + silence, sampleRate: rate, to: out, format: AudioFileFormat(path: out))
        } catch {
            throw CommandError("\(error)")
        }
        printError("sent \(bytes.hex) (\(bytes.count) bytes, profile \(profile.name), \(fixed(Double(burst.count) / rate, 3)) s) to \(out)")
    }
}
