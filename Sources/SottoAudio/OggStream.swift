import CVorbisFile
import Glibc

/// The pages of an Ogg stream checked as its bytes go by (capture pattern, version, checksum: as libogg finds
/// them), for what libogg drops without a word: the byte ranges that were no whole page, whether the last whole
/// page ended the stream, and that page's granule position. Holds at most one page (65 307 bytes) at a time.
struct OggPageWatch {
    /// Byte ranges that were no whole page (a failed checksum, garbage), in stream order.
    private(set) var damaged: [Range<Int>] = []
    /// Flags of the last whole page (4: the stream's last page), and its granule position (-1: none).
    private(set) var lastFlags: UInt8 = 0
    private(set) var lastGranule: Int64 = -1
    /// Whole pages seen.
    private(set) var pages = 0
    /// Bytes not yet resolved into pages or damage, from stream offset `start`.
    private var pending: [UInt8] = []
    private var start = 0
    /// Where the current run of bad bytes began, if one is under way.
    private var badFrom: Int?
    private static let table = OggDamage.crcTable

    /// Takes the next bytes of the stream.
    mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        pending += bytes
        var used = 0
        defer {
            if used > 0 { pending.removeFirst(used); start += used }
        }
        while pending.count - used >= 27 {
            switch page(at: used) {
            case .whole(let length):
                if let from = badFrom { damaged.append(from..<(start + used)); badFrom = nil }
                lastFlags = pending[used + 5]
                lastGranule = (0..<8).reduce(Int64(0)) { $0 | Int64(pending[used + 6 + $1]) << (8 * $1) }
                pages += 1
                used += length
            case .incomplete:
                return
            case .bad:
                if badFrom == nil { badFrom = start + used }
                used += 1
                // On to the next capture pattern (its first bytes may be all that has come yet).
                while used < pending.count, pending[used] != 0x4F { used += 1 }
            }
        }
    }

    /// At the end of the stream: true when it ended before its last page (cut short, or bytes after the last
    /// whole page: a page cut short).
    mutating func finish() -> Bool {
        let cut = !pending.isEmpty || badFrom != nil || lastFlags & 4 == 0
        pending.removeAll()
        badFrom = nil
        return cut
    }

    private enum Page { case whole(Int), incomplete, bad }

    private func page(at offset: Int) -> Page {
        let available = pending.count - offset
        guard pending[offset] == 0x4F, pending[offset + 1] == 0x67, pending[offset + 2] == 0x67, pending[offset + 3] == 0x53,
              pending[offset + 4] == 0 else { return .bad }
        let segments = Int(pending[offset + 26])
        guard available >= 27 + segments else { return .incomplete }
        let body = pending[(offset + 27)..<(offset + 27 + segments)].reduce(0) { $0 + Int($1) }
        let length = 27 + segments + body
        guard available >= length else { return .incomplete }
        var crc: UInt32 = 0
        for i in 0..<length {
            let byte = (22..<26).contains(i) ? 0 : pending[offset + i]
            crc = (crc << 8) ^ Self.table[Int((crc >> 24) ^ UInt32(byte))]
        }
        let stated = (0..<4).reduce(UInt32(0)) { $0 | UInt32(pending[offset + 22 + $1]) << (8 * $1) }
        return crc == stated ? .whole(length) : .bad
    }
}

/// Ogg Vorbis read from a pipe as it arrives (libvorbisfile without seeking): samples come out as soon as their
/// pages are in, memory stays flat. The pages are checked on the way (``OggPageWatch``). Where libogg loses a
/// page (a hole), the samples after it are held until a page's granule position places them, then given after
/// silence for what was lost, so that every later sample keeps its time, as a file's damaged pages are read
/// (``OggSegmentReader``).
///
/// A class because it owns libvorbisfile's state; one owner, not for concurrent use.
final class OggStreamReader {
    private(set) var channels = 0
    /// Frames per second (Hz).
    private(set) var sampleRate = 0
    private let descriptor: Int32
    private let vorbis: UnsafeMutablePointer<OggVorbis_File>
    private var watch = OggPageWatch()
    /// errno of a failed read of the pipe, or 0.
    private var readError: Int32 = 0
    /// Frames given so far (silence included).
    private var position: Int64 = 0
    /// After a hole: interleaved samples decoded since, not yet placed; nil when no hole is open.
    private var held: [Float]?
    /// Interleaved samples ready to give (placed, silence included), from `readyStart`.
    private var ready: [Float] = []
    private var readyStart = 0
    private var ended = false
    /// What was lost where: (time of the gap in frames, frames of silence put in).
    private(set) var gaps: [(at: Int64, frames: Int64)] = []
    /// True when the stream ended before its last page.
    private(set) var truncated = false
    /// Held samples are given unplaced beyond this many frames (a stream whose pages give no positions).
    private var holdLimit = 0

    /// Opens the Vorbis stream on `descriptor` (its headers are read now, waiting for them).
    /// - Throws: a reason when the stream is no Vorbis or its headers are damaged.
    init(descriptor: Int32) throws(AudioFileError) {
        self.descriptor = descriptor
        vorbis = .allocate(capacity: 1)
        var callbacks = ov_callbacks()
        callbacks.read_func = { pointer, size, count, source in
            guard let pointer, let source else { return 0 }
            return Unmanaged<OggStreamReader>.fromOpaque(source).takeUnretainedValue().readStream(pointer, size * count)
        }
        let opened = ov_open_callbacks(Unmanaged.passUnretained(self).toOpaque(), vorbis, nil, 0, callbacks)
        guard opened == 0 else {
            vorbis.deallocate()
            throw .cannotOpen(path: "standard input", reason: Self.describe(Int(opened), readError: readError))
        }
        let info = ov_info(vorbis, -1).pointee
        channels = Int(info.channels)
        sampleRate = info.rate
        holdLimit = max(1, Int(info.rate)) * 20
    }

