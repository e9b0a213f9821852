import Foundation
import Testing

@Suite struct DamagedInputTests {
    /// S4: one flipped byte in an Ogg page makes libogg drop the page. The frames after it keep their times
    /// (the granule positions place them; silence stands for the lost audio) and the loss is a warning naming
    /// the damaged bytes. A cut inside the stream is still an error.
    @Test(.timeLimit(.minutes(1))) func flippedByteInOggKeepsLaterTimesAndWarns() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let fixture = try DamagedOggFixture(in: dir)
        let reference = fixture.reference, damaged = fixture.damaged, bytes = fixture.damagedBytes
        let good = try Sotto.run(["decode", reference], timeout: 50)
        let bad = try Sotto.run(["decode", damaged], timeout: 50)
        #expect(good.status == 0 && bad.status == 0, "\(good.stderr) \(bad.stderr)")
        let goodTimes = decodedFrameTimes(good.stdout), badTimes = decodedFrameTimes(bad.stdout)
        #expect(goodTimes.count == 6)
        #expect(badTimes.count < goodTimes.count, "\(bad.stdout)")
        // Every frame found in the damaged file is found at its time in the intact one (within 2 ms).
        for time in badTimes {
            #expect(goodTimes.contains { abs($0 - time) < 0.002 }, "frame at \(time) s; intact: \(goodTimes)")
        }
        #expect(badTimes.last.map { t in goodTimes.last.map { abs($0 - t) < 0.002 } ?? false } == true, "\(badTimes) vs \(goodTimes)")
        #expect(bad.stderr.contains("warning") && bad.stderr.contains("damaged Ogg pages") && bad.stderr.contains("audio lost"), "\(bad.stderr)")
        // The same file cut inside its stream: an error, as before.
        try Data(bytes[0..<(bytes.count * 2 / 3)]).write(to: URL(fileURLWithPath: damaged))
        let cut = try Sotto.run(["decode", damaged], timeout: 50)
        #expect(cut.status == 2 && cut.stderr.contains("cut short"), "\(cut.status) \(cut.stderr)")
    }

    /// Found by FuzzCommandLine: an MP3 cut at two thirds decoded 2 of its 3 frames with exit 0 and no word. Its
    /// Xing/Info tag states the frame count (libsndfile's MP3s, LAME's): reading fewer is a cut file.
    @Test(.timeLimit(.minutes(1))) func cutTaggedMP3IsAnError() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let whole = dir.appendingPathComponent("whole.mp3").path, cut = dir.appendingPathComponent("cut.mp3").path
        #expect(try Sotto.run(["send", "0xc0ffee42", "--repeat", "3", "--interval", "1.2", "--jitter", "0", "--out", whole], timeout: 50).status == 0)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: whole))
        try bytes.prefix(bytes.count * 2 / 3).write(to: URL(fileURLWithPath: cut))
        let intact = try Sotto.run(["decode", whole], timeout: 50)
        #expect(intact.status == 0 && decodedFrameTimes(intact.stdout).count == 3, "\(intact.stderr)")
        let result = try Sotto.run(["decode", cut], timeout: 50)
        #expect(result.status == 2 && result.stderr.contains("cut short"), "\(result.status) \(result.stderr)")
        #expect(decodedFrameTimes(result.stdout).count == 2)
        // The same on a pipe (it exited 0): the tag is read from the stream's first bytes.
        let wholePiped = try Sotto.run(["decode", "-"], timeout: 50, input: bytes)
        #expect(wholePiped.status == 0 && decodedFrameTimes(wholePiped.stdout).count == 3, "\(wholePiped.stderr)")
        let piped = try Sotto.run(["decode", "-"], timeout: 50, input: bytes.prefix(bytes.count * 2 / 3))
        #expect(piped.status == 2 && piped.stderr.contains("cut short"), "\(piped.status) \(piped.stderr)")
        #expect(decodedFrameTimes(piped.stdout).count == 2)
    }

    /// Found by FuzzCommandLine: an AU (or WAV) cut short on standard input decoded 1 of its 3 frames with exit 0
    /// and no word. Their headers state the data's size: a stream that ends before it was cut.
    @Test(.timeLimit(.minutes(1)), arguments: ["au", "wav"]) func cutStreamWithStatedLengthIsAnError(format: String) throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let whole = dir.appendingPathComponent("whole.\(format)").path
        #expect(try Sotto.run(["send", "0xc0ffee42", "--repeat", "3", "--interval", "1.2", "--jitter", "0", "--out", whole], timeout: 50).status == 0)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: whole))
        let intact = try Sotto.run(["decode", "-"], timeout: 50, input: bytes)
        #expect(intact.status == 0 && decodedFrameTimes(intact.stdout).count == 3, "\(intact.stderr)")
        let cut = try Sotto.run(["decode", "-"], timeout: 50, input: bytes.prefix(50_000))
        #expect(cut.status == 2 && cut.stderr.contains("cut short"), "\(cut.status) \(cut.stderr)")
        #expect(decodedFrameTimes(cut.stdout).count == 1)
    }

    /// Found by FuzzCommandLine: a flipped byte in the first audio page of a short Ogg (the pages after the
    /// headers: two) lost 2 of 3 frames with exit 0 and no word. The damage is warned of, and the frame left is at
    /// its time (within 30 ms: decoding a stream's last page alone, libsndfile trims its end a little differently).
    @Test(.timeLimit(.minutes(1))) func damagedFirstAudioPageOfOggIsWarned() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let whole = dir.appendingPathComponent("whole.ogg").path, damaged = dir.appendingPathComponent("damaged.ogg").path
        #expect(try Sotto.run(["send", "0xc0ffee42", "--repeat", "3", "--interval", "1.2", "--jitter", "0", "--seed", "1", "--out", whole], timeout: 50).status == 0)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: whole)))
        let pages = (0..<(bytes.count - 4)).filter { bytes[$0..<($0 + 4)].elementsEqual("OggS".utf8) }
        try #require(pages.count >= 4)
        bytes[pages[2] + 27 + Int(bytes[pages[2] + 26]) + 40] ^= 0x10
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        let intact = decodedFrameTimes(try Sotto.run(["decode", whole], timeout: 50).stdout)
        let result = try Sotto.run(["decode", damaged], timeout: 50)
        #expect(result.status == 0 && result.stderr.contains("damaged Ogg pages"), "\(result.status) \(result.stderr)")
        let found = decodedFrameTimes(result.stdout)
        #expect(!found.isEmpty && found.count < intact.count)
        for time in found { #expect(intact.contains { abs($0 - time) < 0.03 }, "frame at \(time) s; intact: \(intact)") }
    }
}
