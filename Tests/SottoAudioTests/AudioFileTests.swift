import Foundation
import Testing
@testable import SottoAudio

func scratchPath(_ name: String) -> String {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-audio-tests-\(getpid())")
    try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory.appendingPathComponent(name).path
}

@Suite struct AudioFileTests {
    static let signal: [Float] = (0..<4_800).map { 0.6 * Float(sin(Double($0) * 0.37)) }

    /// Every lossless format with a header (raw has none; Vorbis and MP3 are lossy: tested below).
    @Test(arguments: AudioFileFormat.allCases.filter { !$0.isLossy && $0 != .raw16 })
    func roundTripsEveryFormat(format: AudioFileFormat) throws {
        let ext = format.rawValue.hasPrefix("flac") ? "flac" : format.rawValue.hasPrefix("aiff") ? "aiff" : format == .au16 ? "au" : "wav"
        let path = scratchPath("round-\(format.rawValue).\(ext)")
        try AudioFile.write(Self.signal, sampleRate: 44_100, to: path, format: format)
        let (samples, info) = try AudioFile.read(path: path)
        #expect(info.sampleRate == 44_100 && info.channels == 1 && info.frames == 4_800)
        #expect(samples.count == Self.signal.count)
        let tolerance: Float = format == .wavFloat ? 1e-7 : (format == .wav16 || format == .flac16 || format == .aiff16 || format == .au16) ? 1.0 / 32_000 : 1.0 / 8_000_000
        #expect(zip(samples, Self.signal).allSatisfy { abs($0 - $1) <= tolerance })
    }

    @Test func formatFollowsTheExtension() throws {
        #expect(try AudioFileFormat(path: "a/b.FLAC") == .flac16)
        #expect(try AudioFileFormat(path: "x.ogg") == .oggVorbis && AudioFileFormat(path: "x.mp3") == .mp3)
        #expect(try AudioFileFormat(path: "x.aif") == .aiff16 && AudioFileFormat(path: "x.raw") == .raw16)
        #expect(try AudioFileFormat(path: "-") == .wav16 && AudioFileFormat(path: "dir.d/noextension") == .wav16)
        #expect(throws: AudioFileError.self) { try AudioFileFormat(path: "x.xyz") }
    }

    @Test func rawAndLossyFormatsRoundTrip() throws {
        let raw = scratchPath("round.raw")
        try AudioFile.write(Self.signal, sampleRate: 48_000, to: raw, format: .raw16)
        #expect(try Data(contentsOf: URL(fileURLWithPath: raw)).count == 2 * Self.signal.count)
        let reader = try AudioFileReader(path: raw, raw: RawPCMFormat(sampleRate: 48_000, channels: 1, encoding: .s16))
        let samples = try reader.readAll()
        #expect(samples.count == Self.signal.count && zip(samples, Self.signal).allSatisfy { abs($0 - $1) <= 1.0 / 32_000 })
        for (format, ext) in [(AudioFileFormat.oggVorbis, "ogg"), (.mp3, "mp3")] {
            let path = scratchPath("round.\(ext)")
            try AudioFile.write(Self.signal, sampleRate: 48_000, to: path, format: format)
            let (decoded, info) = try AudioFile.read(path: path)
            #expect(info.sampleRate == 48_000 && decoded.count >= Self.signal.count / 2, "\(format)")
        }
    }

    @Test func clipsInsteadOfWrapping() throws {
        let path = scratchPath("clip.wav")
        try AudioFile.write([2, -2, 0.5], sampleRate: 48_000, to: path)
        let (samples, _) = try AudioFile.read(path: path)
        #expect(samples[0] > 0.99 && samples[1] < -0.99 && abs(samples[2] - 0.5) < 1e-4)
    }

    @Test func selectsOrMixesChannels() throws {
        // A stereo file written through libsndfile directly (the writer is mono): left = +0.5, right = -0.25.
        let path = scratchPath("stereo.wav")
        try writeStereo(path: path, left: 0.5, right: -0.25, frames: 1000)
        #expect(try AudioFile.read(path: path, channel: .channel(0)).samples.allSatisfy { abs($0 - 0.5) < 1e-4 })
        #expect(try AudioFile.read(path: path, channel: .channel(1)).samples.allSatisfy { abs($0 + 0.25) < 1e-4 })
        #expect(try AudioFile.read(path: path, channel: .mix).samples.allSatisfy { abs($0 - 0.125) < 1e-4 })
        #expect(throws: AudioFileError.invalidChannel(2, available: 2)) { try AudioFile.read(path: path, channel: .channel(2)) }
    }

