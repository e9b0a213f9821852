import CSndFile
import Glibc
import SottoSupport

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
    /// An output name whose extension is no format written here.
    case unknownExtension(path: String, known: [String])
    /// The write was stopped (SIGINT, SIGTERM) before the file was complete: nothing was left at the path.
    case interrupted(path: String)
    /// A headerless layout (rate, encoding, channels) was given for data that starts with a container's
    /// header (`container`, e.g. "WAV"): refused rather than reading the header as samples.
    case rawLayoutForHeader(path: String, container: String)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason):
            return "cannot open \(path): \(reason)"
        case .empty(let path):
            return "\(path) is empty: it holds no audio samples\(path == "standard input" ? " (nothing was piped in?)" : "")"
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
        case .unknownExtension(let path, let known):
            return "\(path): no audio format is written for this extension; use one of .\(known.joined(separator: ", ."))"
        case .interrupted(let path):
            return "interrupted: \(path == "-" ? "standard output" : path) was not \(path == "-" ? "finished" : "written")"
        case .rawLayoutForHeader(let path, let container):
            return "\(path) is \(container.first.map { "AEIOU".contains($0) } == true ? "an" : "a") \(container) file with its own header: --rate, --encoding and --channels are for headerless PCM only (drop them to use the header's rate)"
        }
    }
}

/// Output container and sample encoding.
public enum AudioFileFormat: String, Sendable, CaseIterable {
    case wav16, wav24, wav32, wavFloat, flac16, flac24, aiff16
    /// Ogg Vorbis at its highest quality (lossy: keep to tests of the band it keeps).
    case oggVorbis
    /// MPEG-1 Layer III at its highest bit rate (lossy).
    case mp3
    /// Sun/NeXT AU, 16-bit: a header without sizes to patch, so it streams to a pipe.
    case au16
    /// Headerless 16-bit signed little-endian PCM (what `aplay -t raw -f S16_LE` plays).
    case raw16

    /// The format each file extension (lower case, without the dot) is written as.
    public static let byExtension: [String: AudioFileFormat] = [
        "wav": .wav16, "wave": .wav16, "flac": .flac16, "aif": .aiff16, "aiff": .aiff16, "ogg": .oggVorbis, "oga": .oggVorbis,
        "mp3": .mp3, "au": .au16, "snd": .au16, "raw": .raw16, "pcm": .raw16,
    ]

    /// The format for a path's extension (``byExtension``). Standard output (`-`) and a name without an
    /// extension are WAV 16-bit; an extension of no format written here is an error naming those that are.
    public init(path: String) throws(AudioFileError) {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard path != "-", let dot = name.lastIndex(of: "."), dot != name.startIndex else { self = .wav16; return }
        let ext = name[name.index(after: dot)...].lowercased()
        guard let format = Self.byExtension[ext] else {
            throw .unknownExtension(path: path, known: Self.byExtension.keys.sorted())
        }
        self = format
    }

    /// True for lossy codecs (Vorbis, MP3), which may filter the 18-20 kHz band away.
    public var isLossy: Bool { self == .oggVorbis || self == .mp3 }

    /// True when libsndfile writes the format to a pipe as it goes (no header to rewrite at the end).
    var streamsToPipes: Bool { self == .au16 || self == .raw16 }

    /// Bytes per sample in the file for WAV and AIFF, whose chunk sizes are 32-bit; nil for the others (no limit).
    var bytesPerSampleInSizedChunk: Int? {
        switch self {
        case .wav16, .aiff16: return 2
        case .wav24: return 3
        case .wav32, .wavFloat: return 4
        case .flac16, .flac24, .oggVorbis, .mp3, .au16, .raw16: return nil
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
        case .oggVorbis: return Int32(SF_FORMAT_OGG | SF_FORMAT_VORBIS)
        case .mp3: return Int32(SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III)
        case .au16: return Int32(SF_FORMAT_AU | SF_FORMAT_PCM_16)
        case .raw16: return Int32(SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE)
        }
    }
}

/// The layout of headerless PCM (a raw file or stream such as `arecord -t raw`), which no header states.
public struct RawPCMFormat: Sendable, Hashable {
    /// Sample encoding, little-endian (the names of sox's and arecord's `-e`/`-f`, shortened).
    public enum Encoding: String, Sendable, CaseIterable {
        case s8, u8, s16, s24, s32, f32, f64

        var sndfileSubtype: Int {
            switch self {
            case .s8: return SF_FORMAT_PCM_S8
            case .u8: return SF_FORMAT_PCM_U8
            case .s16: return SF_FORMAT_PCM_16
            case .s24: return SF_FORMAT_PCM_24
            case .s32: return SF_FORMAT_PCM_32
            case .f32: return SF_FORMAT_FLOAT
            case .f64: return SF_FORMAT_DOUBLE
            }
        }
    }

    /// Frames per second (Hz).
    public var sampleRate: Double
    /// Interleaved channels per frame.
    public var channels: Int
    public var encoding: Encoding

