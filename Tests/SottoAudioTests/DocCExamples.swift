import Foundation
import SottoAudio
import Testing

/// The worked example of the SottoAudio catalog, compiled and run here; `DocCExampleTests` (SottoCLITests)
/// checks that the catalog shows it exactly as written here.
struct DocCExamples {
    @Test func audio() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-docc-\(getpid()).flac").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        // One second of a 19 kHz tone at half scale, written as 16-bit FLAC (the format follows the extension).
        let tone = (0..<48_000).map { Float(0.5 * sin(2 * Double.pi * 19_000 * Double($0) / 48_000)) }
        try AudioFile.write(tone, sampleRate: 48_000, to: path, format: AudioFileFormat(path: path))
        // Read back whole, or in blocks with memory flat in the file's length.
        let (samples, info) = try AudioFile.read(path: path)
        let reader = try AudioFileReader(path: path)
        var block = [Float](repeating: 0, count: 4_096), blocks = 0
        while try block.withUnsafeMutableBufferPointer({ try reader.read(into: $0) }) > 0 { blocks += 1 }
        print(info.sampleRate, samples.count, blocks)  // 48000.0 48000 12
        #expect(info.sampleRate == 48_000 && samples.count == 48_000 && blocks == 12)
        #expect(abs(samples.map(abs).max()! - 0.5) < 0.01)
    }
}
