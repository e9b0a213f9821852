import CSndFile
import Foundation
import Testing
@testable import SottoAudio

/// Ogg read from a pipe (a FIFO, as standard input is): Vorbis decoded as it arrives (libvorbisfile), other codecs
/// (Opus) still read from a temporary copy, as before; both give what the same file gives.
@Suite struct OggPipeTests {
    /// A 1 s 19 kHz tone at 48 kHz written by libsndfile as Ogg with `subtype`.
    static func ogg(_ subtype: Int, at path: String) throws {
        var info = SF_INFO()
        info.samplerate = 48_000
        info.channels = 1
        info.format = Int32(SF_FORMAT_OGG | subtype)
        let file = try #require(sf_open(path, Int32(SFM_WRITE), &info), "\(String(cString: sf_strerror(nil)))")
        var tone = (0..<48_000).map { Float(0.5 * sin(2 * Double.pi * 19_000 * Double($0) / 48_000)) }
        #expect(sf_writef_float(file, &tone, 48_000) == 48_000)
        #expect(sf_close(file) == 0)
    }

    /// Reads `bytes` through a FIFO written by a thread of its own.
    static func readThroughFIFO(_ bytes: Data, in dir: URL) throws -> [Float] {
        let fifo = dir.appendingPathComponent("fifo-\(UUID().uuidString)").path
        try #require(mkfifo(fifo, 0o600) == 0)
        Thread.detachNewThread {
            let descriptor = open(fifo, O_WRONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return }
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let n = write(descriptor, raw.baseAddress! + offset, raw.count - offset)
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { break }
                    offset += n
                }
            }
            close(descriptor)
        }
        return try AudioFileReader(path: fifo).readAll()
    }

    @Test(.timeLimit(.minutes(1)), arguments: [SF_FORMAT_VORBIS, SF_FORMAT_OPUS]) func oggOnAPipeReadsAsTheFileDoes(subtype: Int) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-ogg-pipe-\(getpid())-\(subtype)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("tone.ogg").path
        try Self.ogg(subtype, at: path)
        let fromFile = try AudioFileReader(path: path).readAll()
        let fromPipe = try Self.readThroughFIFO(try Data(contentsOf: URL(fileURLWithPath: path)), in: dir)
        #expect(fromFile.count >= 47_000 && fromPipe.count == fromFile.count, "file \(fromFile.count), pipe \(fromPipe.count)")
        let difference = zip(fromFile, fromPipe).map { abs($0 - $1) }.max() ?? 1
        #expect(difference < 1e-4, "largest difference \(difference)")
    }
}
