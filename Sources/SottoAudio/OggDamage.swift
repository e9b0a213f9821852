import CSndFile
import Glibc

/// One page of an Ogg file, as its header states it.
struct OggPage: Sendable, Hashable {
    /// Byte offset of the page in the file.
    var offset: Int
    /// Bytes of the page (header, segment table and body).
    var length: Int
    /// Header flags (1: continues a packet, 2: first page, 4: last page).
    var flags: UInt8
    /// Granule position: for Vorbis, the PCM frames up to the end of the last packet that ends on this page
    /// (-1 when none does).
    var granule: Int64
    /// Logical stream.
    var serial: UInt32
    /// Page number within the logical stream.
    var sequence: UInt32
    /// Packets that end on this page (lacing values below 255).
    var packetsEnded: Int
}

/// Pages of an Ogg Vorbis file that libogg drops without a word (a checksum that fails, bytes that are no page),
/// found by reading the pages' headers and checksums: where, and how much audio they held by the granule
/// positions around them. A file with such damage is read in the runs of whole pages between the damaged ones
/// (``OggSegmentReader``), each placed at the time its granule positions give, silence in the gaps.
struct OggDamage: Sendable {
    /// The header pages (identification, comment, setup): the first pages, up to the first one with audio.
    var headerRanges: [Range<Int>]
    /// Runs of consecutive whole audio pages, and the granule position ending each run (PCM frames).
    var segments: [(bytes: Range<Int>, endGranule: Int64)]
    /// Byte ranges that were damaged (a failed checksum, garbage, a missing page) before the last whole page.
    var damaged: [Range<Int>]
    /// True when the stream does not end with its last page (flagged end of stream): the file was cut.
    var truncated: Bool

    /// The Ogg CRC-32 (polynomial 0x04C11DB7, most significant bit first, no reflection, initial 0).
    static let crcTable: [UInt32] = (0..<256).map { i -> UInt32 in
        var r = UInt32(i) << 24
        for _ in 0..<8 { r = r & 0x8000_0000 != 0 ? (r << 1) ^ 0x04C1_1DB7 : r << 1 }
        return r
    }

