import RealModule
import SottoAudio
import SottoChannel
import SottoDSP
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
    /// quantises, the output's peak. Standard input (or a named pipe) is copied to an unlinked temporary file
    /// first (4 bytes a sample, in `TMPDIR`), to be read again. The interference streams too (any length: read
    /// in passes of its own for its length and the power of the part mixed in). The impulse response (at most
    /// ``longestResponse`` s) is held in memory. `stop` (SIGINT) ends the write, leaving no file behind.
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
        let interferer = try interference.map { path in
            try InterferenceFile(path: path, inputRate: info.sampleRate, outputRate: model.outputRate ?? info.sampleRate, stop: stop)
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
                              interferenceSource: interferer, measuredImpulseResponse: measured)
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

    /// Longest recording (s) the benchmarks and sweeps read whole (speech, measured rooms, noise): about 230 MB
    /// at 48 kHz.
    public static let longestBenchInput: Double = 1_200

    /// A whole recording (its channels mixed) that a tool holds in memory, and what its header says: at most
    /// ``longestBenchInput`` s, a longer one refused from its header (or as it is read from a stream) with the reason.
    /// - Parameters:
    ///   - path: the recording; `-` reads standard input.
    ///   - tool: the command holding it, for the error.
    public static func readWhole(_ path: String, tool: String) throws -> (samples: [Float], info: AudioFileInfo) {
        try read(path, channel: .mix, longest: longestBenchInput, role: "a recording", tool: tool)
    }

    /// Reads a whole recording of at most `longest` seconds (checked against the header first, then while
    /// reading a stream); `tool` and `role` name who holds it, for the error.
    static func read(_ path: String, channel: ChannelSelection, longest: Double, role: String,
                     tool: String = "simulate") throws -> (samples: [Float], info: AudioFileInfo) {
        let reader = try AudioFileReader(path: path, channel: channel)
        let most = Int64(longest * reader.info.sampleRate)
        let name = path == "-" ? "standard input" : path
        let tooLong = "\(name) is longer than \(Int(longest)) s, the most \(tool) holds in memory for \(role): cut it first (e.g. sox \(name) part.wav trim 0 \(Int(longest)))"
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
        // Standard input and named pipes (a shell's <(...)) can be read once: copied for the later passes.
        if reader.isStream {
            try spoolStandardInput(reader)
        } else {
            opened = reader
        }
    }

    deinit { if spool >= 0 { close(spool) } }

    /// Reads the whole recording once, block by block, into `body`; `stop` set ends it with an error.
    func pass(stop: StopFlag?, _ body: ([Float]) throws -> Void) throws {
        let cursor = try self.cursor(stop: stop)
        while let block = try cursor.next() { try body(block) }
    }

    /// A pass over the recording, block by block as asked for.
    func cursor(stop: StopFlag?) throws -> Cursor {
        if spool >= 0 { return Cursor(spool: spool, frames: spooledFrames, stop: stop) }
        let reader = try opened ?? AudioFileReader(path: path, channel: .mix)
        opened = nil
        return Cursor(reader: reader, stop: stop)
    }

    /// One pass over the recording: its blocks in order.
    final class Cursor {
        private let reader: AudioFileReader?
        private let spool: Int32
        private let frames: Int
        private let stop: StopFlag?
        private var offset = 0
        private var block = [Float](repeating: 0, count: SimulationInput.block)

        init(reader: AudioFileReader, stop: StopFlag?) {
            self.reader = reader
            spool = -1
            frames = 0
            self.stop = stop
        }

        init(spool: Int32, frames: Int, stop: StopFlag?) {
            reader = nil
            self.spool = spool
            self.frames = frames
            self.stop = stop
        }

        /// The next block, or nil at the end; `stop` set ends the pass with an error.
        func next() throws -> [Float]? {
            if stop?.isSet == true { throw ChannelFile.Failure(description: "interrupted before the output was written") }
            if let reader {
                let n = try block.withUnsafeMutableBufferPointer { (buffer) throws(AudioFileError) -> Int in try reader.read(into: buffer) }
                return n == 0 ? nil : Array(block[0..<n])
            }
            guard offset < frames else { return nil }
            let count = min(SimulationInput.block, frames - offset)
            let got = block.withUnsafeMutableBytes { pread(spool, $0.baseAddress, count * 4, off_t(offset * 4)) }
            guard got == count * 4 else {
                throw ChannelFile.Failure(description: "cannot read back the copy of standard input: \(String(cString: strerror(errno)))")
            }
            offset += count
            return Array(block[0..<count])
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

/// The interference `simulate` mixes in, read from its file in passes rather than held whole: mixed to mono,
/// resampled to the input's rate and then to the output's (as ``ChannelModel/apply(_:sampleRate:interference:measuredImpulseResponse:)``
/// does, with streaming resamplers: the same samples). A pass counts it when it is opened; each later use
/// (the power of the part mixed in, then that part) reads it again from its start. Standard input is copied
/// once (see ``SimulationInput``).
final class InterferenceFile: InterferenceSource {
    let frames: Int
    private let input: SimulationInput
    private let ratios: [Double]
    private let stop: StopFlag?
    private var reading: Resampled?
    /// The last power measured, for the channel made twice (a peak pass, then the write).
    private var measured: (range: Range<Int>, power: Double)?

    init(path: String, inputRate: Double, outputRate: Double, stop: StopFlag?) throws {
        input = try SimulationInput(path: path)
        self.stop = stop
        var ratios: [Double] = []
        if input.info.sampleRate != inputRate { ratios.append(inputRate / input.info.sampleRate) }
        if outputRate != inputRate { ratios.append(outputRate / inputRate) }
        self.ratios = ratios
        var count = 0
        try input.pass(stop: stop) { count += $0.count }
        // Each resampling stage makes round(n x ratio) samples of n (none of none).
        frames = ratios.reduce(count) { n, ratio in n == 0 ? 0 : Int((Double(n) * ratio).rounded()) }
    }

    func power(of range: Range<Int>) throws -> Double {
        if let measured, measured.range == range { return measured.power }
        guard !range.isEmpty else { return 0 }
        let pass = try Resampled(try input.cursor(stop: stop), ratios: ratios)
        try pass.skip(range.lowerBound)
        var sum = 0.0
        var left = range.count
        while left > 0 {
            let block = try pass.take(min(left, SimulationInput.block))
            if block.isEmpty { break }
            for v in block { sum = sum + Double(v) * Double(v) }
            left -= block.count
        }
        let power = sum / Double(range.count)
        measured = (range, power)
        return power
    }

    func start(at offset: Int) throws {
        reading = try Resampled(try input.cursor(stop: stop), ratios: ratios)
        try reading!.skip(offset)
    }

    func next(_ count: Int) throws -> [Float] {
        guard let reading else { return [] }
        return try reading.take(count)
    }

    /// A pass over the recording through the resampling stages, taken as many samples at a time as asked.
    private final class Resampled {
        private let cursor: SimulationInput.Cursor
        private var stages: [StreamingResampler]
        private var pending: [Float] = []
        private var head = 0
        private var ended = false

        init(_ cursor: SimulationInput.Cursor, ratios: [Double]) throws {
            self.cursor = cursor
            stages = ratios.map { StreamingResampler(ratio: $0) }
        }

        /// Reads until `count` samples are pending or the recording ends.
        private func fill(_ count: Int) throws {
            while pending.count - head < count && !ended {
                var y: [Float]
                if let block = try cursor.next() {
                    y = block
                    for i in stages.indices { y = stages[i].process(y) }
                } else {
                    ended = true
                    y = []
                    for i in stages.indices { y = stages[i].process(y) + stages[i].finish() }
                }
                if head > 0 { pending.removeFirst(head); head = 0 }
                pending += y
            }
        }

        func take(_ count: Int) throws -> [Float] {
            try fill(count)
            let end = min(pending.count, head + count)
            defer { head = end }
            return Array(pending[head..<end])
        }

        func skip(_ count: Int) throws {
            var left = count
            while left > 0 {
                let taken = try take(min(left, SimulationInput.block)).count
                if taken == 0 { return }
                left -= taken
            }
        }
    }
}
