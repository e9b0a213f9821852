import CFuzzerDriver
import Foundation
import SottoAudio

/// Scratch file of this process (in memory when /dev/shm exists): libsndfile reads from a path.
let scratchPath = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/sotto-fuzz-audio-\(getpid())"

/// Replaces the scratch file's contents with `size` bytes at `data` (plain write(2): no fsync).
func writeScratch(_ data: UnsafePointer<UInt8>, _ size: Int) -> Bool {
    let fd = open(scratchPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var written = 0
    while written < size {
        let n = write(fd, data + written, size - written)
        guard n > 0 else { return false }
        written += n
    }
    return true
}

/// One input: the bytes as a file, opened and read to its end (or to its first error) in blocks. Reads
/// stop after 4 M frames, so that an announced length can never make a run long.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAudioFile(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    guard writeScratch(data, size) else { return 0 }
    for channel in [ChannelSelection.mix, .channel(0)] {
        guard let reader = try? AudioFileReader(path: scratchPath, channel: channel) else { continue }
        precondition(AudioFileReader.supportedSampleRates.contains(reader.info.sampleRate), "rate \(reader.info.sampleRate) accepted")
        var block = [Float](repeating: 0, count: 4096)
        var total = 0
        while total < 1 << 22 {
            guard let n = try? block.withUnsafeMutableBufferPointer({ try reader.read(into: $0) }), n > 0 else { break }
            precondition(n <= block.count && block[0..<n].allSatisfy(\.isFinite), "bad block")
            total += n
        }
    }
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzAudioFile_main")
public func fuzzAudioFileMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzAudioFile(data, size) })
}
