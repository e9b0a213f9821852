import RealModule
import SottoAudio
import SottoChannel

/// What `sotto simulate` does: a recording through the channel simulator into another file.
public enum ChannelFile {
    /// The inputs cannot be simulated together, with the reason.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads `input` (`-`: standard input; channels mixed), applies `model` with a measured impulse response
    /// from `impulseResponse` (its channel 0, at the input's rate) and an interfering recording (resampled to
    /// the input's rate) if given, and writes the result to `output` (format by extension; `-`: standard
    /// output). Returns what was written: samples, sample rate (Hz) and the gain applied to keep it below
    /// full scale (dB, 0 when none was needed).
    ///
    /// A measured response is normalised to its peak, so a reverberant one adds up to more than the input's
    /// level (a burst at -6 dBFS through a measured living room reached +4 dBFS, and the file's integer
    /// samples clipped a fifth of it). Unless the model clips on purpose (`clipLevel`), output that would
    /// exceed full scale is scaled down to peak at ``outputPeak`` instead, and the gain is returned.
    @discardableResult
    public static func simulate(input: String, output: String, model: ChannelModel, impulseResponse: String? = nil,
                                interference: String? = nil) throws -> (samples: Int, sampleRate: Double, gainDB: Double) {
        let (samples, info) = try read(input, channel: .mix)
        let measured = try impulseResponse.map { path -> [Float] in
            let (response, responseInfo) = try read(path, channel: .channel(0))
            guard responseInfo.sampleRate == info.sampleRate else {
                throw Failure(description: "the impulse response is at \(Int(responseInfo.sampleRate)) Hz but the input at \(Int(info.sampleRate)) Hz: resample one of them first")
            }
            // The response is normalised to its peak: one with no finite non-zero sample would silence the output.
            guard response.contains(where: { $0 != 0 }) else {
                throw Failure(description: "the impulse response \(path) is silent (all zeros, or not finite samples read as 0): the output would be silence")
            }
            return response
        }
        let interferer = try interference.map { path -> [Float] in
            let (other, otherInfo) = try read(path, channel: .mix)
            return otherInfo.sampleRate == info.sampleRate ? other : Channel.resample(other, from: otherInfo.sampleRate, to: info.sampleRate)
        }
        // SNR and SIR are relative to the input's active power: on a silent input they mean nothing.
        if model.snrDB != nil || interferer != nil, Channel.activePower(samples, sampleRate: info.sampleRate) == 0 {
            throw Failure(description: "\(input) is silent: --snr and --interference are set relative to the signal's power, which is 0")
        }
        var result = model.apply(samples, sampleRate: info.sampleRate, interference: interferer, measuredImpulseResponse: measured)
        let peak = result.samples.reduce(Float(0)) { max($0, abs($1)) }
        var gainDB = 0.0
        if peak > 1, model.clipLevel == nil {
            let gain = outputPeak / peak
            for i in result.samples.indices { result.samples[i] *= gain }
            gainDB = 20 * Double.log10(Double(gain))
        }
        try AudioFile.write(result.samples, sampleRate: result.sampleRate, to: output, format: AudioFileFormat(path: output))
        return (result.samples.count, result.sampleRate, gainDB)
    }

    /// Longest recording simulated (s): the simulator holds its inputs in memory (about 105 MB a minute at
    /// 48 kHz, more for the room's transforms), so a longer one is refused before it is read, instead of
    /// ending the program when an allocation fails.
    public static let longestInput: Double = 1_200

    /// Reads a whole recording of at most ``longestInput`` seconds (checked against the header first, then
    /// while reading a stream).
    static func read(_ path: String, channel: ChannelSelection) throws -> (samples: [Float], info: AudioFileInfo) {
        let reader = try AudioFileReader(path: path, channel: channel)
        let most = Int64(longestInput * reader.info.sampleRate)
        let name = path == "-" ? "standard input" : path
        let tooLong = "\(name) is longer than \(Int(longestInput)) s, the most simulate holds in memory: cut it first (e.g. sox \(name) part.wav trim 0 \(Int(longestInput)))"
        if let frames = reader.info.frames, frames > most { throw Failure(description: tooLong) }
        var samples: [Float] = []
        var block = [Float](repeating: 0, count: 1 << 16)
        while true {
            let n = try block.withUnsafeMutableBufferPointer { (buffer) throws(AudioFileError) -> Int in try reader.read(into: buffer) }
            if n == 0 { break }
            guard Int64(samples.count + n) <= most else { throw Failure(description: tooLong) }
            samples += block[0..<n]
        }
        return (samples, reader.info)
    }

    /// Peak (full scale = 1) that output too loud for the file is scaled to: -1 dBFS.
    public static let outputPeak: Float = 0.891
}
