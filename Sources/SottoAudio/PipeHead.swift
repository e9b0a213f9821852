import CSndFile
import CSottoShims
import Glibc

/// The first bytes of standard input when it is a pipe, read without consuming them (tee(2)), to accept on
/// a pipe only the containers libsndfile reads as a stream. Others (CAF, SDS, 8SVX, G.72x AU...) need to
/// seek: on a pipe libsndfile reads nothing from them, or spins forever on a truncated one.
enum PipeHead {
    /// Bytes peeked: enough to tell the containers apart (AU's encoding field ends at byte 16) and to find
    /// the length a WAV header states (its data chunk follows the format chunk and any short ones).
    static let length = 512

    /// Up to ``length`` bytes at the head of the pipe `descriptor`, waiting (at most `timeout` s) for them or
    /// the end of the stream; nil when the descriptor is not a pipe or tee(2) fails.
    static func peek(descriptor: Int32, timeout: Double = 10) -> [UInt8]? {
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFIFO else { return nil }
        var copy: [Int32] = [0, 0]
        guard pipe(&copy) == 0 else { return nil }
        defer { close(copy[0]); close(copy[1]) }
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let end = Double(deadline.tv_sec) + Double(deadline.tv_nsec) / 1e9 + timeout
        var count = 0
        while true {
            // tee copies what the pipe holds now (it blocks only while the pipe is empty and a writer is open).
            let n = sotto_tee(descriptor, copy[1], UInt(length))
            if n < 0 {
                if errno == EINTR { continue }
                return nil
            }
            count = n
            // Drain the copy so that the next tee starts from an empty pipe.
            var bytes = [UInt8](repeating: 0, count: length)
            if n > 0 { _ = bytes.withUnsafeMutableBytes { read(copy[0], $0.baseAddress, n) } }
            if n == 0 || n >= length { return Array(bytes[0..<count]) }
            // A short head: wait for more, or for the writer to close.
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 10)
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let hungUp = poller.revents & Int16(POLLHUP) != 0
            if hungUp || Double(now.tv_sec) + Double(now.tv_nsec) / 1e9 > end {
                let last = sotto_tee(descriptor, copy[1], UInt(length))
                if last > 0 { _ = bytes.withUnsafeMutableBytes { read(copy[0], $0.baseAddress, last) } }
                return Array(bytes[0..<max(0, last)])
            }
            usleep(10_000)
        }
    }

    /// Bytes of sample data that a WAV or AU header at the start of `head` states, or nil when it states none
    /// (the sizes of a stream written before its length was known: 0, 0xFFFFFFFF and the like) or `head` does
    /// not hold it. A stream that ends before them was cut.
    static func statedDataBytes(_ head: [UInt8]) -> Int64? {
        func text(_ range: Range<Int>) -> String { String(decoding: head[range], as: UTF8.self) }
        func little(_ at: Int) -> Int64 { (0..<4).reduce(Int64(0)) { $0 | Int64(head[at + $1]) << (8 * $1) } }
        guard head.count >= 12 else { return nil }
        if text(0..<4) == ".snd" {
            let size = head[8..<12].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            return size == 0xFFFF_FFFF || size == 0 ? nil : size
        }
        guard text(0..<4) == "RIFF", text(8..<12) == "WAVE" else { return nil }
        var offset = 12
        while offset + 8 <= head.count {
            let size = little(offset + 4)
            if text(offset..<(offset + 4)) == "data" {
                return size == 0 || size >= 0x7FFF_0000 ? nil : size
            }
            offset += 8 + Int(size) + Int(size & 1)
        }
        return nil
    }

    /// PCM frames an MP3 starting with `head` holds by its Xing or Info tag (LAME's, libsndfile's: the MPEG frame
    /// count), less the encoder's delay and padding when a LAME tag states them (what a gapless decoder gives);
    /// nil without a tag in `head` (an MP3 whose length nothing states). A stream that ends well before it was cut.
    static func taggedMP3Frames(_ head: [UInt8]) -> Int64? {
        var start = 0
        // An ID3v2 tag first: 10 bytes and a syncsafe size.
        if head.count >= 10, head[0..<3].elementsEqual("ID3".utf8) {
            start = 10 + head[6..<10].reduce(0) { $0 << 7 | Int($1 & 0x7F) }
        }
        guard start + 4 <= head.count, head[start] == 0xFF, head[start + 1] & 0xE0 == 0xE0 else { return nil }
        let version = (head[start + 1] >> 3) & 3, layer = (head[start + 1] >> 1) & 3
        // Samples per MPEG frame: Layer I 384, Layer II 1152, Layer III 1152 (MPEG-1) or 576 (MPEG-2 and 2.5).
        let samplesPerFrame: Int64
        switch layer {
        case 3: samplesPerFrame = 384
        case 2: samplesPerFrame = 1_152
        case 1: samplesPerFrame = version == 3 ? 1_152 : 576
        default: return nil
        }
        func big(_ at: Int) -> Int64 { head[at..<(at + 4)].reduce(Int64(0)) { $0 << 8 | Int64($1) } }
        // The tag follows the side information (at most 32 bytes after the 4-byte header).
        let window = (start + 4)..<min(head.count - 12, start + 4 + 40)
        guard !window.isEmpty, let tag = window.first(where: {
            head[$0..<($0 + 4)].elementsEqual("Xing".utf8) || head[$0..<($0 + 4)].elementsEqual("Info".utf8)
        }) else { return nil }
        let flags = big(tag + 4)
        guard flags & 1 != 0 else { return nil }
        var frames = big(tag + 8) * samplesPerFrame
        // The LAME tag after the optional fields (frames, bytes, table of contents, quality): delay and padding,
        // 12 bits each, 21 bytes into it.
        let lame = tag + 8 + (flags & 1 != 0 ? 4 : 0) + (flags & 2 != 0 ? 4 : 0) + (flags & 4 != 0 ? 100 : 0) + (flags & 8 != 0 ? 4 : 0)
        if lame + 24 <= head.count, head[lame..<(lame + 4)].elementsEqual("LAME".utf8) {
            let delay = Int64(head[lame + 21]) << 4 | Int64(head[lame + 22] >> 4)
            let padding = Int64(head[lame + 22] & 0x0F) << 8 | Int64(head[lame + 23])
            frames -= delay + padding
        }
        return frames > 0 ? frames : nil
    }

    /// True when the Ogg stream starting with `head` carries Vorbis: its first packet, on the first page, is a
    /// Vorbis identification header ("\u{01}vorbis").
    static func holdsVorbis(_ head: [UInt8]) -> Bool {
        guard head.count >= 28 else { return false }
        let start = 27 + Int(head[26])
        return head.count >= start + 7 && head[start..<(start + 7)].elementsEqual([1] + Array("vorbis".utf8))
    }

    /// Why a stream starting with `head` is not read from a pipe, or nil when it streams (WAV, RF64, AIFF,
    /// AU of PCM, float or G.711, FLAC, Ogg, MP3).
    static func refusal(_ head: [UInt8]) -> String? {
        func text(_ range: Range<Int>) -> String { String(decoding: head[range], as: UTF8.self) }
        guard head.count >= 4 else { return "\(head.count) bytes: too short to be audio" }
        let magic = text(0..<4)
        let accepted = "formats read from a pipe: WAV, AIFF, AU, FLAC, Ogg, MP3, or raw PCM with --rate"
        switch magic {
        case "RIFF", "RIFX", "RF64", "fLaC", "OggS":
            return nil
        case "FORM":
            guard head.count >= 12 else { return "a cut IFF header" }
            let kind = text(8..<12)
            return kind == "AIFF" || kind == "AIFC" ? nil : "IFF \(kind) cannot be read from a pipe: give the file's path (\(accepted))"
        case ".snd":
            guard head.count >= 16 else { return "a cut AU header" }
            let encoding = head[12..<16].reduce(0) { $0 << 8 | UInt32($1) }
            // 1 mu-law, 2-5 PCM, 6-7 float, 27 A-law; the G.72x codecs (23-26) do not stream in libsndfile.
            return [1, 2, 3, 4, 5, 6, 7, 27].contains(encoding) ? nil
                : "AU with encoding \(encoding) (G.72x ADPCM) cannot be read from a pipe: give the file's path (\(accepted))"
        case "caff":
            return "CAF cannot be read from a pipe: give the file's path (\(accepted))"
        default:
            if magic.hasPrefix("ID3") || (head[0] == 0xFF && head[1] & 0xE0 == 0xE0) { return nil }
            return "not a format read from a pipe: give the file's path (\(accepted))"
        }
    }
}

