import CSndFile

/// What an audio file holds, as libsndfile reports it.
public struct AudioFileInfo: Sendable, Hashable {
    /// Sample rate (Hz).
    public var sampleRate: Double
    /// Interleaved channels.
    public var channels: Int
    /// Frames (samples per channel) the header announces.
    public var frames: Int64
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

    /// Largest channel count accepted (beyond this, a header is treated as corrupt).
    static let maximumChannels = 256

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
        guard sfInfo.samplerate > 0, sfInfo.samplerate <= 768_000 else {
            sf_close(handle)
            throw .unsupported(path: path, reason: "sample rate \(sfInfo.samplerate) Hz in the header: the file is corrupt or not supported")
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
        info = AudioFileInfo(sampleRate: Double(sfInfo.samplerate), channels: Int(sfInfo.channels),
                             frames: Int64(sfInfo.frames), format: describeFormat(sfInfo.format))
        selection = channel
    }

    deinit { sf_close(file) }

    /// Reads up to `buffer.count` frames of the selected channel (or mix) into `buffer`; returns the
    /// number read, 0 at the end. Non-finite samples are replaced by 0.
    public func read(into buffer: UnsafeMutableBufferPointer<Float>) throws(AudioFileError) -> Int {
        guard buffer.count > 0 else { return 0 }
        let channels = info.channels
        if interleaved.count < buffer.count * channels { interleaved = [Float](repeating: 0, count: buffer.count * channels) }
        let got = interleaved.withUnsafeMutableBufferPointer { raw in
            sf_readf_float(file, raw.baseAddress, sf_count_t(buffer.count))
        }
        if got < 0 { throw .readFailed(path: path, reason: String(cString: sf_strerror(file))) }
        let frames = Int(got)
        if frames == 0 {
            let code = sf_error(file)
            if code != 0 { throw .readFailed(path: path, reason: String(cString: sf_error_number(code))) }
            return 0
        }
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
        result.reserveCapacity(Int(min(info.frames, 1 << 28)))
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
/// and for whole files alike.
public final class AudioFileWriter {
    private var file: OpaquePointer?
    public let path: String
    /// Interleaved channels per frame.
    public let channels: Int
    /// Frames written so far.
    public private(set) var framesWritten: Int64 = 0

    public init(path: String, sampleRate: Double, format: AudioFileFormat = .wav16, channels: Int = 1) throws(AudioFileError) {
        guard sampleRate.isFinite, sampleRate >= 1, sampleRate <= 768_000 else { throw .invalidSampleRate(sampleRate) }
        self.path = path
        self.channels = channels
        var sfInfo = SF_INFO()
        sfInfo.samplerate = Int32(sampleRate.rounded())
        sfInfo.channels = Int32(channels)
        sfInfo.format = format.sndfileFormat
        guard sf_format_check(&sfInfo) != 0 else {
            throw .writeFailed(path: path, reason: "libsndfile cannot write \(format.rawValue) at \(Int(sampleRate)) Hz")
        }
        guard let handle = sf_open(path, Int32(SFM_WRITE), &sfInfo) else {
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
        let written = sf_writef_float(file, samples.baseAddress, sf_count_t(frames))
        guard written == frames else { throw .writeFailed(path: path, reason: "wrote \(written) of \(frames) frames (disk full?)") }
        framesWritten += Int64(written)
    }

    /// Finishes the file (header sizes), reporting a failure to do so.
    public func close() throws(AudioFileError) {
        guard let file else { return }
        self.file = nil
        guard sf_close(file) == 0 else { throw .writeFailed(path: path, reason: "could not finish the file (disk full?)") }
    }

    deinit { if let file { sf_close(file) } }
}
