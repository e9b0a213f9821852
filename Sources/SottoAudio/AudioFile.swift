import CSndFile
import Glibc

/// What an audio file holds, as libsndfile reports it.
public struct AudioFileInfo: Sendable, Hashable {
    /// Sample rate (Hz).
    public var sampleRate: Double
    /// Interleaved channels.
    public var channels: Int
    /// Frames (samples per channel) the header announces; nil when it does not say (a streamed FLAC). Only
    /// an announcement: a damaged file may hold fewer, so never use it as a loop bound; count what is read.
    public var frames: Int64?
    /// Container and sample encoding, e.g. "WAV 16-bit PCM".
    public var format: String
}

/// Which channel of a multi-channel file to read.
public enum ChannelSelection: Sendable, Hashable {
    /// The average of all channels.
    case mix
    /// One channel, numbered from 0.
    case channel(Int)
}

/// Why an audio file could not be read or written; each case says what to do.
public enum AudioFileError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file could not be opened: missing, unreadable, not audio, or a corrupt header.
    case cannotOpen(path: String, reason: String)
    /// The file has no samples.
    case empty(path: String)
    /// A header field makes no sense (rate, channel count).
    case unsupported(path: String, reason: String)
    /// The file ended or broke in the middle of its data.
    case readFailed(path: String, reason: String)
    /// The requested channel does not exist.
    case invalidChannel(Int, available: Int)
    /// The output could not be written.
    case writeFailed(path: String, reason: String)
    /// The sample rate to write is not a positive rate up to 768 kHz.
    case invalidSampleRate(Double)
    /// The file's header gives a sample rate outside ``AudioFileReader/supportedSampleRates``.
    case unsupportedSampleRate(path: String, rate: Int)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason):
            return "cannot open \(path): \(reason)"
        case .empty(let path):
            return "\(path) holds no audio samples"
        case .unsupported(let path, let reason):
            return "\(path): \(reason)"
        case .readFailed(let path, let reason):
            return "error reading \(path): \(reason)"
        case .invalidChannel(let channel, let available):
            return "channel \(channel) does not exist: the file has \(available) channel\(available == 1 ? "" : "s") (0...\(available - 1)), or use mix"
        case .writeFailed(let path, let reason):
            return "cannot write \(path): \(reason)"
        case .invalidSampleRate(let rate):
            return "invalid sample rate \(rate) Hz: expected a positive rate up to 768 kHz"
        case .unsupportedSampleRate(let path, let rate):
            let range = AudioFileReader.supportedSampleRates
            return "\(path): the header gives a sample rate of \(rate) Hz; supported input files are \(Int(range.lowerBound)) to \(Int(range.upperBound)) Hz (corrupt header, or resample the file)"
        }
    }
}

/// Output container and sample encoding.
public enum AudioFileFormat: String, Sendable, CaseIterable {
    case wav16, wav24, wav32, wavFloat, flac16, flac24, aiff16

    /// The format for a path's extension: .flac is FLAC 16-bit, .aif/.aiff AIFF 16-bit, anything else WAV 16-bit.
    public init(path: String) {
        let lower = path.lowercased()
        if lower.hasSuffix(".flac") { self = .flac16 }
        else if lower.hasSuffix(".aif") || lower.hasSuffix(".aiff") { self = .aiff16 }
        else { self = .wav16 }
    }

    /// Bytes per sample in the file for WAV and AIFF, whose chunk sizes are 32-bit; nil for FLAC (no limit).
    var bytesPerSampleInSizedChunk: Int? {
        switch self {
        case .wav16, .aiff16: return 2
        case .wav24: return 3
        case .wav32, .wavFloat: return 4
        case .flac16, .flac24: return nil
        }
    }

    /// Longest mono audio (s) a file of this format holds at `sampleRate` (Hz); nil when unlimited.
    public func maximumDuration(sampleRate: Double) -> Double? {
        bytesPerSampleInSizedChunk.map { Double(AudioFileWriter.sizedChunkLimit / Int64($0)) / sampleRate }
    }

    var sndfileFormat: Int32 {
        switch self {
        case .wav16: return Int32(SF_FORMAT_WAV | SF_FORMAT_PCM_16)
        case .wav24: return Int32(SF_FORMAT_WAV | SF_FORMAT_PCM_24)
        case .wav32: return Int32(SF_FORMAT_WAV | SF_FORMAT_PCM_32)
        case .wavFloat: return Int32(SF_FORMAT_WAV | SF_FORMAT_FLOAT)
        case .flac16: return Int32(SF_FORMAT_FLAC | SF_FORMAT_PCM_16)
        case .flac24: return Int32(SF_FORMAT_FLAC | SF_FORMAT_PCM_24)
        case .aiff16: return Int32(SF_FORMAT_AIFF | SF_FORMAT_PCM_16)
        }
    }
}

