import ArgumentParser
import SottoAudio
import SottoChannel

/// `sotto simulate`: pass a recording through a simulated room and devices.
struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Pass audio through a simulated acoustic channel (reverberation, roll-off, clock offset, resampling, interference, noise, clipping, quantisation).",
        discussion: "Stages are applied in this order; each is off unless asked for. Seeded and reproducible.")

    @Argument(help: "Input audio file.") var input: String
    @Argument(help: "Output file (WAV/FLAC/AIFF by extension).") var output: String
    @Option(help: "Reverberation time RT60 at mid frequencies (s); a synthetic room, with --distance.") var rt60: Double?
    @Option(help: "Source-microphone distance for the synthetic room (m).") var distance: Double = 1
    @Option(help: "Room volume for the synthetic room (m^3).") var volume: Double = 60
    @Option(help: "Directivity factor Q of the source for the synthetic room (1 = omnidirectional).") var directivity: Double = 4
    @Option(help: "Convolve with this measured room impulse response (audio file) instead.") var rir: String?
    @Option(help: "Speaker/microphone roll-off corner (Hz), 24 dB/octave above it.") var rollOff: Double?
    @Option(help: "Receiver sample-clock offset (ppm, positive: receiver clock fast, frame arrives stretched).") var ppm: Double?
    @Option(help: "Output sample rate (Hz).") var rate: Double?
    @Option(help: "Add this recording (speech, music) as interference, at --sir.") var interference: String?
    @Option(help: "Signal-to-interference ratio (dB).") var sir: Double = 0
    @Option(help: "White noise at this SNR (dB): active signal power over noise power in 0..fs/2.") var snr: Double?
    @Option(help: "Hard-clip at this level (full scale = 1).") var clip: Double?
    @Flag(help: "Quantise to 16 bits with TPDF dither.") var quantize16 = false
    @Option(help: "Random seed.") var seed: UInt64 = 1

    func validate() throws {
        if let rt60, !(rt60.isFinite && rt60 > 0 && rt60 <= 10) { throw ValidationError("--rt60 must be in (0, 10] s") }
        if !(distance.isFinite && distance > 0 && distance <= 100) { throw ValidationError("--distance must be in (0, 100] m") }
        if !(volume.isFinite && volume >= 5 && volume <= 1e6) { throw ValidationError("--volume must be 5 to 1e6 m^3") }
        if !(directivity.isFinite && directivity >= 1 && directivity <= 100) { throw ValidationError("--directivity must be 1 to 100") }
        if let ppm, !(ppm.isFinite && abs(ppm) <= 100_000) { throw ValidationError("--ppm must be within +-100000") }
        if let rate, !(rate.isFinite && rate >= 8_000 && rate <= 768_000) { throw ValidationError("--rate must be 8000 to 768000 Hz") }
        if let snr, !(snr.isFinite && abs(snr) <= 200) { throw ValidationError("--snr must be within +-200 dB") }
        if !(sir.isFinite && abs(sir) <= 200) { throw ValidationError("--sir must be within +-200 dB") }
        if let clip, !(clip.isFinite && clip > 0 && clip <= 1) { throw ValidationError("--clip must be in (0, 1]") }
        if let rollOff, !(rollOff.isFinite && rollOff > 100) { throw ValidationError("--roll-off must be above 100 Hz") }
        if rt60 != nil && rir != nil { throw ValidationError("use either --rt60 (synthetic room) or --rir (measured), not both") }
    }

    func run() throws {
        do {
            let (samples, info) = try AudioFile.read(path: input, channel: .mix)
            var model = ChannelModel(seed: seed)
            model.rt60 = rt60
            model.distance = distance
            model.volume = volume
            model.directivity = directivity
            model.snrDB = snr
            model.ppm = ppm
            model.outputRate = rate
            model.rollOffCornerHz = rollOff
            model.clipLevel = clip.map { Float($0) }
            model.quantize16 = quantize16
            model.sirDB = interference == nil ? nil : sir
            let measured = try rir.map { path -> [Float] in
                let (response, responseInfo) = try AudioFile.read(path: path, channel: .channel(0))
                guard responseInfo.sampleRate == info.sampleRate else {
                    throw CommandError("the impulse response is at \(Int(responseInfo.sampleRate)) Hz but the input at \(Int(info.sampleRate)) Hz: resample one of them first")
                }
                return response
            }
            let interferer = try interference.map { path -> [Float] in
                let (other, otherInfo) = try AudioFile.read(path: path, channel: .mix)
                return otherInfo.sampleRate == info.sampleRate ? other
                    : Channel.resample(other, from: otherInfo.sampleRate, to: info.sampleRate)
            }
            let result = model.apply(samples, sampleRate: info.sampleRate, interference: interferer, measuredImpulseResponse: measured)
            try AudioFile.write(result.samples, sampleRate: result.sampleRate, to: output, format: AudioFileFormat(path: output))
            printError("simulated \(input) -> \(output) (\(fixed(Double(result.samples.count) / result.sampleRate, 2)) s at \(Int(result.sampleRate)) Hz)")
        } catch let error as CommandError {
            throw error
        } catch {
            throw CommandError("\(error)")
        }
    }
}