    public init(sampleRate: Double, channels: Int = 1, encoding: Encoding = .s16) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.encoding = encoding
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
    /// libsndfile's handle; nil for Ogg on a pipe (``oggStream``).
    private let file: OpaquePointer?
    /// Ogg Vorbis on a pipe, decoded as it arrives (libsndfile would read it only at its end).
    private var oggStream: OggStreamReader?
    private let selection: ChannelSelection
    private var interleaved: [Float] = []
    /// 16-bit PCM (most WAV files) is read as integers and scaled here: libsndfile's own conversion
    /// costs about 9 instructions a sample, as much as decoding the band; the values are the same
    /// (it also multiplies by 1 / 32768). Nil for every other encoding.
    private var pcm16: [Int16]?
    /// Frames read so far.
    public private(set) var framesRead: Int64 = 0
    /// True when the header's frame count is exact (not MP3's estimate): reading fewer is a cut file.
    private var lengthIsExact = true
    /// Frames an MP3 with a Xing or Info tag (which states its frame count: LAME writes one) may come short of
    /// it (two MPEG frames, for decoders without the tag's gapless figures); beyond them the file was cut. Nil
    /// for an MP3 without the tag (its length is estimated from its size) and for every other format.
    private var taggedMP3Tolerance: Int64?
    /// Standard input read for libsndfile (a FLAC stream), kept alive as long as the file is open.
    private var pipeSource: PipeSource?
    /// A FLAC file (not a stream), whose size is checked against the samples read at its end.
    private var isFLAC = false
    /// Bytes of one sample as decoded (1 to 4), for that check.
    private var bytesPerSample = 2
    /// Set when the header promises more data than the file holds (libsndfile then reads what is there and
    /// says so only in its log): the file was cut short. For the caller to print as a warning.
    public private(set) var headerWarning: String?
    /// A damaged Ogg Vorbis file, read as its runs of whole pages with silence for the damaged ones.
    private var oggSegments: OggSegmentReader?
    /// Standard input or a named pipe, kept open (and its copy, for Ogg of another codec) as long as the file is read.
    private let stream: StreamInput?
    /// True when the input is a stream (standard input, a named pipe): it can be read once only.
    public var isStream: Bool { stream != nil }
    /// A read error met after some frames of the same read were returned: thrown by the next read, so that
    /// the caller first gets every frame decoded before it.
    private var pendingError: AudioFileError?

    /// Largest channel count accepted (beyond this, a header is treated as corrupt).
    static let maximumChannels = 256
    /// Sample rates (Hz) of the files read: from telephone-band recordings to the highest rate of audio
    /// interfaces. Anything else is a corrupt header (a WAV claiming 1 Hz would make a 10 ms stage of
    /// the simulator or receiver span days of samples) and is refused when the file is opened.
    public static let supportedSampleRates: ClosedRange<Double> = 8_000...384_000

