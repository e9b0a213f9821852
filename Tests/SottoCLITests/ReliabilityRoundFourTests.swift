import Foundation
import Testing

/// Issue 30, round four: Ogg on a pipe decoded as it arrives, an MP3 cut short on a pipe (DamagedInputTests), and
/// transforms that cannot be made (FFTW's buffers failed by the test fault shim, as when memory runs out).
@Suite struct ReliabilityRoundFourTests {
    /// The fault shim (Tests/AllocFaultShim), built next to the `sotto` executable: under LD_PRELOAD, FFTW's buffer
    /// allocations of the sizes in SOTTO_FAULT_MEMALIGN fail.
    static let allocationFault = Sotto.executable.deletingLastPathComponent().appendingPathComponent("libsotto_allocfault.so")

    static func failing(_ sizes: String) -> [String: String] {
        ["LD_PRELOAD": allocationFault.path, "SOTTO_FAULT_MEMALIGN": sizes]
    }

    /// Ogg on a pipe was copied to a temporary file and decoded at the end of the stream: a live pipe
    /// (`arecord ... | oggenc - | sotto decode -`) printed nothing until its writer ended. Now the first frame is
    /// printed while the writer still holds the rest of the stream open; the whole stream then decodes whole.
    @Test(.timeLimit(.minutes(2)), arguments: [false, true]) func oggOnAPipeIsDecodedAsItArrives(standardInput: Bool) async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ogg = dir.appendingPathComponent("three.ogg").path, fifo = dir.appendingPathComponent("live").path
        #expect(try Sotto.run(["send", "0xc0ffee42", "--repeat", "3", "--interval", "1.2", "--jitter", "0", "--out", ogg], timeout: 50).status == 0)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: ogg)))
        // The pages (offset, end, granule position): the writer stops after the first page past 1 s of audio (the
        // first frame ends at 0.46 s), which is not the last page.
        var pages: [(end: Int, granule: Int64)] = []
        var offset = 0
        while offset + 27 <= bytes.count, bytes[offset..<(offset + 4)].elementsEqual("OggS".utf8) {
            let segments = Int(bytes[offset + 26])
            let end = offset + 27 + segments + bytes[(offset + 27)..<(offset + 27 + segments)].reduce(0) { $0 + Int($1) }
            pages.append((end, (0..<8).reduce(Int64(0)) { $0 | Int64(bytes[offset + 6 + $1]) << (8 * $1) }))
            offset = end
        }
        let stop = try #require(pages.dropLast().first { $0.granule >= 48_000 }?.end, "\(pages)")
        try #require(mkfifo(fifo, 0o600) == 0)
        let decode = standardInput
            ? try BackgroundSotto(["-c", "exec \"$0\" decode --format hex - < \"$1\"", Sotto.executable.path, fifo], launcher: "/bin/sh")
            : try BackgroundSotto(["decode", "--format", "hex", fifo])
        // The writer, on a thread of its own: the pages up to `stop`, then the rest only once the test has seen the
        // first frame (or given up on it).
        let gate = WriterGate()
        let first = stop
        Thread.detachNewThread {
            defer { gate.finish() }
            var descriptor: Int32 = -1
            for _ in 0..<3_000 where descriptor < 0 {  // up to 60 s for the reader to open the FIFO
                descriptor = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                if descriptor < 0 { usleep(20_000) }
            }
            guard descriptor >= 0 else { return }
            defer { close(descriptor) }
            _ = fcntl(descriptor, F_SETFL, 0)
            func send(_ range: Range<Int>) {
                var offset = range.lowerBound
                while offset < range.upperBound {
                    let n = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + offset, range.upperBound - offset) }
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { return }
                    offset += n
                }
            }
            send(0..<first)
            for _ in 0..<3_000 where !gate.released { usleep(20_000) }
            send(first..<bytes.count)
        }
        let line = await decode.line(timeout: 40) { $0 == "c0ffee42" }
        let writerWasOpen = !gate.finished
        gate.release()
        #expect(line != nil, "no frame printed while the writer held the stream open: \(decode.standardError)")
        #expect(writerWasOpen)
        let deadline = Date(timeIntervalSinceNow: 40)
        while decode.process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        try #require(!decode.process.isRunning, "decode did not end after the writer")
        #expect(decode.process.terminationStatus == 0, "\(decode.standardError)")
        #expect(decode.output == ["c0ffee42", "c0ffee42", "c0ffee42"], "\(decode.output) \(decode.standardError)")
        #expect(!decode.standardError.contains("warning"), "\(decode.standardError)")
    }

    /// A receiver whose transforms cannot be made (its FFT buffers: out of memory) is said to be that, with exit
    /// 2: in `listen` it was reported as the capture device failing; the band check's own transform (the
    /// 4 096-point one of `BandMonitor`, 16 392 bytes of output) trapped. `decode` says the same.
    @Test(.timeLimit(.minutes(1))) func transformsThatCannotBeMadeAreNoDeviceFailure() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        try FilePluginRig.raw([Float](repeating: 0, count: 48_000)).write(to: rig.input)
        for (sizes, what) in [("16384", "the decoder's transforms"), ("16392", "the band check's transform")] {
            let listen = try Sotto.run(["listen", "--device", "sotto_capture", "--duration", "0.5"],
                                       environment: rig.environment.merging(Self.failing(sizes)) { $1 }, timeout: 30)
            #expect(listen.status == 2, "\(what): \(listen.status) \(listen.stderr)")
            #expect(listen.stderr.contains("cannot prepare the receiver") && listen.stderr.contains("FFT")
                    && listen.stderr.contains("not at fault"), "\(what): \(listen.stderr)")
            #expect(!listen.stderr.contains("failed while") && !listen.stderr.contains("Fatal error"), "\(what): \(listen.stderr)")
        }
        // Without the fault the same command runs.
        let intact = try Sotto.run(["listen", "--device", "sotto_capture", "--duration", "0.5"], environment: rig.environment, timeout: 30)
        #expect(intact.status == 0, "\(intact.stderr)")
        let wav = rig.directory.appendingPathComponent("one.wav").path
        #expect(try Sotto.run(["send", "0x01", "--out", wav]).status == 0)
        let decode = try Sotto.run(["decode", wav], environment: Self.failing("16384"), timeout: 30)
        #expect(decode.status == 2 && decode.stderr.contains("cannot prepare the receiver"), "\(decode.status) \(decode.stderr)")
    }

    /// The tools' transforms (a room's response and its convolution, in `bench sweep reverb`) trapped when FFTW
    /// could not allocate them; now the reason reaches the user with exit 2.
    @Test(.timeLimit(.minutes(2))) func toolTransformsThatCannotBeMadeAreErrors() throws {
        let sweep = try Sotto.run(["bench", "sweep", "reverb", "--trials", "1", "--lengths", "4", "--profiles", "default"],
                                  environment: Self.failing("100000+"), timeout: 90)
        #expect(sweep.status == 2, "\(sweep.status) \(sweep.stderr)")
        #expect(sweep.stderr.contains("cannot allocate the buffers of a") && sweep.stderr.contains("FFT (out of memory)")
                && !sweep.stderr.contains("Fatal error"), "\(sweep.stderr)")
    }
}

/// The test's hold on its slow writer thread.
final class WriterGate: @unchecked Sendable {
    private let lock = NSLock()
    private var isReleased = false, isFinished = false
    var released: Bool { lock.withLock { isReleased } }
    var finished: Bool { lock.withLock { isFinished } }
    func release() { lock.withLock { isReleased = true } }
    func finish() { lock.withLock { isFinished = true } }
}
