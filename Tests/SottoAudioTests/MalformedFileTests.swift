import Foundation
import Testing
@testable import SottoAudio

/// Copies `source` to `target` with `edit` applied to its bytes (the byte edits of issue 11).
func writeEdited(_ source: String, to target: String, _ edit: (inout [UInt8]) -> Void) throws {
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: source)))
    edit(&bytes)
    try Data(bytes).write(to: URL(fileURLWithPath: target))
}

/// Reads `path` in blocks of `blockFrames` (the decoder's block) until the end or an error: the frames
/// got before, and the error.
func readUntilError(_ path: String, blockFrames: Int = 1 << 16) throws -> (frames: Int, error: AudioFileError?) {
    let reader = try AudioFileReader(path: path)
    var block = [Float](repeating: 0, count: blockFrames)
    var total = 0
    do {
        while true {
            let n = try block.withUnsafeMutableBufferPointer { try reader.read(into: $0) }
            if n == 0 { return (total, nil) }
            total += n
        }
    } catch {
        return (total, error as? AudioFileError)
    }
}

/// The malformed files of issue 11, made here from generated ones.
@Suite struct MalformedFileTests {
    /// Two seconds of a tone at 48 kHz: enough FLAC frames for damage in the middle of the data.
    static let tone: [Float] = (0..<96_000).map { 0.5 * Float(sin(Double($0) * 0.41)) }

    static func flac(_ name: String) throws -> String {
        let path = scratchPath(name)
        try AudioFile.write(tone, sampleRate: 48_000, to: path, format: .flac16)
        return path
    }

    /// R3: a WAV whose header claims 1 Hz is refused when it is opened, with the supported range.
    @Test func absurdSampleRateIsRefusedAtOpen() throws {
        let good = scratchPath("rate-good.wav")
        try AudioFile.write(Self.tone, sampleRate: 48_000, to: good)
        let bad = scratchPath("rate-1hz.wav")
        // b[24:32] = struct.pack('<II', 1, 2): sample rate 1 Hz, 2 bytes per second.
        try writeEdited(good, to: bad) { $0.replaceSubrange(24..<32, with: [1, 0, 0, 0, 2, 0, 0, 0]) }
        do {
            _ = try AudioFileReader(path: bad)
            Issue.record("a 1 Hz file was opened")
        } catch {
            #expect("\(error)".contains("1 Hz") && "\(error)".contains("8000 to 384000 Hz"), "\(error)")
        }
        for rate in [7_999.0, 384_001] {
            let path = scratchPath("rate-\(Int(rate)).wav")
            try AudioFile.write([0, 0.1, 0], sampleRate: rate, to: path)
            #expect(throws: AudioFileError.self) { try AudioFileReader(path: path) }
        }
        for rate in [8_000.0, 384_000] {
            let path = scratchPath("rate-ok-\(Int(rate)).wav")
            try AudioFile.write([0, 0.1, 0], sampleRate: rate, to: path)
            #expect(try AudioFileReader(path: path).info.sampleRate == rate)
        }
    }

    /// R4: a FLAC whose header gives the length as unknown reads to its real end.
    @Test func flacOfUnknownLengthReadsToItsEnd() throws {
        let unknown = scratchPath("unknown-length.flac")
        // b[21] &= 0xF0; b[22:26] = bytes(4): total samples (36 bits of STREAMINFO) = 0, "unknown".
        try writeEdited(try Self.flac("unknown-source.flac"), to: unknown) { bytes in
            bytes[21] &= 0xF0
            bytes.replaceSubrange(22..<26, with: [0, 0, 0, 0])
        }
        let reader = try AudioFileReader(path: unknown)
        #expect(reader.info.frames == nil, "the unknown length is reported as \(String(describing: reader.info.frames))")
        #expect(try reader.readAll().count == Self.tone.count)
    }

    /// R5: a flipped bit inside FLAC data, or a FLAC cut in the middle of its data, is a read error after
    /// the frames before it, never a silent short read.
    @Test func damagedFlacDataIsAReadErrorAfterTheGoodFrames() throws {
        let source = try Self.flac("damaged-source.flac")
        let size = try Data(contentsOf: URL(fileURLWithPath: source)).count
        let flipped = scratchPath("flipped.flac")
        try writeEdited(source, to: flipped) { $0[size * 6 / 10] ^= 0x10 }
        let truncated = scratchPath("truncated.flac")
        try writeEdited(source, to: truncated) { $0.removeLast(size * 4 / 10) }
        for path in [flipped, truncated] {
            for blockFrames in [4096, 1 << 16] {
                let (frames, error) = try readUntilError(path, blockFrames: blockFrames)
                #expect(frames > 0 && frames < Self.tone.count, "\(path): \(frames) frames")
                guard case .readFailed? = error else { Issue.record("\(path), blocks of \(blockFrames): no read error after \(frames) frames"); continue }
            }
        }
    }

    /// A write that fails leaves no file behind, and a good one leaves no temporary file.
    @Test func failedWriteLeavesNoFile() throws {
        let directory = scratchPath("atomic-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let failed = directory + "/x.flac"
        // FLAC cannot hold 768 kHz: libsndfile fails after the file was created.
        #expect(throws: AudioFileError.self) { try AudioFile.write([0, 0.5, 0], sampleRate: 768_000, to: failed, format: .flac16) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == [])
        try AudioFile.write([0, 0.5, 0], sampleRate: 48_000, to: directory + "/good.flac", format: .flac16)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["good.flac"])
        // A writer dropped without close() (an error on the way) leaves nothing either.
        do {
            let writer = try AudioFileWriter(path: directory + "/dropped.wav", sampleRate: 48_000)
            try [Float](repeating: 0.1, count: 100).withUnsafeBufferPointer { try writer.write($0) }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["good.flac"])
        // WAV and AIFF sizes are 32-bit: past 4 GiB (here a lowered limit) the write fails, no wrapped file.
        do {
            let writer = try AudioFileWriter(path: directory + "/long.wav", sampleRate: 48_000)
            writer.maximumDataBytes = 1_000
            try [Float](repeating: 0.1, count: 500).withUnsafeBufferPointer { try writer.write($0) }
            #expect(throws: AudioFileError.self) { try [Float](repeating: 0.1, count: 1).withUnsafeBufferPointer { try writer.write($0) } }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["good.flac"])
        // A live recording is written in place: what was captured stays even without close().
        do {
            let writer = try AudioFileWriter(path: directory + "/recording.wav", sampleRate: 48_000, atomically: false)
            try [Float](repeating: 0.1, count: 100).withUnsafeBufferPointer { try writer.write($0) }
            #expect(FileManager.default.fileExists(atPath: directory + "/recording.wav"))
        }
    }
}