/// Standard input (a pipe) behind libsndfile's virtual I/O, for FLAC: libsndfile's own pipe reading loses
/// the bytes it sniffed and its FLAC decoder then "loses sync". What was read is kept (up to
/// ``keptBytes``) so that libsndfile may seek back into the header; seeks forward read on.
final class PipeSource {
    /// Bytes kept from the start of the stream for backward seeks (the FLAC metadata fits).
    static let keptBytes = 1 << 20
    private let descriptor: Int32
    private var kept: [UInt8] = []
    private var position = 0
    /// Bytes read from the descriptor so far.
    private var consumed = 0

    init(descriptor: Int32) { self.descriptor = descriptor }

    /// Reads up to `count` bytes at the current position into `target`; the count read (0 at the end).
    private func read(_ target: UnsafeMutableRawPointer, _ count: Int) -> Int {
        var done = 0
        if position < consumed {
            // Replay kept bytes.
            let n = min(count, consumed - position)
            guard position + n <= kept.count else { return -1 }
            kept.withUnsafeBytes { target.copyMemory(from: $0.baseAddress! + position, byteCount: n) }
            position += n
            done = n
        }
        while done < count {
            let n = Glibc.read(descriptor, target + done, count - done)
            if n < 0 {
                if errno == EINTR { continue }
                return done > 0 ? done : -1
            }
            if n == 0 { break }
            if kept.count < Self.keptBytes {
                let keep = min(n, Self.keptBytes - kept.count)
                kept += UnsafeRawBufferPointer(start: target + done, count: keep)
            }
            done += n
            consumed += n
            position += n
        }
        return done
    }