    /// Opens `path` for reading; `-` reads standard input (a pipe is read as it comes, never sought).
    /// With `raw`, the data is headerless PCM of that layout instead of a file with a header.
    public init(path: String, channel: ChannelSelection = .mix, raw: RawPCMFormat? = nil) throws(AudioFileError) {
        self.path = path
        var sfInfo = SF_INFO()
        if let raw {
            guard raw.channels > 0, raw.channels <= Self.maximumChannels else {
                throw .unsupported(path: path == "-" ? "standard input" : path, reason: "raw input with \(raw.channels) channels: expected 1 to \(Self.maximumChannels)")
            }
            guard Self.supportedSampleRates.contains(raw.sampleRate) else {
                throw .unsupportedSampleRate(path: path == "-" ? "standard input" : path, rate: Int(raw.sampleRate))
            }
            sfInfo.samplerate = Int32(raw.sampleRate.rounded())
            sfInfo.channels = Int32(raw.channels)
            sfInfo.format = Int32(SF_FORMAT_RAW | raw.encoding.sndfileSubtype | SF_ENDIAN_LITTLE)
        }
        // Standard input, or a path naming a pipe or socket (/dev/stdin, a shell's <(...), a FIFO): a stream,
        // read by descriptor under the same rules as standard input.
        let name = path == "-" ? "standard input" : path
        let stream = try StreamInput.open(path: path)
        let standardInput = stream != nil
        self.stream = stream
        var pipeSource: PipeSource?
        var pipeHead: [UInt8]?
        /// The path libsndfile and the page checks open: `path`, or the copy of an Ogg stream of another codec.
        var source = path
        if raw != nil, let container = Self.container(of: stream.map { PipeHead.peek(descriptor: $0.descriptor) ?? [] } ?? Self.head(of: path)) {
            throw .rawLayoutForHeader(path: name, container: container)
        }
        if let stream, raw == nil, let head = PipeHead.peek(descriptor: stream.descriptor) {
            pipeHead = head
            // On a pipe, only containers that stream: the others read nothing there, or spin on a cut header.
            if head.isEmpty { throw .empty(path: name) }
            if let refusal = PipeHead.refusal(head) { throw .cannotOpen(path: name, reason: refusal) }
            // FLAC is read through our own reader of the pipe (libsndfile's loses the bytes it sniffed).
            if head.starts(with: Array("fLaC".utf8)) { pipeSource = PipeSource(descriptor: stream.descriptor) }
            // Ogg is decoded as it arrives, its pages checked on the way (OggStreamReader): libogg drops a damaged
            // page without a word and every later time would move.
            // Another codec in Ogg (Opus, FLAC): copied to a temporary file first and read from there at the end.
            if head.starts(with: Array("OggS".utf8)) && !PipeHead.holdsVorbis(head) { source = try stream.spool(name: name) }
            else if head.starts(with: Array("OggS".utf8)) {
                do throws(AudioFileError) { oggStream = try OggStreamReader(descriptor: stream.descriptor) } catch {
                    if case .cannotOpen(_, let reason) = error { throw .cannotOpen(path: name, reason: reason) }
                    throw error
                }
            }
        }
        let fromCopy = source != path
        let opened: OpaquePointer?
        if let oggStream {
            opened = nil
            sfInfo.channels = Int32(oggStream.channels)
            sfInfo.samplerate = Int32(clamping: oggStream.sampleRate)
            sfInfo.format = Int32(SF_FORMAT_OGG | SF_FORMAT_VORBIS)
            sfInfo.frames = 0
        } else if let pipeSource {
            var io = PipeSource.virtualIO
            opened = sf_open_virtual(&io, Int32(SFM_READ), &sfInfo, Unmanaged.passUnretained(pipeSource).toOpaque())
        } else if let stream, !fromCopy {
            opened = sf_open_fd(stream.descriptor, Int32(SFM_READ), &sfInfo, 0)
        } else {
            opened = sf_open(source, Int32(SFM_READ), &sfInfo)
        }
        self.pipeSource = pipeSource
        guard opened != nil || oggStream != nil else {
            let reason = String(cString: sf_strerror(nil))
            if let known = Self.openFailure(path: path, name: name, standardInput: standardInput) { throw known }
            throw .cannotOpen(path: name,
                              reason: (reason.isEmpty ? "unknown error" : reason) + (raw == nil && !standardInput && path.lowercased().hasSuffix(".raw") ? " (a raw file needs its rate, encoding and channels)" : ""))
        }
        // A stream has no length to announce (libsndfile gives the largest count, or a header's guess).
        let streamed = standardInput && !fromCopy && lseek(stream!.descriptor, 0, SEEK_CUR) < 0
        file = opened
        guard sfInfo.channels > 0, sfInfo.channels <= Int32(Self.maximumChannels) else {
            if let opened { sf_close(opened) }
            throw .unsupported(path: path == "-" ? "standard input" : path, reason: "\(sfInfo.channels) channels in the header: the file is corrupt or not supported")
        }
        guard Self.supportedSampleRates.contains(Double(sfInfo.samplerate)) else {
            if let opened { sf_close(opened) }
            throw .unsupportedSampleRate(path: path == "-" ? "standard input" : path, rate: Int(sfInfo.samplerate))
        }
        guard sfInfo.frames > 0 || streamed else {
            if let opened { sf_close(opened) }
            throw .empty(path: name)
        }
        if case .channel(let index) = channel, !(0..<Int(sfInfo.channels)).contains(index) {
            if let opened { sf_close(opened) }
            throw .invalidChannel(index, available: Int(sfInfo.channels))
        }
        // Integer formats are scaled to [-1, 1); float files are read as they are.
        if let opened { sf_command(opened, Int32(SFC_SET_NORM_FLOAT), nil, Int32(SF_TRUE)) }
        // libsndfile reports an unknown length (FLAC streamed without a total) as SF_COUNT_MAX.
        // A FLAC stream read through PipeSource states its length in STREAMINFO (0: unknown).
        var announcedFrames: Int64? = sfInfo.frames == Int64.max || sfInfo.frames <= 0 || (streamed && pipeSource == nil) ? nil : Int64(sfInfo.frames)
        // A WAV or AU on a pipe whose header states its data size: a stream that ends before it was cut.
        if streamed && pipeSource == nil, let head = pipeHead, let bytes = PipeHead.statedDataBytes(head),
           let width = Self.sampleBytes(sfInfo.format) {
            announcedFrames = bytes / Int64(width * Int(sfInfo.channels))
        }
        // An MP3 on a pipe: its Xing or Info tag, in the bytes peeked, states its length as a file's does.
        if streamed && pipeSource == nil, Int(sfInfo.format) & SF_FORMAT_TYPEMASK == SF_FORMAT_MPEG, let head = pipeHead,
           let frames = PipeHead.taggedMP3Frames(head) {
            announcedFrames = frames
        }
        info = AudioFileInfo(sampleRate: Double(sfInfo.samplerate), channels: Int(sfInfo.channels),
                             frames: announcedFrames, format: describeFormat(sfInfo.format))
        selection = channel
        if sfInfo.format & Int32(SF_FORMAT_SUBMASK) == Int32(SF_FORMAT_PCM_16) { pcm16 = [] }
        lengthIsExact = Int(sfInfo.format) & SF_FORMAT_TYPEMASK != SF_FORMAT_MPEG
        if !lengthIsExact && !standardInput && Self.hasXingTag(path) { taggedMP3Tolerance = 2 * 1_152 }
        if !lengthIsExact && streamed && announcedFrames != nil { taggedMP3Tolerance = 2 * 1_152 }
        if !streamed, let opened { headerWarning = Self.cutWarning(opened, info: info) }
        isFLAC = !streamed && !standardInput && Int(sfInfo.format) & SF_FORMAT_TYPEMASK == SF_FORMAT_FLAC
        // libogg drops a damaged page without a word, and every later sample would come early: the pages' own
        // granule positions place what follows.
        if !standardInput || fromCopy, Int(sfInfo.format) & SF_FORMAT_TYPEMASK == SF_FORMAT_OGG,
           Int(sfInfo.format) & SF_FORMAT_SUBMASK == SF_FORMAT_VORBIS, let damage = OggDamage.scan(path: source) {
            oggSegments = OggSegmentReader(path: source, damage: damage, channels: Int(sfInfo.channels))
        }
        switch Int(sfInfo.format) & SF_FORMAT_SUBMASK {
        case SF_FORMAT_PCM_S8, SF_FORMAT_PCM_U8: bytesPerSample = 1
        case SF_FORMAT_PCM_24: bytesPerSample = 3
        case SF_FORMAT_PCM_32: bytesPerSample = 4
        default: bytesPerSample = 2
        }
    }