    /// 16-bit PCM is read as integers and scaled by the reader itself: every one of the 65 536 values
    /// must come out as libsndfile's float conversion gives it (value / 32 768), in blocks of any size.
    @Test func sixteenBitSamplesAreScaledExactly() throws {
        let path = scratchPath("every-int16.raw")
        let values = (Int(Int16.min)...Int(Int16.max)).map { Int16($0) }
        try values.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: path)) }
        let reader = try AudioFileReader(path: path, raw: RawPCMFormat(sampleRate: 48_000, channels: 1, encoding: .s16))
        let collected = try readInBlocks(reader, of: 1_000)
        #expect(collected.count == values.count)
        #expect(zip(collected, values).allSatisfy { $0 == Float($1) / 32_768 })
        #expect(collected.first == -1 && collected.last == Float(32_767) / 32_768)
    }

    @Test func streamsInBlocks() throws {
        let path = scratchPath("blocks.wav")
        try AudioFile.write(Self.signal, sampleRate: 48_000, to: path)
        let reader = try AudioFileReader(path: path)
        let collected = try readInBlocks(reader, of: 333)
        #expect(collected.count == Self.signal.count && reader.framesRead == 4_800)
    }

    @Test func badFilesGetTypedErrors() throws {
        #expect(throws: AudioFileError.self) { try AudioFile.read(path: scratchPath("does-not-exist.wav")) }
        let text = scratchPath("text.wav")
        try Data("not audio".utf8).write(to: URL(fileURLWithPath: text))
        do { _ = try AudioFile.read(path: text); Issue.record("text accepted") } catch {
            guard case .cannotOpen = error else { Issue.record("unexpected \(error)"); return }
        }
        // A WAV header with no data.
        let good = scratchPath("good.wav")
        try AudioFile.write(Self.signal, sampleRate: 48_000, to: good)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: good))
        let headerOnly = scratchPath("header.wav")
        try bytes.prefix(44).write(to: URL(fileURLWithPath: headerOnly))
        #expect(throws: AudioFileError.self) { try AudioFile.read(path: headerOnly) }
        #expect(throws: AudioFileError.invalidSampleRate(0)) { try AudioFile.write([0], sampleRate: 0, to: scratchPath("zero.wav")) }
        #expect(throws: AudioFileError.self) { try AudioFile.write([0], sampleRate: 48_000, to: "/nonexistent-dir/x.wav") }
    }

    /// Random truncations, byte flips and garbage: every read ends (no hang), with samples or a typed error.
    @Test func fuzzedFilesNeverCrashOrHang() throws {
        let good = scratchPath("fuzz-source.wav")
        try AudioFile.write(Self.signal, sampleRate: 48_000, to: good, format: .wav24)
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: good)))
        var state: UInt64 = 0x5eed
        func next() -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int(truncatingIfNeeded: state >> 33)
        }
        let path = scratchPath("fuzz.wav")
        var opened = 0, rejected = 0
        for trial in 0..<600 {
            var bytes = original
            switch trial % 3 {
            case 0: bytes = Array(bytes.prefix(next() % bytes.count))
            case 1: for _ in 0..<(1 + next() % 8) { bytes[next() % 64] = UInt8(truncatingIfNeeded: next()) }
            default: bytes = (0..<(next() % 2000)).map { _ in UInt8(truncatingIfNeeded: next()) }
            }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            do {
                let reader = try AudioFileReader(path: path)
                var block = [Float](repeating: 0, count: 1024)
                var total = 0
                while true {
                    let n = try block.withUnsafeMutableBufferPointer { try reader.read(into: $0) }
                    if n == 0 { break }
                    #expect(block[0..<n].allSatisfy { $0.isFinite })
                    total += n
                    #expect(Int64(total) <= (reader.info.frames ?? 0) + 1024, "reads past the header's length")
                }
                opened += 1
            } catch {
                rejected += 1
            }
        }
        #expect(opened > 0 && rejected > 0)
    }
}

/// Everything `reader` holds, read `size` frames at a time.
func readInBlocks(_ reader: AudioFileReader, of size: Int) throws -> [Float] {
    var collected: [Float] = []
    var block = [Float](repeating: 0, count: size)
    while true {
        let n = try block.withUnsafeMutableBufferPointer { try reader.read(into: $0) }
        if n == 0 { return collected }
        collected += block[0..<n]
    }
}

/// Writes a 16-bit stereo WAV with constant channels through libsndfile's C API.
func writeStereo(path: String, left: Float, right: Float, frames: Int) throws {
    var samples: [Float] = []
    for _ in 0..<frames { samples += [left, right] }
    try writeInterleaved(samples, channels: 2, sampleRate: 48_000, path: path)
}