/// A libsndfile error string without its "Error : " prefix and final full stop.
func libsndfileMessage(_ text: UnsafePointer<CChar>?) -> String {
    guard let text else { return "unknown error" }
    var message = Substring(String(cString: text))
    if message.hasPrefix("Error : ") { message = message.dropFirst(8) }
    while message.last == "." { message = message.dropLast() }
    return message.isEmpty ? "unknown error" : String(message)
}

/// Describes a libsndfile format code, e.g. "WAV 16-bit PCM".
func describeFormat(_ format: Int32) -> String {
    let major: String
    switch Int(format) & SF_FORMAT_TYPEMASK {
    case SF_FORMAT_WAV: major = "WAV"
    case SF_FORMAT_WAVEX: major = "WAVE_FORMAT_EXTENSIBLE"
    case SF_FORMAT_AIFF: major = "AIFF"
    case SF_FORMAT_FLAC: major = "FLAC"
    case SF_FORMAT_OGG: major = "Ogg"
    case SF_FORMAT_RF64: major = "RF64"
    case SF_FORMAT_W64: major = "W64"
    case SF_FORMAT_CAF: major = "CAF"
    case SF_FORMAT_AU: major = "AU"
    default: major = "audio"
    }
    let minor: String
    switch Int(format) & SF_FORMAT_SUBMASK {
    case SF_FORMAT_PCM_S8, SF_FORMAT_PCM_U8: minor = "8-bit PCM"
    case SF_FORMAT_PCM_16: minor = "16-bit PCM"
    case SF_FORMAT_PCM_24: minor = "24-bit PCM"
    case SF_FORMAT_PCM_32: minor = "32-bit PCM"
    case SF_FORMAT_FLOAT: minor = "32-bit float"
    case SF_FORMAT_DOUBLE: minor = "64-bit float"
    case SF_FORMAT_VORBIS: minor = "Vorbis"
    default: minor = "encoded"
    }
    return "\(major) \(minor)"
}

/// Streams samples from an audio file (any format libsndfile reads) block by block, as Float in
/// [-1, 1], one channel or the mix: memory does not grow with the file.
///
/// A class because it owns the open file; one owner, not for concurrent use.
public final class AudioFileReader {
    /// What the file holds.
    public let info: AudioFileInfo
    public let path: String
    private let file: OpaquePointer
    private let selection: ChannelSelection
    private var interleaved: [Float] = []
    /// Frames read so far.
    public private(set) var framesRead: Int64 = 0
    /// A read error met after some frames of the same read were returned: thrown by the next read, so that
    /// the caller first gets every frame decoded before it.
    private var pendingError: AudioFileError?

    /// Largest channel count accepted (beyond this, a header is treated as corrupt).
    static let maximumChannels = 256
    /// Sample rates (Hz) of the files read: from telephone-band recordings to the highest rate of audio
    /// interfaces. Anything else is a corrupt header (a WAV claiming 1 Hz would make a 10 ms stage of
    /// the simulator or receiver span days of samples) and is refused when the file is opened.
    public static let supportedSampleRates: ClosedRange<Double> = 8_000...384_000

    /// Opens `path` for reading.
    public init(path: String, channel: ChannelSelection = .mix) throws(AudioFileError) {
        self.path = path
        var sfInfo = SF_INFO()
        guard let handle = sf_open(path, Int32(SFM_READ), &sfInfo) else {
            let reason = String(cString: sf_strerror(nil))
            throw .cannotOpen(path: path, reason: reason.isEmpty ? "unknown error" : reason)
        }
        file = handle
        guard sfInfo.channels > 0, sfInfo.channels <= Int32(Self.maximumChannels) else {
            sf_close(handle)
            throw .unsupported(path: path, reason: "\(sfInfo.channels) channels in the header: the file is corrupt or not supported")
        }
        guard Self.supportedSampleRates.contains(Double(sfInfo.samplerate)) else {
            sf_close(handle)
            throw .unsupportedSampleRate(path: path, rate: Int(sfInfo.samplerate))
        }
        guard sfInfo.frames > 0 else {
            sf_close(handle)
            throw .empty(path: path)
        }
        if case .channel(let index) = channel, !(0..<Int(sfInfo.channels)).contains(index) {
            sf_close(handle)
            throw .invalidChannel(index, available: Int(sfInfo.channels))
        }
        // Integer formats are scaled to [-1, 1); float files are read as they are.
        sf_command(handle, Int32(SFC_SET_NORM_FLOAT), nil, Int32(SF_TRUE))
        // libsndfile reports an unknown length (FLAC streamed without a total) as SF_COUNT_MAX.
        let announcedFrames: Int64? = sfInfo.frames == Int64.max ? nil : Int64(sfInfo.frames)
        info = AudioFileInfo(sampleRate: Double(sfInfo.samplerate), channels: Int(sfInfo.channels),
                             frames: announcedFrames, format: describeFormat(sfInfo.format))
        selection = channel
    }