    deinit { if let file { sf_close(file) } }

    /// The first bytes of the file at `path` (empty when it cannot be read).
    private static func head(of path: String) -> [UInt8] {
        let descriptor = path == "-" ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 12)
        let n = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, 12, 0) }
        return n > 0 ? Array(bytes[0..<n]) : []
    }

    /// The container whose header starts `head`, if any (WAV, AIFF, FLAC, Ogg, AU, CAF).
    static func container(of head: [UInt8]) -> String? {
        func starts(_ text: String, at offset: Int = 0) -> Bool {
            let magic = Array(text.utf8)
            return head.count >= offset + magic.count && Array(head[offset..<offset + magic.count]) == magic
        }
        if (starts("RIFF") || starts("RIFX") || starts("RF64")) && starts("WAVE", at: 8) { return "WAV" }
        if starts("FORM") && (starts("AIFF", at: 8) || starts("AIFC", at: 8)) { return "AIFF" }
        if starts("fLaC") { return "FLAC" }
        if starts("OggS") { return "Ogg" }
        if starts(".snd") { return "AU" }
        if starts("caff") { return "CAF" }
        return nil
    }

    /// Why libsndfile could not open `path`, in words of the file system: missing, unreadable, a directory,
    /// empty. nil when none of these is the cause (then libsndfile's own reason is given).
    private static func openFailure(path: String, name: String, standardInput: Bool) -> AudioFileError? {
        var status = stat()
        let result = path == "-" ? fstat(STDIN_FILENO, &status) : stat(path, &status)
        guard result == 0 else {
            switch errno {
            case ENOENT: return .cannotOpen(path: name, reason: "no such file")
            case EACCES: return .cannotOpen(path: name, reason: "permission denied")
            case ENOTDIR: return .cannotOpen(path: name, reason: "a part of the path is not a directory")
            default: return .cannotOpen(path: name, reason: String(cString: strerror(errno)))
            }
        }
        switch status.st_mode & S_IFMT {
        case S_IFDIR: return .cannotOpen(path: name, reason: "a directory, not an audio file")
        case S_IFREG where status.st_size == 0: return .empty(path: name)
        case S_IFCHR where status.st_rdev == 0x103: return .empty(path: name)  // /dev/null: major 1, minor 3
        default:
            if path != "-", access(path, R_OK) != 0 { return .cannotOpen(path: name, reason: "permission denied") }
            return nil
        }
    }

    /// A FLAC whose STREAMINFO announces fewer samples than its frames hold ends at the announcement in
    /// libsndfile, silently: at the end, the audio bytes after the metadata are compared with the most the
    /// samples read can take (verbatim, uncompressed, with frame headers). Far more bytes: a warning.
    private func flacSurplusWarning() -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        let size = lseek(descriptor, 0, SEEK_END)
        var offset: Int64 = 4
        var header = [UInt8](repeating: 0, count: 4)
        // The metadata blocks: a last-block flag, a type, and a 24-bit length each.
        for _ in 0..<1_000 {
            guard header.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress, 4, off_t(offset)) }) == 4 else { return nil }
            offset += 4 + (Int64(header[1]) << 16 | Int64(header[2]) << 8 | Int64(header[3]))
            if header[0] & 0x80 != 0 { break }
        }
        let audioBytes = Int64(size) - offset
        let most = framesRead * Int64(info.channels * bytesPerSample) + (framesRead / 16 + 1) * 32 + 8_192
        guard audioBytes > most else { return nil }
        return "its header announces \(framesRead) samples, but \(audioBytes) bytes of audio follow, more than they can take (\(most) bytes): a damaged header? the audio after them was not decoded"
    }

    /// Bytes of one sample of libsndfile's `format` in a WAV or AU stream; nil for compressed encodings.
    private static func sampleBytes(_ format: Int32) -> Int? {
        switch Int(format) & SF_FORMAT_SUBMASK {
        case SF_FORMAT_PCM_S8, SF_FORMAT_PCM_U8, SF_FORMAT_ULAW, SF_FORMAT_ALAW: return 1
        case SF_FORMAT_PCM_16: return 2
        case SF_FORMAT_PCM_24: return 3
        case SF_FORMAT_PCM_32, SF_FORMAT_FLOAT: return 4
        case SF_FORMAT_DOUBLE: return 8
        default: return nil
        }
    }

    /// True when the first 8 KiB of the file at `path` hold an MP3 Xing or Info tag (its frame count).
    private static func hasXingTag(_ path: String) -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var head = [UInt8](repeating: 0, count: 8_192)
        let count = head.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 4 else { return false }
        let xing = Array("Xing".utf8), info = Array("Info".utf8)
        return (0..<(count - 4)).contains { i in head[i..<(i + 4)].elementsEqual(xing) || head[i..<(i + 4)].elementsEqual(info) }
    }

    /// libsndfile's log of the header, when it found a data size larger than the file ("data : 895696 (should
    /// be 220800)"): a warning naming what the header promised. Sizes of streamed files (0, 0xFFFFFFFF and
    /// the like, written before the length was known) are no cut.
    private static func cutWarning(_ handle: OpaquePointer, info: AudioFileInfo) -> String? {
        var log = [CChar](repeating: 0, count: 8192)
        sf_command(handle, Int32(SFC_GET_LOG_INFO), &log, Int32(log.count))
        let text = log.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        for line in text.split(separator: "\n") {
            guard let open = line.firstRange(of: "(should be ") else { continue }
            let before = line[..<open.lowerBound].split(whereSeparator: { $0 == " " || $0 == ":" }).last.flatMap { Int64($0) }
            let after = line[open.upperBound...].prefix { $0.isNumber }
            guard let said = before, let real = Int64(after), said > real, said < 0x7FFF_0000, real >= 0 else { continue }
            // The frames the header promised, at the bytes per frame of what is there.
            let frames = Double(info.frames ?? 0)
            let promised = real > 0 && frames > 0 ? Double(said) / Double(real) * frames / info.sampleRate : nil
            let seconds = { (x: Double) -> String in let tenths = Int((x * 10).rounded()); return "\(tenths / 10).\(tenths % 10)" }
            let span = promised.map { "\(seconds($0)) s; it holds \(seconds(frames / info.sampleRate)) s" } ?? "\(said) bytes; it holds \(real)"
            return "the header promises \(span): the file was cut short, the rest is missing"
        }
        return nil
    }

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
        let got: sf_count_t
        if let oggStream {
            do throws(AudioFileError) {
                got = sf_count_t(try interleaved.withUnsafeMutableBufferPointer { (buffer) throws(AudioFileError) -> Int in
                    try oggStream.read(into: buffer.baseAddress!, frames: buffer.count / channels)
                })
            } catch {
                if case .readFailed(_, let reason) = error { throw .readFailed(path: path == "-" ? "standard input" : path, reason: reason) }
                throw error
            }
        } else {
            got = readInterleaved(frames: buffer.count, channels: channels)
        }
        if got < 0 { throw .readFailed(path: path == "-" ? "standard input" : path, reason: String(cString: sf_strerror(file))) }
        let frames = Int(got)
        if frames == 0 && errorCode == 0 {
            // The end: a stream that gave nothing, or a file shorter than its header says, is no success.
            if framesRead == 0, let oggStream, oggStream.truncated {
                pendingError = .readFailed(path: path == "-" ? "standard input" : path, reason: "the Ogg stream ends without its last page, before any audio (cut short?)")
                throw pendingError!
            }
            if framesRead == 0 {
                if let announced = info.frames, announced > 0 {
                    pendingError = .readFailed(path: path == "-" ? "standard input" : path, reason: "no sample could be read, though the header announces \(announced) frames (a damaged file?)")
                    throw pendingError!
                }
                throw .empty(path: path == "-" ? "standard input" : path)
            }
            if headerWarning == nil, isFLAC { headerWarning = flacSurplusWarning() }
            if headerWarning == nil, let oggSegments { headerWarning = oggSegments.warning(sampleRate: info.sampleRate) }
            if headerWarning == nil, let oggStream { headerWarning = oggStream.warning() }
            if let oggStream, oggStream.truncated {
                let error = AudioFileError.readFailed(path: path == "-" ? "standard input" : path, reason: "the Ogg stream ends after \(framesRead) frames without its last page (cut short?)")
                pendingError = error
                throw error
            }
            if let oggSegments, oggSegments.truncated {
                let error = AudioFileError.readFailed(path: path == "-" ? "standard input" : path, reason: "the Ogg stream ends after \(framesRead) frames without its last page (cut short?)")
                pendingError = error
                throw error
            }
            if headerWarning == nil, let pipeSource, pipeSource.hasMore() {
                headerWarning = "its header announces \(framesRead) samples, but more data follows on the stream: a damaged header? the audio after them was not decoded"
            }
            if let announced = info.frames, framesRead < announced,
               lengthIsExact || taggedMP3Tolerance.map({ announced - framesRead > $0 }) == true {
                let error = AudioFileError.readFailed(path: path == "-" ? "standard input" : path, reason: "the file ends after \(framesRead) of the \(announced) frames its header announces (cut short?)")
                pendingError = error
                throw error
            }
        }
        let code = errorCode
        if code != 0 {
            let error = AudioFileError.readFailed(path: path == "-" ? "standard input" : path, reason: "\(libsndfileMessage(sf_error_number(code))) after \(framesRead + Int64(frames)) frames")
            if frames == 0 { throw error }
            pendingError = error
        }
        if frames == 0 { return 0 }
        interleaved.withUnsafeBufferPointer { raw in
            switch selection {
            case .channel(let index):
                for i in 0..<frames { buffer[i] = raw[i * channels + index] }
            case .mix where channels == 1:
                buffer.baseAddress!.update(from: raw.baseAddress!, count: frames)
            case .mix:
                let scale = 1 / Float(channels)
                for i in 0..<frames {
                    var sum: Float = 0
                    for c in 0..<channels { sum += raw[i * channels + c] }
                    buffer[i] = sum * scale
                }
            }
            if pcm16 == nil {
                for i in 0..<frames where !buffer[i].isFinite { buffer[i] = 0 }
            }
        }
        framesRead += Int64(frames)
        return frames
    }

    /// libsndfile's error state of the file (0: none; always 0 for an Ogg stream, whose errors are thrown).
    private var errorCode: Int32 { file.map { sf_error($0) } ?? 0 }

    /// Reads up to `frames` interleaved frames into `interleaved` as Floats in [-1, 1]; libsndfile's
    /// count (negative on failure).
    private func readInterleaved(frames: Int, channels: Int) -> sf_count_t {
        if let oggSegments {
            return sf_count_t(interleaved.withUnsafeMutableBufferPointer { oggSegments.read(into: $0.baseAddress!, frames: frames) })
        }
        guard var shorts = pcm16 else {
            return interleaved.withUnsafeMutableBufferPointer { sf_readf_float(file, $0.baseAddress, sf_count_t(frames)) }
        }
        pcm16 = nil  // keep the array uniquely referenced while it is written
        defer { pcm16 = shorts }
        if shorts.count < frames * channels { shorts = [Int16](repeating: 0, count: frames * channels) }
        let got = shorts.withUnsafeMutableBufferPointer { sf_readf_short(file, $0.baseAddress, sf_count_t(frames)) }
        let count = Int(max(0, got)) * channels
        shorts.withUnsafeBufferPointer { source in
            interleaved.withUnsafeMutableBufferPointer { target in
                let scale: Float = 1.0 / 32_768
                for i in 0..<count { target[i] = Float(source[i]) * scale }
            }
        }
        return got
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
/// `atomically: false` (a live recording, where what was captured before a crash matters more); a symbolic
/// link is followed to its target (see `OutputPath`).
public final class AudioFileWriter {
    private var file: OpaquePointer?
    public let path: String
    /// Where the samples go until `close()` renames it to `finalPath` (equal to it when written directly).
    private let temporaryPath: String
    /// The file `path` names: symbolic links followed.
    private let finalPath: String
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
    /// The file being made in memory, for standard output when it is a pipe.
    private var memory: MemoryFile?
    /// The file written through our own descriptor (every path that can be sought), so that a failed write(2)
    /// is seen even where a codec drops libsndfile's return codes.
    private var sink: DescriptorFile?
    /// Set to stop: the next ``write(_:)`` discards the unfinished file and throws ``AudioFileError/interrupted(path:)``.
    private let stop: StopFlag?

    /// Opens `path` for writing (see the type's description for where the samples go).
    /// - Parameters:
    ///   - path: the file, or `-` for standard output.
    ///   - sampleRate: frames per second (Hz).
    ///   - format: container and encoding.
    ///   - channels: interleaved channels per frame.
    ///   - atomically: false writes `path` directly (a live recording).
    ///   - stop: when set (on SIGINT), the next write discards the unfinished file and throws.
    ///   - expectedFrames: the frames that will be written, when known: a WAV streamed to a pipe states them
    ///     in its header (without them, its sizes say "unknown", as sox writes to pipes).
    public init(path: String, sampleRate: Double, format: AudioFileFormat = .wav16, channels: Int = 1,
                atomically: Bool = true, stop: StopFlag? = nil, expectedFrames: Int64? = nil) throws(AudioFileError) {
        self.stop = stop
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
        let handle: OpaquePointer?
        if path == "-" {
            temporaryPath = path
            finalPath = path
            if format.streamsToPipes || lseek(1, 0, SEEK_CUR) >= 0 {
                handle = sf_open_fd(1, Int32(SFM_WRITE), &sfInfo, 0)
            } else if let header = WAVStreamHeader(format: format, sampleRate: Int(sfInfo.samplerate), channels: channels, frames: expectedFrames) {
                // WAV streams: its header is written first (sizes known up front, or "unknown"), then raw samples
                // as they come; memory stays flat for any length.
                guard DescriptorBytes.write(header.bytes) else {
                    throw .writeFailed(path: "standard output", reason: String(cString: strerror(errno)))
                }
                sfInfo.format = header.rawFormat
                handle = sf_open_fd(1, Int32(SFM_WRITE), &sfInfo, 0)
            } else {
                // A pipe cannot be sought back to finish a header: the file is made in memory and written at close.
                let buffer = MemoryFile()
                memory = buffer
                var io = MemoryFile.virtualIO
                handle = sf_open_virtual(&io, Int32(SFM_WRITE), &sfInfo, Unmanaged.passUnretained(buffer).toOpaque())
            }
        } else {
            // Symbolic links are followed (the link stays), devices and FIFOs written through (never replaced).
            let output: OutputPath
            do { output = try OutputPath(path) } catch { throw .writeFailed(path: path, reason: error.reason) }
            finalPath = output.target
            let temporary = !atomically || output.writesThrough ? output.target : output.temporaryName()
            temporaryPath = temporary
            if let sink = try DescriptorFile(path: temporary, given: path) {
                self.sink = sink
                var io = DescriptorFile.virtualIO
                handle = sf_open_virtual(&io, Int32(SFM_WRITE), &sfInfo, Unmanaged.passUnretained(sink).toOpaque())
                if handle == nil && temporary != output.target { unlink(temporary) }
            } else if let header = WAVStreamHeader(format: format, sampleRate: Int(sfInfo.samplerate), channels: channels, frames: expectedFrames) {
                // A FIFO or socket, as a WAV stream (libsndfile will not write WAV where it cannot seek back): the header
                // first, then raw samples, as on standard output.
                let descriptor = open(temporary, O_WRONLY | O_CLOEXEC)
                guard descriptor >= 0 else { throw .writeFailed(path: path, reason: String(cString: strerror(errno))) }
                guard DescriptorBytes.write(header.bytes, to: descriptor) else {
                    let reason = String(cString: strerror(errno))
                    Glibc.close(descriptor)
                    throw .writeFailed(path: path, reason: reason)
                }
                sfInfo.format = header.rawFormat
                handle = sf_open_fd(descriptor, Int32(SFM_WRITE), &sfInfo, 1)
                if handle == nil { Glibc.close(descriptor) }
            } else {
                // A FIFO or socket: libsndfile's own pipe writing.
                handle = sf_open(temporary, Int32(SFM_WRITE), &sfInfo)
            }
        }
        guard let handle else {
            throw .writeFailed(path: path, reason: String(cString: sf_strerror(nil)))
        }
        file = handle
        if format.isLossy {
            // The highest quality (bit rate): the lowest settings cut the band above 16 kHz.
            var level = 0.0
            sf_command(handle, Int32(SFC_SET_COMPRESSION_LEVEL), &level, Int32(MemoryLayout<Double>.size))
        }
        // Clip instead of wrapping around when a float beyond full scale becomes an integer.
        sf_command(handle, Int32(SFC_SET_CLIPPING), nil, Int32(SF_TRUE))
    }

    /// Appends interleaved samples (whole frames).
    public func write(_ samples: UnsafeBufferPointer<Float>) throws(AudioFileError) {
        guard let file else { throw .writeFailed(path: path, reason: "the file is closed") }
        if stop?.isSet == true {
            discard()
            throw .interrupted(path: path)
        }
        let frames = samples.count / channels
        if let maximumDataBytes, (framesWritten + Int64(frames)) * bytesPerFrame > maximumDataBytes {
            discard()
            let hours = Double(maximumDataBytes / bytesPerFrame) / Double(sampleRate) / 3600
            throw .writeFailed(path: path, reason: "a \(format.rawValue) file holds at most 4 GiB of samples (\(Int(hours)) h at this rate): write FLAC (.flac) for longer audio")
        }
        errno = 0
        let written = sf_writef_float(file, samples.baseAddress, sf_count_t(frames))
        guard written == frames, sink?.failure ?? 0 == 0 else {
            if path == "-" && errno == EPIPE { StandardOutput.readerClosed.set() }
            let reason = sink.flatMap { $0.failure == 0 ? nil : String(cString: strerror($0.failure)) } ?? String(cString: sf_strerror(file))
            discard()
            throw .writeFailed(path: path, reason: written == frames ? reason : "wrote \(written) of \(frames) frames: \(reason)")
        }
        framesWritten += Int64(written)
    }

    /// Finishes the file (header sizes) and gives it its name, reporting a failure to do either.
    public func close() throws(AudioFileError) {
        guard let file else { return }
        self.file = nil
        let closed = sf_close(file)
        let failure = sink?.finish() ?? 0
        guard closed == 0, failure == 0 else {
            removeTemporary()
            throw .writeFailed(path: path, reason: failure != 0 ? "could not finish the file: \(String(cString: strerror(failure)))"
                                                              : "could not finish the file (disk full?)")
        }
        if let memory {
            self.memory = nil
            guard memory.copy(toDescriptor: 1) else {
                if errno == EPIPE { StandardOutput.readerClosed.set() }
                throw .writeFailed(path: "standard output", reason: String(cString: strerror(errno)))
            }
        }
        guard temporaryPath == finalPath || rename(temporaryPath, finalPath) == 0 else {
            let reason = String(cString: strerror(errno))
            removeTemporary()
            throw .writeFailed(path: path, reason: reason)
        }
    }

    /// Closes and deletes the unfinished file.
    private func discard() {
        if let file { sf_close(file) }
        file = nil
        _ = sink?.finish()
        removeTemporary()
    }

    private func removeTemporary() { if temporaryPath != finalPath { unlink(temporaryPath) } }

    deinit { discard() }
}

/// The 44-byte header of a WAV written to a pipe, followed by raw little-endian samples.
struct WAVStreamHeader {
    let bytes: [UInt8]
    /// The libsndfile format of the samples after it (headerless).
    let rawFormat: Int32

    /// The header for `format` (nil: not a WAV format), with the data size of `frames` when known and fitting
    /// 32 bits, else 0xFFFFFFFF ("unknown": the reader reads to the end of the stream).
    init?(format: AudioFileFormat, sampleRate: Int, channels: Int, frames: Int64?) {
        let bits: Int, tag: UInt16, subtype: Int
        switch format {
        case .wav16: (bits, tag, subtype) = (16, 1, SF_FORMAT_PCM_16)
        case .wav24: (bits, tag, subtype) = (24, 1, SF_FORMAT_PCM_24)
        case .wav32: (bits, tag, subtype) = (32, 1, SF_FORMAT_PCM_32)
        case .wavFloat: (bits, tag, subtype) = (32, 3, SF_FORMAT_FLOAT)
        default: return nil
        }
        let blockAlign = channels * bits / 8
        let dataBytes = frames.map { $0 * Int64(blockAlign) }.flatMap { $0 + 36 <= Int64(UInt32.max) ? UInt32($0) : nil }
        var header: [UInt8] = []
        func u32(_ v: UInt32) { header += withUnsafeBytes(of: v.littleEndian, Array.init) }
        func u16(_ v: UInt16) { header += withUnsafeBytes(of: v.littleEndian, Array.init) }
        header += Array("RIFF".utf8); u32(dataBytes.map { $0 + 36 } ?? UInt32.max)
        header += Array("WAVEfmt ".utf8); u32(16); u16(tag); u16(UInt16(channels)); u32(UInt32(sampleRate))
        u32(UInt32(sampleRate * blockAlign)); u16(UInt16(blockAlign)); u16(UInt16(bits))
        header += Array("data".utf8); u32(dataBytes ?? UInt32.max)
        bytes = header
        rawFormat = Int32(SF_FORMAT_RAW | subtype | SF_ENDIAN_LITTLE)
    }
}

/// Whole writes to a descriptor (standard output, a FIFO) for the audio writer.
enum DescriptorBytes {
    /// Writes every byte to `descriptor`; false (errno set) on failure, noting a reader of standard output gone
    /// (EPIPE).
    static func write(_ bytes: [UInt8], to descriptor: Int32 = 1) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + offset, bytes.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EPIPE && descriptor == 1 { StandardOutput.readerClosed.set() }
                return false
            }
            offset += n
        }
        return true
    }
}

