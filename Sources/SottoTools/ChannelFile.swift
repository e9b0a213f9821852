import RealModule
import SottoAudio
import SottoChannel
import SottoSupport
#if canImport(Glibc)
import Glibc
#endif

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
    /// The input streams through the channel block by block (`ChannelStream` of SottoChannel): memory does not
    /// grow with its length. What the channel takes from the whole input is measured in passes of their own
    /// over it: its active power (for `snrDB` and the interference's level) and, unless the model clips or
    /// quantises, the output's peak. Standard input is copied to an unlinked temporary file first (4 bytes a
    /// sample, in `TMPDIR`), to be read again. The impulse response (at most ``longestResponse`` s) and the
    /// interference (at most ``longestInterference`` s) are held in memory. `stop` (SIGINT) ends the write,
    /// leaving no file behind.
    ///
    /// A measured response is normalised to its peak, so a reverberant one adds up to more than the input's
    /// level (a burst at -6 dBFS through a measured living room reached +4 dBFS, and the file's integer
    /// samples clipped a fifth of it). Unless the model clips on purpose (`clipLevel`), output that would
    /// exceed full scale is scaled down to peak at ``outputPeak`` instead, and the gain is returned.
    @discardableResult
    public static func simulate(input: String, output: String, model: ChannelModel, impulseResponse: String? = nil,
                                interference: String? = nil, stop: StopFlag? = nil) throws -> (samples: Int, sampleRate: Double, gainDB: Double) {
        let source = try SimulationInput(path: input)
        let info = source.info
        let measured = try impulseResponse.map { path -> [Float] in
            let (response, responseInfo) = try read(path, channel: .channel(0), longest: longestResponse, role: "an impulse response")
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
            let (other, otherInfo) = try read(path, channel: .mix, longest: longestInterference, role: "an interference recording")
            return otherInfo.sampleRate == info.sampleRate ? other : Channel.resample(other, from: otherInfo.sampleRate, to: info.sampleRate)
        }
        // SNR and SIR are relative to the input's active power (two passes), which also counts its samples.
        var signalPower: Double?
        var inputFrames: Int?
        if model.snrDB != nil || interferer != nil {
            var meter = ActivePowerMeter(sampleRate: info.sampleRate)
            try source.pass(stop: stop) { meter.add($0) }
            meter.startSecondPass()
            try source.pass(stop: stop) { meter.add($0) }
            inputFrames = meter.frames
            let power = meter.finish()
            if power == 0 {
                throw Failure(description: "\(input) is silent: --snr and --interference are set relative to the signal's power, which is 0")
            }
            signalPower = power
        }
        func channel() throws -> ChannelStream {
            try ChannelStream(model: model, sampleRate: info.sampleRate, inputFrames: inputFrames, signalPower: signalPower,
                              interference: interferer, measuredImpulseResponse: measured)
        }
        let format = try AudioFileFormat(path: output)
        let first = try channel()
        if let frames = first.outputFrames,
           let problem = FrameScheduleWriter.lengthProblem(duration: Double(frames) / first.outputRate, path: output, format: format, sampleRate: first.outputRate) {
            throw Failure(description: problem)
        }
        // The output's peak, from a pass of its own unless the model clips or quantises (both keep it in range).
        var gain: Float = 1
        var gainDB = 0.0
        if model.clipLevel == nil && !model.quantize16 {
            var peak: Float = 0
            let most = Int(FrameScheduleWriter.longestDuration * first.outputRate)
            var produced = 0
            func measure(_ y: [Float]) throws {
                produced += y.count
                if produced > most, let problem = FrameScheduleWriter.lengthProblem(duration: Double(produced) / first.outputRate, path: output, format: format, sampleRate: first.outputRate) {
                    throw Failure(description: problem)
                }
                for v in y { peak = max(peak, abs(v)) }
            }
            try source.pass(stop: stop) { try measure(first.process($0)) }
            try measure(first.finish())
            if peak > 1 {
                gain = outputPeak / peak
                gainDB = 20 * Double.log10(Double(gain))
            }
        }
        let stream = model.clipLevel == nil && !model.quantize16 ? try channel() : first
        let writer = try AudioFileWriter(path: output, sampleRate: stream.outputRate, format: format, stop: stop,
                                         expectedFrames: stream.outputFrames.map(Int64.init))
        let most = Int64(FrameScheduleWriter.longestDuration * stream.outputRate)
        func write(_ block: [Float]) throws {
            var y = block
            if gain != 1 { for i in y.indices { y[i] *= gain } }
            if writer.framesWritten + Int64(y.count) > most,
               let problem = FrameScheduleWriter.lengthProblem(duration: Double(writer.framesWritten + Int64(y.count)) / stream.outputRate, path: output, format: format, sampleRate: stream.outputRate) {
                throw Failure(description: problem)
            }
            try y.withUnsafeBufferPointer { (buffer) throws(AudioFileError) in try writer.write(buffer) }
        }
        try source.pass(stop: stop) { try write(stream.process($0)) }
        try write(stream.finish())
        try writer.close()
        return (Int(writer.framesWritten), stream.outputRate, gainDB)
    }

    /// Longest measured impulse response (s): held in memory, and transformed in blocks twice its length.
    public static let longestResponse: Double = 60

    /// Longest interference recording (s): held in memory (about 105 MB a minute at 48 kHz with its resampling).
    public static let longestInterference: Double = 1_200

    /// Reads a whole recording of at most `longest` seconds (checked against the header first, then while
    /// reading a stream).
    static func read(_ path: String, channel: ChannelSelection, longest: Double, role: String) throws -> (samples: [Float], info: AudioFileInfo) {
        let reader = try AudioFileReader(path: path, channel: channel)
        let most = Int64(longest * reader.info.sampleRate)
        let name = path == "-" ? "standard input" : path
        let tooLong = "\(name) is longer than \(Int(longest)) s, the most simulate holds in memory for \(role): cut it first (e.g. sox \(name) part.wav trim 0 \(Int(longest)))"
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

/// The recording `simulate` reads, pass by pass: a file is opened again for each pass; standard input is
/// copied to an unlinked temporary file (raw 32-bit floats, the mix of its channels) as it is first read.
final class SimulationInput {
    let path: String
    let info: AudioFileInfo
    /// The copy of standard input; -1 for a file.
    private var spool: Int32 = -1
    private var spooledFrames = 0
    /// The reader opened to learn `info`, used by the first pass.
    private var opened: AudioFileReader?
    static let block = 1 << 16

    init(path: String) throws {
        self.path = path
        let reader = try AudioFileReader(path: path, channel: .mix)
        info = reader.info
        if path == "-" {
            try spoolStandardInput(reader)
        } else {
            opened = reader
        }
    }

    deinit { if spool >= 0 { close(spool) } }

    /// Reads the whole recording once, block by block, into `body`; `stop` set ends it with an error.
    func pass(stop: StopFlag?, _ body: ([Float]) throws -> Void) throws {
        var block = [Float](repeating: 0, count: Self.block)
        if spool >= 0 {
            var offset = 0
            while offset < spooledFrames {
                if stop?.isSet == true { throw ChannelFile.Failure(description: "interrupted before the output was written") }
                let count = min(Self.block, spooledFrames - offset)
                let got = block.withUnsafeMutableBytes { pread(spool, $0.baseAddress, count * 4, off_t(offset * 4)) }
                guard got == count * 4 else {
                    throw ChannelFile.Failure(description: "cannot read back the copy of standard input: \(String(cString: strerror(errno)))")
                }
                try body(Array(block[0..<count]))
                offset += count
            }
            return
        }
        let reader = try opened ?? AudioFileReader(path: path, channel: .mix)
        opened = nil
        while true {
            if stop?.isSet == true { throw ChannelFile.Failure(description: "interrupted before the output was written") }
            let n = try block.withUnsafeMutableBufferPointer { (buffer) throws(AudioFileError) -> Int in try reader.read(into: buffer) }
            if n == 0 { break }
            try body(Array(block[0..<n]))
        }
    }

    private func spoolStandardInput(_ reader: AudioFileReader) throws {
        let directory = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array("\(directory)/sotto-simulate-XXXXXX".utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else {
            throw ChannelFile.Failure(description: "cannot make a temporary file in \(directory) for standard input: \(String(cString: strerror(errno)))")
        }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        spool = descriptor
        var block = [Float](repeating: 0, count: Self.block)
        while true {
            let n = try block.withUnsafeMutableBufferPointer { (buffer) throws(AudioFileError) -> Int in try reader.read(into: buffer) }
            if n == 0 { break }
            let bytes = n * 4
            var done = 0
            while done < bytes {
                let wrote = block.withUnsafeBytes { write(descriptor, $0.baseAddress! + done, bytes - done) }
                if wrote < 0 && errno == EINTR { continue }
                guard wrote > 0 else {
                    throw ChannelFile.Failure(description: "cannot copy standard input to a temporary file in \(directory): \(String(cString: strerror(errno)))")
                }
                done += wrote
            }
            spooledFrames += n
        }
    }
}