    deinit { sf_close(file) }

    /// Reads up to `buffer.count` frames of the selected channel (or mix) into `buffer`; returns the
    /// number read, 0 at the end. Non-finite samples are replaced by 0.
    ///
    /// libsndfile's error state is checked after every read: a read that fails part-way returns the
    /// frames it got, and the next call throws ``AudioFileError/readFailed(path:reason:)``.
    public func read(into buffer: UnsafeMutableBufferPointer<Float>) throws(AudioFileError) -> Int {
        if let pendingError { throw pendingError }
        guard buffer.count > 0 else { return 0 }
        let channels = info.channels
        if interleaved.count < buffer.count * channels { interleaved = [Float](repeating: 0, count: buffer.count * channels) }
        let got = interleaved.withUnsafeMutableBufferPointer { raw in
            sf_readf_float(file, raw.baseAddress, sf_count_t(buffer.count))
        }
        if got < 0 { throw .readFailed(path: path, reason: String(cString: sf_strerror(file))) }
        let frames = Int(got)
        let code = sf_error(file)
        if code != 0 {
            let error = AudioFileError.readFailed(path: path, reason: "\(libsndfileMessage(sf_error_number(code))) after \(framesRead + Int64(frames)) frames")
            if frames == 0 { throw error }
            pendingError = error
        }
        if frames == 0 { return 0 }
        interleaved.withUnsafeBufferPointer { raw in
            switch selection {
            case .channel(let index):
                for i in 0..<frames { buffer[i] = raw[i * channels + index] }
            case .mix:
                let scale = 1 / Float(channels)
                for i in 0..<frames {
                    var sum: Float = 0
                    for c in 0..<channels { sum += raw[i * channels + c] }
                    buffer[i] = sum * scale
                }
            }
            for i in 0..<frames where !buffer[i].isFinite { buffer[i] = 0 }
        }
        framesRead += Int64(frames)
        return frames
    }

    /// Reads the rest of the file.
    public func readAll() throws(AudioFileError) -> [Float] {
        var result: [Float] = []
        // The announcement is a hint only (a corrupt header may claim anything): reserve at most 16 M samples.
        result.reserveCapacity(Int(min(info.frames ?? 0, 1 << 24)))
        var block = [Float](repeating: 0, count: 1 << 16)
        while true {
            let n = try block.withUnsafeMutableBufferPointer { (buffer) throws(AudioFileError) -> Int in try read(into: buffer) }
            if n == 0 { break }
            result += block[0..<n]
        }
        return result
    }
}

/// Whole-file reading and writing through libsndfile.
public enum AudioFile {
    /// Reads a whole file: the selected channel (or the mix) as Float in [-1, 1].
    public static func read(path: String, channel: ChannelSelection = .mix) throws(AudioFileError) -> (samples: [Float], info: AudioFileInfo) {
        let reader = try AudioFileReader(path: path, channel: channel)
        return (try reader.readAll(), reader.info)
    }

    /// Writes mono samples (full scale = 1; values beyond are clipped, not wrapped) at `sampleRate` (Hz).
    public static func write(_ samples: [Float], sampleRate: Double, to path: String, format: AudioFileFormat = .wav16) throws(AudioFileError) {
        let writer = try AudioFileWriter(path: path, sampleRate: sampleRate, format: format)
        try samples.withUnsafeBufferPointer { (buffer) throws(AudioFileError) in try writer.write(buffer) }
        try writer.close()
    }
}

/// Writes interleaved multi-channel samples as 16-bit WAV (tests and tools).
func writeInterleaved(_ samples: [Float], channels: Int, sampleRate: Double, path: String) throws(AudioFileError) {
    let writer = try AudioFileWriter(path: path, sampleRate: sampleRate, channels: channels)
    try samples.withUnsafeBufferPointer { (buffer) throws(AudioFileError) in try writer.write(buffer) }
    try writer.close()
}