/// A file in memory behind libsndfile's virtual I/O, for formats whose header is finished by seeking back
/// (WAV, AIFF, FLAC, Ogg) written to a pipe.
final class MemoryFile {
    private var bytes: [UInt8] = []
    private var position = 0

    /// The callbacks; `user_data` is an unretained MemoryFile that outlives the SNDFILE.
    static var virtualIO: SF_VIRTUAL_IO { SF_VIRTUAL_IO(
        get_filelen: { data in sf_count_t(MemoryFile.file(data).bytes.count) },
        seek: { offset, whence, data in
            let memory = MemoryFile.file(data)
            let base = whence == SEEK_SET ? 0 : whence == SEEK_END ? memory.bytes.count : memory.position
            memory.position = max(0, base + Int(offset))
            return sf_count_t(memory.position)
        },
        read: { pointer, count, data in
            let memory = MemoryFile.file(data)
            let n = max(0, min(Int(count), memory.bytes.count - memory.position))
            if n > 0, let pointer {
                memory.bytes.withUnsafeBytes { pointer.copyMemory(from: $0.baseAddress! + memory.position, byteCount: n) }
                memory.position += n
            }
            return sf_count_t(n)
        },
        write: { pointer, count, data in
            let memory = MemoryFile.file(data)
            let n = Int(count)
            guard n > 0, let pointer else { return 0 }
            if memory.bytes.count < memory.position + n {
                memory.bytes += [UInt8](repeating: 0, count: memory.position + n - memory.bytes.count)
            }
            memory.bytes.withUnsafeMutableBytes { ($0.baseAddress! + memory.position).copyMemory(from: pointer, byteCount: n) }
            memory.position += n
            return count
        },
        tell: { data in sf_count_t(MemoryFile.file(data).position) }) }

