import CSottoShims
import Glibc

/// The first bytes of standard input when it is a pipe, read without consuming them (tee(2)), to accept on
/// a pipe only the containers libsndfile reads as a stream. Others (CAF, SDS, 8SVX, G.72x AU...) need to
/// seek: on a pipe libsndfile reads nothing from them, or spins forever on a truncated one.
enum PipeHead {
    /// Bytes needed to tell the containers apart (AU's encoding field ends at byte 16).
    static let length = 16

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
