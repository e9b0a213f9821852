import ArgumentParser
import SottoAudio
import SottoChannel
import SottoTools

/// `sotto simulate`: pass a recording through a simulated room and devices.
struct Simulate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Pass audio through a simulated acoustic channel (reverberation, roll-off, clock offset, resampling, interference, noise, clipping, quantisation).",
        discussion: "Stages are applied in this order; each is off unless asked for. Seeded and reproducible. Recordings of any length stream through in bounded memory (standard input or a named pipe is copied to a temporary file in TMPDIR first, to be read again), --interference too (read in passes); the output holds at most \(Int(FrameScheduleWriter.longestDuration)) s, an --rir at most \(Int(ChannelFile.longestResponse)) s (held in memory).")

    @Argument(help: "Input recording; - reads standard input.") var input: String
    @Argument(help: "Output file, as -o/--out (the positional spelling is kept).") var positionalOutput: String?
    @Option(name: [.customShort("o"), .long], help: "Output file (format by extension: \(AudioFileFormat.byExtension.keys.sorted().joined(separator: ", "))); - writes WAV to standard output.") var out: String?
    @Option(parsing: .unconditional, help: "Reverberation time RT60 at mid frequencies (s); a synthetic room, with --distance.") var rt60: Double?
    @Option(parsing: .unconditional, help: "Source-microphone distance for the synthetic room (m; default 1).") var distance: Double?
    @Option(parsing: .unconditional, help: "Room volume for the synthetic room (m^3; default 60).") var roomVolume: Double?
    /// The old spelling of --room-volume (--volume is a level in dBFS in send).
    @Option(name: .customLong("volume"), parsing: .unconditional, help: ArgumentHelp(visibility: .hidden)) var deprecatedVolume: Double?
    @Option(parsing: .unconditional, help: "Directivity factor Q of the source for the synthetic room (1 = omnidirectional; default 4).") var directivity: Double?
    @Option(help: "Convolve with this measured room impulse response (audio file) instead: normalised to its peak; output that would then exceed full scale is scaled to -1 dBFS, with a note.") var rir: String?
    @Option(parsing: .unconditional, help: "Speaker/microphone roll-off corner (Hz), --roll-off-slope above it.") var rollOff: Double?
    @Option(parsing: .unconditional, help: "Slope of the roll-off above its corner (dB/octave: 12, 24, ... 96; default 24).") var rollOffSlope: Double?
    @Option(parsing: .unconditional, help: "Receiver sample-clock offset (ppm, positive: receiver clock fast, frame arrives stretched).") var ppm: Double?
    @Option(parsing: .unconditional, help: "Output sample rate (Hz).") var rate: Double?
    @Option(help: "Add this recording (speech, music) as interference, at --sir.") var interference: String?
    @Option(parsing: .unconditional, help: "Signal-to-interference ratio (dB).") var sir: Double = 0
    @Option(parsing: .unconditional, help: "White noise at this SNR (dB): active signal power over noise power in 0..fs/2.") var snr: Double?
    @Option(parsing: .unconditional, help: "Hard-clip at this level (full scale = 1).") var clip: Double?
    @Flag(help: "Quantise to 16 bits with TPDF dither.") var quantize16 = false
    @Option(parsing: .unconditional, help: "Random seed.") var seed: UInt64 = 1

    /// The output file (-o/--out, or the positional spelling).
    var output: String { out ?? positionalOutput ?? "-" }
    /// Room volume (m^3), under its name or its old one.
    var volume: Double? { roomVolume ?? deprecatedVolume }

    func validate() throws {
        try NumericOption("--rt60", above: 0, upTo: 10, unit: "s").check(rt60)
        try NumericOption("--distance", above: 0, upTo: 100, unit: "m").check(distance)
        if deprecatedVolume != nil {
            if roomVolume != nil { throw ValidationError("--volume is the old spelling of --room-volume: give one") }
            Deprecated.note("--volume", use: "--room-volume", in: "simulate", because: "--volume is a level in dBFS in send")
        }
        try NumericOption(roomVolume == nil && deprecatedVolume != nil ? "--volume" : "--room-volume", 5...1e6, unit: "m^3").check(volume)
        if out != nil && positionalOutput != nil { throw ValidationError("give the output once: with -o/--out or as the second argument") }
        if out == nil && positionalOutput == nil { throw ValidationError("give the output file with -o/--out (- writes WAV to standard output)") }
        try NumericOption.directivity.check(directivity)
        try NumericOption("--ppm", -100_000...100_000, unit: "ppm").check(ppm)
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
        try NumericOption("--snr", -200...200, unit: "dB").check(snr)
        try NumericOption("--sir", -200...200, unit: "dB").check(sir)
        try NumericOption("--clip", above: 0, upTo: 1).check(clip)
        try NumericOption("--roll-off", above: 100, upTo: 1e6, unit: "Hz").check(rollOff)
        try NumericOption("--roll-off-slope", 12...96, unit: "dB/octave").check(rollOffSlope)
        if rollOffSlope != nil && rollOff == nil { throw ValidationError("--roll-off-slope needs --roll-off (the corner)") }
        if rt60 != nil && rir != nil { throw ValidationError("use either --rt60 (synthetic room) or --rir (measured), not both") }
        if interference == nil && sir != 0 { throw ValidationError("--sir is the level of --interference: give the recording with --interference") }
        if rt60 == nil && (distance != nil || volume != nil || directivity != nil) {
            throw ValidationError("--distance, --room-volume and --directivity shape the synthetic room: give its --rt60")
        }
        if [input, rir, interference].filter({ $0 == "-" }).count > 1 { throw ValidationError("standard input (-) can be read once") }
        do { _ = try AudioFileFormat(path: output) } catch { throw ValidationError(error.description) }
    }

    func run() throws {
        try Listen.checkOutput(output)
        do {
            var model = ChannelModel(seed: seed)
            model.rt60 = rt60
            model.distance = distance ?? 1
            model.volume = volume ?? 60
            model.directivity = directivity ?? 4
            model.snrDB = snr
            model.ppm = ppm
            model.outputRate = rate
            model.rollOffCornerHz = rollOff
            model.rollOffSlopeDBPerOctave = rollOffSlope
            model.clipLevel = clip.map { Float($0) }
            model.quantize16 = quantize16
            model.sirDB = interference == nil ? nil : sir
            let written = try ChannelFile.simulate(input: input, output: output, model: model, impulseResponse: rir, interference: interference,
                                                      stop: Interruption.stop)
            printError("simulated \(input == "-" ? "standard input" : input) -> \(output == "-" ? "standard output" : output) (\(fixed(Double(written.samples) / written.sampleRate, 2)) s at \(Int(written.sampleRate)) Hz)")
            if written.gainDB < 0 {
                printError("note: the channel took the signal above full scale; the output was scaled by \(fixed(written.gainDB, 1)) dB to peak at -1 dBFS instead of clipping (--clip models clipping)")
            }
        } catch {
            throw CommandError("\(error)")
        }
    }
}