    fileprivate static func file(_ data: UnsafeMutableRawPointer?) -> MemoryFile {
        Unmanaged<MemoryFile>.fromOpaque(data!).takeUnretainedValue()
    }

    /// Writes every byte to `descriptor`; false (errno set) when it fails.
    func copy(toDescriptor descriptor: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + offset, bytes.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
}

/// A file libsndfile writes through virtual I/O on a descriptor of ours: every failed write(2) is kept
/// (``failure``), for the codecs whose encoders drop libsndfile's return codes (its MP3 encoder: an MP3 onto a
/// full disk or /dev/full ended with exit 0 and nothing written). Only for outputs that can be sought (regular
/// files, devices); FIFOs and sockets keep libsndfile's own pipe writing.
final class DescriptorFile {
    private var descriptor: Int32
    /// errno of the first write that failed, or of closing; 0 while none did.
    private(set) var failure: Int32 = 0

    /// Opens `path` for writing as libsndfile does (created, truncated; a device written in place), or nil for
    /// a FIFO or socket, opened by libsndfile itself.
    /// - Throws: ``AudioFileError/writeFailed(path:reason:)`` naming `given` when it cannot be opened.
    init?(path: String, given: String) throws(AudioFileError) {
        var status = stat()
        if stat(path, &status) == 0, [S_IFIFO, S_IFSOCK].contains(status.st_mode & S_IFMT) { return nil }
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .writeFailed(path: given, reason: String(cString: strerror(errno))) }
    }