/// Writes an audio file block by block (mono unless told otherwise), for recordings of unbounded length
/// and for whole files alike: memory does not grow with the file.
///
/// By default the samples go to a temporary name in the same directory, renamed to `path` by ``close()``:
/// a write that fails (or a writer dropped without `close()`) leaves no partial file behind. A `path` that
/// exists and is not a regular file (a device, a pipe) is written directly, as is any file opened with
/// `atomically: false` (a live recording, where what was captured before a crash matters more).
public final class AudioFileWriter {
    private var file: OpaquePointer?
    public let path: String
    /// Where the samples go until `close()` renames it to `path` (equal to `path` when written directly).
    private let temporaryPath: String
    /// Interleaved channels per frame.
    public let channels: Int
    /// Frames written so far.
    public private(set) var framesWritten: Int64 = 0
    /// Most sample bytes the format's 32-bit chunk sizes can describe (WAV, AIFF: 4 GiB less room for the
    /// header); nil when unlimited (FLAC). Beyond it libsndfile would write wrapped sizes: a corrupt file.
    var maximumDataBytes: Int64?
    /// Sample bytes a 32-bit chunk size can describe, less room for the header (bytes).
    static let sizedChunkLimit = Int64(UInt32.max) - 4096
    /// Bytes of one frame in the file.
    private let bytesPerFrame: Int64
    private let format: AudioFileFormat
    /// Frames per second (Hz).
    private let sampleRate: Double

    public init(path: String, sampleRate: Double, format: AudioFileFormat = .wav16, channels: Int = 1,
                atomically: Bool = true) throws(AudioFileError) {
        guard sampleRate.isFinite, sampleRate >= 1, sampleRate <= 768_000 else { throw .invalidSampleRate(sampleRate) }
        self.path = path
        self.channels = channels
        self.format = format
        self.sampleRate = sampleRate
        bytesPerFrame = Int64(channels * (format.bytesPerSampleInSizedChunk ?? 0))
        maximumDataBytes = format.bytesPerSampleInSizedChunk.map { _ in Self.sizedChunkLimit }
        var sfInfo = SF_INFO()
        sfInfo.samplerate = Int32(sampleRate.rounded())
        sfInfo.channels = Int32(channels)
        sfInfo.format = format.sndfileFormat
        guard sf_format_check(&sfInfo) != 0 else {
            throw .writeFailed(path: path, reason: "libsndfile cannot write \(format.rawValue) at \(Int(sampleRate)) Hz")
        }
        temporaryPath = !atomically || Self.isSpecialFile(path) ? path : Self.temporaryName(for: path)
        guard let handle = sf_open(temporaryPath, Int32(SFM_WRITE), &sfInfo) else {
            throw .writeFailed(path: path, reason: String(cString: sf_strerror(nil)))
        }
        file = handle
        // Clip instead of wrapping around when a float beyond full scale becomes an integer.
        sf_command(handle, Int32(SFC_SET_CLIPPING), nil, Int32(SF_TRUE))
    }

    /// Appends interleaved samples (whole frames).
    public func write(_ samples: UnsafeBufferPointer<Float>) throws(AudioFileError) {
        guard let file else { throw .writeFailed(path: path, reason: "the file is closed") }
        let frames = samples.count / channels
        if let maximumDataBytes, (framesWritten + Int64(frames)) * bytesPerFrame > maximumDataBytes {
            discard()
            let hours = Double(maximumDataBytes / bytesPerFrame) / Double(sampleRate) / 3600
            throw .writeFailed(path: path, reason: "a \(format.rawValue) file holds at most 4 GiB of samples (\(Int(hours)) h at this rate): write FLAC (.flac) for longer audio")
        }
        let written = sf_writef_float(file, samples.baseAddress, sf_count_t(frames))
        guard written == frames else {
            let reason = String(cString: sf_strerror(file))
            discard()
            throw .writeFailed(path: path, reason: "wrote \(written) of \(frames) frames: \(reason)")
        }
        framesWritten += Int64(written)
    }

    /// Finishes the file (header sizes) and gives it its name, reporting a failure to do either.
    public func close() throws(AudioFileError) {
        guard let file else { return }
        self.file = nil
        guard sf_close(file) == 0 else {
            removeTemporary()
            throw .writeFailed(path: path, reason: "could not finish the file (disk full?)")
        }
        guard temporaryPath == path || rename(temporaryPath, path) == 0 else {
            let reason = String(cString: strerror(errno))
            removeTemporary()
            throw .writeFailed(path: path, reason: reason)
        }
    }

    /// Closes and deletes the unfinished file.
    private func discard() {
        if let file { sf_close(file) }
        file = nil
        removeTemporary()
    }

    private func removeTemporary() { if temporaryPath != path { unlink(temporaryPath) } }

    deinit { discard() }

    /// A hidden name next to `path`, unique to this process and writer.
    private static func temporaryName(for path: String) -> String {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        return "\(directory).\(name).\(getpid())-\(UInt32.random(in: 0...UInt32.max)).partial"
    }

    /// True when `path` exists and is not a regular file (renaming onto it would replace the device).
    private static func isSpecialFile(_ path: String) -> Bool {
        var status = stat()
        guard stat(path, &status) == 0 else { return false }
        return (status.st_mode & S_IFMT) != S_IFREG
    }
}
