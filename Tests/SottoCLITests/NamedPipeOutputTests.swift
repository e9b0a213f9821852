import Foundation
import Testing

/// Audio written to a named pipe (a FIFO made with mkfifo), as `--out` promises for every command that writes audio.
@Suite struct NamedPipeOutputTests {
    /// A WAV written to a named pipe is streamed as to standard output (its header first, then the samples as they
    /// come): libsndfile alone refused it, since it finishes a WAV's header by seeking back ("this file format does
    /// not support pipe write"), and `send`, `publish` and `beacon` failed with that.
    @Test(.timeLimit(.minutes(2))) func aWAVWrittenToANamedPipeIsDecodedFromIt() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let fifo = dir.appendingPathComponent("live.wav").path
        try #require(mkfifo(fifo, 0o600) == 0)
        let decode = try BackgroundSotto(["decode", "--format", "hex", fifo])
        defer { if decode.process.isRunning { decode.process.terminate() } }
        let send = try Sotto.run(["send", "0x5eed0f1f", "--repeat", "2", "--interval", "1", "--jitter", "0", "--out", fifo], timeout: 50)
        #expect(send.status == 0, "\(send.stderr)")
        let deadline = Date(timeIntervalSinceNow: 40)
        while decode.process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        try #require(!decode.process.isRunning, "decode did not end after the writer")
        #expect(decode.process.terminationStatus == 0, "\(decode.standardError)")
        #expect(decode.output == ["5eed0f1f", "5eed0f1f"], "\(decode.output) \(decode.standardError)")
    }
}