    deinit { if descriptor >= 0 { close(descriptor) } }

    /// Closes the descriptor (once): the first failure of any write or of the close (0: none).
    func finish() -> Int32 {
        if descriptor >= 0 {
            if close(descriptor) != 0, failure == 0 { failure = errno }
            descriptor = -1
        }
        return failure
    }

    private func write(_ pointer: UnsafeRawPointer, _ count: Int) -> Int {
        var done = 0
        while done < count {
            let n = Glibc.write(descriptor, pointer + done, count - done)
            if n < 0 {
                if errno == EINTR { continue }
                if failure == 0 { failure = errno }
                return done
            }
            done += n
        }
        return done
    }

    /// The callbacks; `user_data` is an unretained DescriptorFile that outlives the SNDFILE.
    static var virtualIO: SF_VIRTUAL_IO { SF_VIRTUAL_IO(
        get_filelen: { data in
            var status = stat()
            return fstat(DescriptorFile.file(data).descriptor, &status) == 0 ? sf_count_t(status.st_size) : -1
        },
        seek: { offset, whence, data in sf_count_t(lseek(DescriptorFile.file(data).descriptor, off_t(offset), whence)) },
        read: { pointer, count, data in
            guard let pointer else { return 0 }
            return sf_count_t(max(0, Glibc.read(DescriptorFile.file(data).descriptor, pointer, Int(count))))
        },
        write: { pointer, count, data in
            guard let pointer, count > 0 else { return 0 }
            return sf_count_t(DescriptorFile.file(data).write(pointer, Int(count)))
        },
        tell: { data in sf_count_t(lseek(DescriptorFile.file(data).descriptor, 0, SEEK_CUR)) }) }

    private static func file(_ data: UnsafeMutableRawPointer?) -> DescriptorFile {
        Unmanaged<DescriptorFile>.fromOpaque(data!).takeUnretainedValue()
    }
}