    /// The damage of the Ogg file at `path`, or nil when every page is whole (or the file is not one Vorbis
    /// stream this can split: several logical streams, damaged headers; libsndfile's own reading stands then).
    static func scan(path: String) -> OggDamage? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        let size = Int(lseek(descriptor, 0, SEEK_END))
        guard size > 27 else { return nil }
        var pages: [OggPage] = []
        var damaged: [Range<Int>] = []
        var offset = 0
        var badFrom: Int?
        var header = [UInt8](repeating: 0, count: 27 + 255)
        var body = [UInt8](repeating: 0, count: 255 * 255)
        let table = crcTable
        // Pages one after another; where none is whole, the next "OggS" (as libogg resynchronises).
        while offset + 27 <= size {
            if let page = readPage(descriptor, at: offset, size: size, header: &header, body: &body, table: table) {
                if let start = badFrom { damaged.append(start..<offset); badFrom = nil }
                pages.append(page)
                offset += page.length
            } else {
                if badFrom == nil { badFrom = offset }
                offset += 1
                // Skip ahead to the next capture pattern.
                while offset + 4 <= size {
                    var magic = [UInt8](repeating: 0, count: 4)
                    guard magic.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress, 4, off_t(offset)) }) == 4 else { break }
                    if magic == Array("OggS".utf8) { break }
                    offset += 1
                }
            }
        }
        // Bytes after the last whole page: a page cut short.
        let cutInsidePage = badFrom.map { $0 < size } ?? false
        guard let first = pages.first, pages.allSatisfy({ $0.serial == first.serial }) else { return nil }
        let truncated = cutInsidePage || pages[pages.count - 1].flags & 4 == 0
        // Missing page numbers are damage too (a page lost whole).
        var gapsAfter = Set<Int>()
        for i in 1..<max(1, pages.count) where pages[i].sequence != pages[i - 1].sequence &+ 1 { gapsAfter.insert(i - 1) }
        guard !damaged.isEmpty || !gapsAfter.isEmpty || truncated else { return nil }
        // Vorbis: three header packets, the last one ending its page (audio starts on a fresh page). The header
        // pages must be whole and in order.
        var packets = 0
        guard let lastHeader = pages.firstIndex(where: { packets += $0.packetsEnded; return packets >= 3 }),
              lastHeader + 1 < pages.count,
              pages[0...lastHeader].enumerated().allSatisfy({ $0.element.sequence == UInt32($0.offset) }),
              pages[lastHeader].offset + pages[lastHeader].length == pages[lastHeader + 1].offset
                || !damaged.isEmpty && damaged[0].lowerBound == pages[lastHeader].offset + pages[lastHeader].length
        else { return nil }
        let firstAudio = lastHeader + 1
        // The damage must lie among the audio pages: damaged headers are libsndfile's to refuse.
        let audioStart = pages[lastHeader].offset + pages[lastHeader].length
        guard damaged.allSatisfy({ $0.lowerBound >= audioStart }) else { return nil }
        var segments: [(bytes: Range<Int>, endGranule: Int64)] = []
        var start = firstAudio
        for i in firstAudio..<pages.count {
            let ends = i == pages.count - 1 || gapsAfter.contains(i) || pages[i].offset + pages[i].length != pages[i + 1].offset
            guard ends else { continue }
            // A run must end on a page where a packet ends (a granule position); a run with none gives nothing.
            if let last = pages[start...i].lastIndex(where: { $0.granule >= 0 }) {
                segments.append((pages[start].offset..<(pages[i].offset + pages[i].length), pages[last].granule))
            }
            start = i + 1
        }
        for i in gapsAfter where i + 1 < pages.count && pages[i].offset + pages[i].length == pages[i + 1].offset {
            damaged.append(pages[i + 1].offset..<pages[i + 1].offset)
        }
        guard segments.count > 1 || !damaged.isEmpty || truncated else { return nil }
        return OggDamage(headerRanges: [0..<audioStart], segments: segments,
                         damaged: damaged.sorted { $0.lowerBound < $1.lowerBound }, truncated: truncated)
    }

    /// The page at `offset` if it is whole: capture pattern, version 0, its segments within the file, checksum.
    private static func readPage(_ descriptor: Int32, at offset: Int, size: Int, header: inout [UInt8], body: inout [UInt8],
                                 table: [UInt32]) -> OggPage? {
        guard header.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress, 27, off_t(offset)) }) == 27,
              header[0..<4].elementsEqual("OggS".utf8), header[4] == 0 else { return nil }
        let segmentCount = Int(header[26])
        guard offset + 27 + segmentCount <= size,
              header.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress! + 27, segmentCount, off_t(offset + 27)) }) == segmentCount
        else { return nil }
        let bodyLength = header[27..<(27 + segmentCount)].reduce(0) { $0 + Int($1) }
        let length = 27 + segmentCount + bodyLength
        guard offset + length <= size,
              body.withUnsafeMutableBytes({ pread(descriptor, $0.baseAddress, bodyLength, off_t(offset + 27 + segmentCount)) }) == bodyLength
        else { return nil }
        func u32(_ at: Int) -> UInt32 { (0..<4).reduce(UInt32(0)) { $0 | UInt32(header[at + $1]) << (8 * $1) } }
        let stated = u32(22)
        var crc: UInt32 = 0
        for i in 0..<(27 + segmentCount) {
            let byte = (22..<26).contains(i) ? 0 : header[i]
            crc = (crc << 8) ^ table[Int((crc >> 24) ^ UInt32(byte))]
        }
        for i in 0..<bodyLength { crc = (crc << 8) ^ table[Int((crc >> 24) ^ UInt32(body[i]))] }
        guard crc == stated else { return nil }
        let granule = (0..<8).reduce(UInt64(0)) { $0 | UInt64(header[6 + $1]) << (8 * $1) }
        return OggPage(offset: offset, length: length, flags: header[5], granule: Int64(bitPattern: granule),
                       serial: u32(14), sequence: u32(18), packetsEnded: header[27..<(27 + segmentCount)].filter { $0 < 255 }.count)
    }
}

/// Byte ranges of a file presented to libsndfile as one file (virtual I/O): the header pages of an Ogg file
/// followed by one run of its audio pages. Read with `pread`; nothing held in memory.
final class SplicedFile {
    private let descriptor: Int32
    private let ranges: [Range<Int>]
    private let length: Int
    private var position = 0

    init?(path: String, ranges: [Range<Int>]) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        self.ranges = ranges
        length = ranges.reduce(0) { $0 + $1.count }
    }

    deinit { close(descriptor) }

    /// The callbacks; `user_data` is an unretained SplicedFile that outlives the SNDFILE.
    static var virtualIO: SF_VIRTUAL_IO { SF_VIRTUAL_IO(
        get_filelen: { data in sf_count_t(SplicedFile.file(data).length) },
        seek: { offset, whence, data in
            let file = SplicedFile.file(data)
            let base = whence == SEEK_SET ? 0 : whence == SEEK_END ? file.length : file.position
            file.position = max(0, min(file.length, base + Int(offset)))
            return sf_count_t(file.position)
        },
        read: { pointer, count, data in
            guard let pointer else { return 0 }
            return sf_count_t(SplicedFile.file(data).read(into: pointer, count: Int(count)))
        },
        write: { _, _, _ in 0 },
        tell: { data in sf_count_t(SplicedFile.file(data).position) }) }

    private static func file(_ data: UnsafeMutableRawPointer?) -> SplicedFile {
        Unmanaged<SplicedFile>.fromOpaque(data!).takeUnretainedValue()
    }

    private func read(into pointer: UnsafeMutableRawPointer, count: Int) -> Int {
        var done = 0
        var base = 0
        for range in ranges {
            defer { base += range.count }
            guard done < count, position < base + range.count, position >= base else { continue }
            let inRange = position - base
            let n = min(count - done, range.count - inRange)
            let got = pread(descriptor, pointer + done, n, off_t(range.lowerBound + inRange))
            guard got > 0 else { return done }
            done += got
            position += got
            if got < n { return done }
        }
        return done
    }
}