    deinit {
        ov_clear(vorbis)
        vorbis.deallocate()
    }

    private func readStream(_ pointer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        while true {
            let n = Glibc.read(descriptor, pointer, count)
            if n < 0 {
                if errno == EINTR { continue }
                readError = errno
                return 0
            }
            watch.feed(UnsafeRawBufferPointer(start: pointer, count: n))
            errno = 0
            return n
        }
    }

    private static func describe(_ code: Int, readError: Int32) -> String {
        if readError != 0 { return String(cString: strerror(readError)) }
        switch Int32(code) {
        case OV_EREAD: return "the stream could not be read"
        case OV_ENOTVORBIS: return "an Ogg stream without Vorbis audio (only Ogg Vorbis is read)"
        case OV_EVERSION: return "a Vorbis version not supported"
        case OV_EBADHEADER: return "a damaged Vorbis header"
        case OV_EBADLINK: return "a damaged link in a chained Ogg stream"
        case OV_EFAULT: return "an internal error of libvorbisfile"
        default: return "libvorbisfile error \(code)"
        }
    }

    /// Reads up to `frames` interleaved frames into `buffer` (float, [-1, 1]); 0 at the end.
    /// - Throws: a reason when the stream cannot be read, or changes its channels or rate (a chained stream).
    func read(into buffer: UnsafeMutablePointer<Float>, frames: Int) throws(AudioFileError) -> Int {
        while readyStart == ready.count {
            ready.removeAll(keepingCapacity: true)
            readyStart = 0
            if ended { return 0 }
            try decode()
        }
        let n = min(frames, (ready.count - readyStart) / channels)
        ready.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + readyStart, count: n * channels) }
        readyStart += n * channels
        return n
    }

    /// Decodes the next packet's samples into `ready` (or `held`, after a hole), or marks the end.
    private func decode() throws(AudioFileError) {
        var pcm: UnsafeMutablePointer<UnsafeMutablePointer<Float>?>?
        var link: Int32 = 0
        let before = ov_pcm_tell(vorbis)
        let got = ov_read_float(vorbis, &pcm, 4_096, &link)
        if got == Int(OV_HOLE) {
            // A page was lost: hold what follows until a granule position says where it goes.
            if held == nil { held = [] }
            return
        }
        if got < 0 { throw .readFailed(path: "standard input", reason: Self.describe(got, readError: readError)) }
        if got == 0 {
            ended = true
            truncated = watch.finish()
            // Held samples without a later position: they end where the last page's granule position says.
            if let samples = held {
                held = nil
                let frames = Int64(samples.count / channels)
                let end = watch.lastFlags & 4 != 0 && watch.lastGranule >= 0 ? watch.lastGranule : position + frames
                place(samples, start: max(position, end - frames))
            }
            return
        }
        let info = ov_info(vorbis, -1).pointee
        guard Int(info.channels) == channels, info.rate == sampleRate else {
            throw .readFailed(path: "standard input", reason: "the chained Ogg stream changes from \(channels) channels at \(sampleRate) Hz to \(info.channels) at \(info.rate) Hz, which is not read")
        }
        var samples = [Float](repeating: 0, count: got * channels)
        if let pcm {
            for c in 0..<channels {
                guard let channel = pcm[c] else { continue }
                for i in 0..<got { samples[i * channels + c] = channel[i] }
            }
        }
        guard var pending = held else {
            ready += samples
            position += Int64(got)
            return
        }
        pending += samples
        let after = ov_pcm_tell(vorbis)
        let frames = Int64(pending.count / channels)
        if after != before + Int64(got) {
            // A granule position placed these samples: the held ones come just before them.
            held = nil
            place(pending, start: after - frames)
        } else if frames > Int64(holdLimit) {
            held = nil
            place(pending, start: position)
        } else {
            held = pending
        }
    }

    /// Gives `samples` (interleaved) from frame `start`, after silence from the current position.
    private func place(_ samples: [Float], start: Int64) {
        let gap = max(0, start - position)
        gaps.append((position, gap))
        ready += [Float](repeating: 0, count: Int(gap) * channels)
        ready += samples
        position += gap + Int64(samples.count / channels)
    }

    /// The warning for the stream's reader: where pages were damaged, and the audio they held.
    func warning() -> String? {
        let damaged = watch.damaged
        guard !damaged.isEmpty || gaps.contains(where: { $0.frames > 0 }) else { return nil }
        func seconds(_ frames: Int64) -> String {
            let thousandths = Int((Double(frames) / Double(sampleRate) * 1_000).rounded())
            return "\(thousandths / 1_000).\(String(thousandths % 1_000 + 1_000).dropFirst())"
        }
        let bytes = damaged.isEmpty ? ["a page missing"] : damaged.map { "bytes \($0.lowerBound)-\($0.upperBound - 1)" }
        let lost = gaps.filter { $0.frames > 0 }.map { "\(seconds($0.frames)) s at \(seconds($0.at)) s" }
        return "damaged Ogg pages (\(bytes.joined(separator: ", "))) were skipped: "
            + (lost.isEmpty ? "no audio lost" : "audio lost (\(lost.joined(separator: ", "))), read as silence so that later times stay right")
    }
}
