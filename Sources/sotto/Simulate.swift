import ArgumentParser
import SottoAudio
import SottoChannel
import SottoTools

/// `sotto simulate`: pass a recording through a simulated room and devices.
struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Pass audio through a simulated acoustic channel (reverberation, roll-off, clock offset, resampling, interference, noise, clipping, quantisation).",
        discussion: "Stages are applied in this order; each is off unless asked for. Seeded and reproducible.")

    @Argument(help: "Input recording; - reads standard input.") var input: String
    @Argument(help: "Output file (format by extension: \(AudioFileFormat.byExtension.keys.sorted().joined(separator: ", "))); - writes WAV to standard output.") var output: String
    @Option(parsing: .unconditional, help: "Reverberation time RT60 at mid frequencies (s); a synthetic room, with --distance.") var rt60: Double?
    @Option(parsing: .unconditional, help: "Source-microphone distance for the synthetic room (m; default 1).") var distance: Double?
    @Option(parsing: .unconditional, help: "Room volume for the synthetic room (m^3; default 60).") var volume: Double?
    @Option(parsing: .unconditional, help: "Directivity factor Q of the source for the synthetic room (1 = omnidirectional; default 4).") var directivity: Double?
    @Option(help: "Convolve with this measured room impulse response (audio file) instead.") var rir: String?
    @Option(parsing: .unconditional, help: "Speaker/microphone roll-off corner (Hz), 24 dB/octave above it.") var rollOff: Double?
    @Option(parsing: .unconditional, help: "Receiver sample-clock offset (ppm, positive: receiver clock fast, frame arrives stretched).") var ppm: Double?
    @Option(parsing: .unconditional, help: "Output sample rate (Hz).") var rate: Double?
    @Option(help: "Add this recording (speech, music) as interference, at --sir.") var interference: String?
    @Option(parsing: .unconditional, help: "Signal-to-interference ratio (dB).") var sir: Double = 0
    @Option(parsing: .unconditional, help: "White noise at this SNR (dB): active signal power over noise power in 0..fs/2.") var snr: Double?
    @Option(parsing: .unconditional, help: "Hard-clip at this level (full scale = 1).") var clip: Double?
    @Flag(help: "Quantise to 16 bits with TPDF dither.") var quantize16 = false
    @Option(parsing: .unconditional, help: "Random seed.") var seed: UInt64 = 1

    func validate() throws {
        try NumericOption("--rt60", above: 0, upTo: 10, unit: "s").check(rt60)
        try NumericOption("--distance", above: 0, upTo: 100, unit: "m").check(distance)
        try NumericOption("--volume", 5...1e6, unit: "m^3").check(volume)
        try NumericOption.directivity.check(directivity)
        try NumericOption("--ppm", -100_000...100_000, unit: "ppm").check(ppm)
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
        try NumericOption("--snr", -200...200, unit: "dB").check(snr)
        try NumericOption("--sir", -200...200, unit: "dB").check(sir)
        try NumericOption("--clip", above: 0, upTo: 1).check(clip)
        try NumericOption("--roll-off", above: 100, upTo: 1e6, unit: "Hz").check(rollOff)
        if rt60 != nil && rir != nil { throw ValidationError("use either --rt60 (synthetic room) or --rir (measured), not both") }
        if interference == nil && sir != 0 { throw ValidationError("--sir is the level of --interference: give the recording with --interference") }
        if rt60 == nil && (distance != nil || volume != nil || directivity != nil) {
            throw ValidationError("--distance, --volume and --directivity shape the synthetic room: give its --rt60")
        }
        if [input, rir, interference].filter({ $0 == "-" }).count > 1 { throw ValidationError("standard input (-) can be read once") }
        do { _ = try AudioFileFormat(path: output) } catch { throw ValidationError(error.description) }
    }

    func run() throws {
        do {
            let (samples, info) = try AudioFile.read(path: input, channel: .mix)
            var model = ChannelModel(seed: seed)
            model.rt60 = rt60
            model.distance = distance ?? 1
            model.volume = volume ?? 60
            model.directivity = directivity ?? 4
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
                // The response is normalised to its peak: one with no finite non-zero sample would silence the output.
                guard response.contains(where: { $0 != 0 }) else {
                    throw CommandError("the impulse response \(path) is silent (all zeros, or not finite samples read as 0): the output would be silence")
                }
                return response
            }
            let interferer = try interference.map { path -> [Float] in
                let (other, otherInfo) = try AudioFile.read(path: path, channel: .mix)
                return otherInfo.sampleRate == info.sampleRate ? other
                    : Channel.resample(other, from: otherInfo.sampleRate, to: info.sampleRate)
            }
            // SNR and SIR are relative to the input's active power: on a silent input they mean nothing.
            if snr != nil || interference != nil, Channel.activePower(samples, sampleRate: info.sampleRate) == 0 {
                throw CommandError("\(input) is silent: --snr and --interference are set relative to the signal's power, which is 0")
            }
            let result = model.apply(samples, sampleRate: info.sampleRate, interference: interferer, measuredImpulseResponse: measured)
            try AudioFile.write(result.samples, sampleRate: result.sampleRate, to: output, format: AudioFileFormat(path: output))
            printError("simulated \(input == "-" ? "standard input" : input) -> \(output == "-" ? "standard output" : output) (\(fixed(Double(result.samples.count) / result.sampleRate, 2)) s at \(Int(result.sampleRate)) Hz)")
        } catch let error as CommandError {
            throw error
        } catch {
            throw CommandError("\(error)")
        }
    }
}