/// Reads a damaged Ogg Vorbis file as its runs of whole pages (``OggDamage``), each through libsndfile on its
/// own and placed so that it ends at its last granule position: silence fills what the damaged pages held, and
/// every later sample keeps its time. Each run is decoded twice (once to count it).
final class OggSegmentReader {
    private let path: String
    private let damage: OggDamage
    private let channels: Int
    /// The run being read, its file, and the frames still to give from it (silence first).
    private var index = -1
    private var source: SplicedFile?
    private var handle: OpaquePointer?
    private var silence = 0
    /// Frames given so far.
    private var position: Int64 = 0
    /// What was lost where: (time of the gap in frames, frames of silence put in).
    private(set) var gaps: [(at: Int64, frames: Int64)] = []

    init(path: String, damage: OggDamage, channels: Int) {
        self.path = path
        self.damage = damage
        self.channels = channels
    }

    deinit { if let handle { sf_close(handle) } }

    /// Reads up to `frames` interleaved frames into `buffer` (float, [-1, 1]); 0 at the end, -1 on a failure.
    func read(into buffer: UnsafeMutablePointer<Float>, frames: Int) -> Int {
        var done = 0
        while done < frames {
            if silence > 0 {
                let n = min(silence, frames - done)
                (buffer + done * channels).initialize(repeating: 0, count: n * channels)
                silence -= n
                done += n
                position += Int64(n)
                continue
            }
            if let handle {
                let got = Int(sf_readf_float(handle, buffer + done * channels, sf_count_t(frames - done)))
                if got > 0 { done += got; position += Int64(got); continue }
                sf_close(handle)
                self.handle = nil
                source = nil
            }
            guard openNext() else { return done }
        }
        return done
    }

    /// True when the file ends before its last page (cut short).
    var truncated: Bool { damage.truncated }

    /// The warning for the file's reader: where pages were damaged, and the audio they held.
    func warning(sampleRate: Double) -> String? {
        guard !damage.damaged.isEmpty || gaps.contains(where: { $0.frames > 0 }) else { return nil }
        func seconds(_ frames: Int64) -> String {
            let thousandths = Int((Double(frames) / sampleRate * 1_000).rounded())
            return "\(thousandths / 1_000).\(String(thousandths % 1_000 + 1_000).dropFirst())"
        }
        let bytes = damage.damaged.map { $0.isEmpty ? "a page missing before byte \($0.lowerBound)" : "bytes \($0.lowerBound)-\($0.upperBound - 1)" }
        let lost = gaps.filter { $0.frames > 0 }.map { "\(seconds($0.frames)) s at \(seconds($0.at)) s" }
        return "damaged Ogg pages (\(bytes.joined(separator: ", "))) were skipped: "
            + (lost.isEmpty ? "no audio lost" : "audio lost (\(lost.joined(separator: ", "))), read as silence so that later times stay right")
    }

    /// Opens the next run, counting its frames first to place it.
    private func openNext() -> Bool {
        index += 1
        guard index < damage.segments.count else { return false }
        let segment = damage.segments[index]
        let ranges = damage.headerRanges + [segment.bytes]
        guard let count = Self.count(path: path, ranges: ranges, channels: channels),
              let (file, opened) = Self.open(path: path, ranges: ranges) else { return false }
        source = file
        handle = opened
        // The first run starts the audio unless damage came before it.
        if index > 0 || damage.damaged.contains(where: { $0.lowerBound < segment.bytes.lowerBound }) {
            let start = segment.endGranule - count
            let gap = max(0, start - position)
            gaps.append((position, gap))
            silence = Int(gap)
        }
        return true
    }

    private static func open(path: String, ranges: [Range<Int>]) -> (SplicedFile, OpaquePointer)? {
        guard let file = SplicedFile(path: path, ranges: ranges) else { return nil }
        var info = SF_INFO()
        var io = SplicedFile.virtualIO
        guard let handle = sf_open_virtual(&io, Int32(SFM_READ), &info, Unmanaged.passUnretained(file).toOpaque()) else { return nil }
        sf_command(handle, Int32(SFC_SET_NORM_FLOAT), nil, Int32(SF_TRUE))
        return (file, handle)
    }

    /// Frames libsndfile decodes from `ranges`.
    private static func count(path: String, ranges: [Range<Int>], channels: Int) -> Int64? {
        guard let (file, handle) = open(path: path, ranges: ranges) else { return nil }
        defer { sf_close(handle); withExtendedLifetime(file) {} }
        var buffer = [Float](repeating: 0, count: 4_096 * channels)
        var total: Int64 = 0
        while true {
            let got = buffer.withUnsafeMutableBufferPointer { sf_readf_float(handle, $0.baseAddress, 4_096) }
            if got <= 0 { break }
            total += Int64(got)
        }
        return total
    }
}