    /// True when the stream holds bytes beyond what was read (one is read to know).
    func hasMore() -> Bool {
        var byte: UInt8 = 0
        position = consumed
        return read(&byte, 1) == 1
    }

    /// Moves to `offset`: back within the kept bytes, or forward by reading; -1 when impossible.
    private func seek(_ offset: Int, _ whence: Int32) -> Int {
        let target = whence == SEEK_SET ? offset : whence == SEEK_CUR ? position + offset : -1
        guard target >= 0 else { return -1 }
        if target <= consumed {
            guard target >= consumed || consumed <= kept.count else { return -1 }
            position = target
            return position
        }
        var scratch = [UInt8](repeating: 0, count: 1 << 16)
        while position < target {
            position = consumed
            let n = scratch.withUnsafeMutableBytes { read($0.baseAddress!, min($0.count, target - position)) }
            if n <= 0 { return -1 }
        }
        return position
    }

    /// The callbacks; `user_data` is an unretained PipeSource that outlives the SNDFILE.
    static var virtualIO: SF_VIRTUAL_IO { SF_VIRTUAL_IO(
        // The length is unknown: the largest, so that libsndfile reads to the end of the stream.
        get_filelen: { _ in sf_count_t(Int64.max / 2) },
        seek: { offset, whence, data in sf_count_t(PipeSource.source(data).seek(Int(offset), whence)) },
        read: { pointer, count, data in
            guard let pointer else { return 0 }
            return sf_count_t(max(0, PipeSource.source(data).read(pointer, Int(count))))
        },
        write: { _, _, _ in 0 },
        tell: { data in sf_count_t(PipeSource.source(data).position) }) }

    fileprivate static func source(_ data: UnsafeMutableRawPointer?) -> PipeSource {
        Unmanaged<PipeSource>.fromOpaque(data!).takeUnretainedValue()
    }
}

/// An input read as a stream: standard input (`-`), or a path naming a pipe (`/dev/stdin` on a pipe, a shell's
/// `<(...)`, a FIFO), which gets the same checks as standard input instead of libsndfile's own pipe reading.
/// Owns the descriptor it opened and the temporary copy ``spool(name:)`` makes.
final class StreamInput {
    /// The stream's descriptor (0 for standard input).
    let descriptor: Int32
    private let owned: Bool
    /// The unlinked temporary copy, or -1.
    private var copy: Int32 = -1

    private init(descriptor: Int32, owned: Bool) {
        self.descriptor = descriptor
        self.owned = owned
    }

    deinit {
        if owned { close(descriptor) }
        if copy >= 0 { close(copy) }
    }

    /// The stream `path` names: standard input for `-`, the opened pipe for a FIFO, nil for anything else
    /// (a regular file, a device: libsndfile opens those by path).
    static func open(path: String) throws(AudioFileError) -> StreamInput? {
        if path == "-" { return StreamInput(descriptor: 0, owned: false) }
        var status = stat()
        guard stat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFIFO else { return nil }
        let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .cannotOpen(path: path, reason: String(cString: strerror(errno))) }
        return StreamInput(descriptor: descriptor, owned: true)
    }

    /// Copies the rest of the stream to an unlinked temporary file (in TMPDIR) and returns a path that opens it
    /// (`/proc/self/fd/N`): for Ogg of a codec other than Vorbis (Opus, FLAC), which libsndfile reads only by
    /// seeking. Disk, not memory, grows with the stream; a failed copy (a full disk) is an error naming the directory.
    func spool(name: String) throws(AudioFileError) -> String {
        let directory = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(directory)/sotto-input-XXXXXX".utf8CString)
        let target = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard target >= 0 else {
            throw .cannotOpen(path: name, reason: "cannot make a temporary file in \(directory) to read the Ogg stream: \(String(cString: strerror(errno)))")
        }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        _ = fcntl(target, F_SETFD, FD_CLOEXEC)
        copy = target
        var block = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let got = block.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if got < 0 {
                if errno == EINTR { continue }
                throw .readFailed(path: name, reason: String(cString: strerror(errno)))
            }
            if got == 0 { break }
            var done = 0
            while done < got {
                let wrote = block.withUnsafeBytes { write(target, $0.baseAddress! + done, got - done) }
                if wrote < 0 && errno == EINTR { continue }
                guard wrote > 0 else {
                    throw .readFailed(path: name, reason: "cannot copy the Ogg stream to a temporary file in \(directory) (to read it): \(String(cString: strerror(errno)))")
                }
                done += wrote
            }
        }
        return "/proc/self/fd/\(target)"
    }
}
