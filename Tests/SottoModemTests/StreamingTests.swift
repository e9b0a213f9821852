import PropertyBased
import SottoDSP
import SottoChannel
import Testing
@testable import SottoModem

@Suite struct StreamingTests {
    /// A recording with three frames in noise, decoded in one go.
    static let rate = 44_100.0
    static let tokens: [[UInt8]] = [[1, 2, 3, 4, 5, 6, 7, 8], [0xFF], Array(0..<16)]
    static let signal: [Float] = {
        try! recording(frames: [(tokens[0], 3000), (tokens[1], 40_000), (tokens[2], 70_000)],
                       profile: .standard, rate: rate, length: 130_000, snr: 0, seed: 5)
    }()

    @Test func wholeBufferFindsAllFrames() throws {
        let frames = try StreamingDecoder.decode(Self.signal, sampleRate: Self.rate)
        #expect(frames.map(\.token) == Self.tokens)
    }

    /// Each decoder runs with the tuning it was given: a detection threshold no preamble reaches leaves these
    /// frames undetected in that decoder alone, and `ReceiverTuning()` is the standard tuning.
    @Test func aDecoderRunsWithItsOwnTuning() throws {
        var deaf = ReceiverTuning.standard
        deaf.singleChirpThreshold = .infinity
        let tuned = try StreamingDecoder(sampleRate: Self.rate, tuning: deaf)
        let standard = try StreamingDecoder(sampleRate: Self.rate)
        let heard = Self.signal.withUnsafeBufferPointer { (tuned.process($0) + tuned.finish(), standard.process($0) + standard.finish()) }
        #expect(heard.0.isEmpty && tuned.detections["default"] == 0, "\(heard.0.map(\.token))")
        #expect(heard.1.map(\.token) == Self.tokens)
        #expect(ReceiverTuning() == .standard)
    }

    /// A frame at the very first sample of a stream (and one ending at its last): times within the stream,
    /// never before it (the start estimate's error of a fraction of a baseband sample was reported as
    /// -0.00007 s).
    @Test(arguments: Profile.all)
    func aFrameAtTheFirstSampleStartsWithinTheStream(profile: Profile) throws {
        let signal = try Modulator(profile: profile).modulate([0xAB, 0xCD, 0xEF, 0x01])
        let frames = try StreamingDecoder.decode(signal, sampleRate: 48_000, profiles: [profile])
        let frame = try #require(frames.first)
        #expect(frames.count == 1 && frame.token == [0xAB, 0xCD, 0xEF, 0x01])
        #expect(frame.startTime >= 0 && frame.startTime < 0.001, "start \(frame.startTime) s")
        #expect(abs(frame.endTime - Double(signal.count) / 48_000) < 0.001, "end \(frame.endTime) s")
    }

    @Test func resultsDoNotDependOnChunking() async throws {
        let reference = try StreamingDecoder.decode(Self.signal, sampleRate: Self.rate)
        await propertyCheck(count: 12, input: Gen.int(in: 1...20_000).array(of: 1...40)) { sizes in
            let decoder = try! StreamingDecoder(sampleRate: Self.rate)
            var frames: [DecodedFrame] = []
            var offset = 0, i = 0
            Self.signal.withUnsafeBufferPointer { all in
                while offset < all.count {
                    let n = min(sizes[i % sizes.count], all.count - offset)
                    frames += decoder.process(UnsafeBufferPointer(rebasing: all[offset..<(offset + n)]))
                    offset += n
                    i += 1
                }
            }
            frames += decoder.finish()
            #expect(frames == reference)
        }
    }

    @Test func resultsDoNotDependOnWhereTheStreamStarts() throws {
        let reference = try StreamingDecoder.decode(Self.signal, sampleRate: Self.rate)
        for cut in [1, 17, 999, 2_500] {
            let frames = try StreamingDecoder.decode(Array(Self.signal[cut...]), sampleRate: Self.rate)
            #expect(frames.map(\.token) == reference.map(\.token))
            for (a, b) in zip(frames, reference) {
                #expect(abs((a.startTime + Double(cut) / Self.rate) - b.startTime) < 0.0005)
            }
        }
    }

    @Test(arguments: [-5000.0, -2000.0, 0, 1000.0, 5000.0])
    func clockOffsetIsEstimatedAndCorrected(ppm: Double) throws {
        // Synthesised at a rate (1 + ppm) faster and read at the nominal rate: the frame arrives
        // stretched by (1 + ppm) with every tone lowered by the same factor.
        let rate = 48_000.0
        let token: [UInt8] = [9, 8, 7, 6, 5, 4, 3, 2]
        let burst = try Modulator(sampleRate: rate * (1 + ppm * 1e-6)).modulate(token)
        var x = [Float](repeating: 0, count: 6000) + burst + [Float](repeating: 0, count: 6000)
        var noise = SeededRandom(seed: 77)
        for i in x.indices { x[i] += 0.02 * noise.sample() }
        let frames = try StreamingDecoder.decode(x, sampleRate: rate)
        #expect(frames.map(\.token) == [token])
        if let frame = frames.first {
            #expect(abs(frame.clockOffsetPPM - ppm) < 150, "estimated \(frame.clockOffsetPPM) for \(ppm)")
        }
    }
}

/// A frame's decision must not depend on where the blocks of input fall: near the threshold, where any
/// change in how a frame is measured flips some decisions, silence prepended to the stream must leave
/// the decoded frames as they were.
@Suite struct BlockPhaseTests {
    static let rate = 48_000.0
    /// Six frames of 8 bytes back to back in white noise near the threshold (-16.8 dB full band: 3 of the 6
    /// decode), after 0.3 s of noise (the first frame's SNR is measured against the noise before it).
    static let recording: (samples: [Float], tokens: [[UInt8]]) = {
        let modulator = try! Modulator(sampleRate: rate)
        var random = SeededRandom(seed: 11)
        var x = [Float](repeating: 0, count: 14_400)
        var tokens: [[UInt8]] = []
        for _ in 0..<6 {
            let token = random.bytes(8)
            tokens.append(token)
            x += try! modulator.modulate(token) + [Float](repeating: 0, count: 2_400)
        }
        let sigma = Float((Double(modulator.amplitude * modulator.amplitude) / 2 / pow10Test(-1.68)).squareRoot())
        var noise = SeededRandom(seed: 12)
        for i in x.indices { x[i] += sigma * noise.sample() }
        return (x, tokens)
    }()

    static func decode(prefix: Int, chunks: [Int]) -> [DecodedFrame] {
        let decoder = try! StreamingDecoder(sampleRate: rate)
        let x = [Float](repeating: 0, count: prefix) + recording.samples
        var frames: [DecodedFrame] = []
        var offset = 0, i = 0
        x.withUnsafeBufferPointer { all in
            while offset < all.count {
                let n = min(chunks[i % chunks.count], all.count - offset)
                frames += decoder.process(UnsafeBufferPointer(rebasing: all[offset..<(offset + n)]))
                offset += n
                i += 1
            }
        }
        return (frames + decoder.finish()).map {
            var frame = $0
            frame.startTime -= Double(prefix) / rate
            frame.endTime -= Double(prefix) / rate
            return frame
        }
    }

    /// Prefixes of a whole number of baseband samples (multiples of 64 input samples at 48 kHz, 5 samples
    /// of the 3 750 Hz baseband) move every block boundary against the frames; with any chunking on top, the frames found, their
    /// times, SNR, level and offset are the same. (Decode attempts and detections are taken at stream
    /// positions fixed by the signal, not when a block happens to complete.)
    @Test func decisionsDoNotDependOnWhereTheBlocksFall() async {
        let reference = Self.decode(prefix: 0, chunks: [1 << 20])
        #expect(reference.count >= 2 && reference.count <= 4, "near the threshold: \(reference.count) of 6 decoded")
        let decimator = FrameReceiver(profile: .standard, sampleRate: Self.rate).decimator
        // The fewest input samples that are a whole number of baseband samples.
        func gcd(_ a: Int, _ b: Int) -> Int { b == 0 ? a : gcd(b, a % b) }
        let period = decimator.blockSize / gcd(decimator.blockSize, decimator.outputBlockSize)
        #expect(period == 64)
        await propertyCheck(count: 5, input: Gen.int(in: 1...3_000), Gen.int(in: 1...20_000).array(of: 1...8)) { blocks, sizes in
            let frames = Self.decode(prefix: blocks * period, chunks: sizes)
            #expect(frames.map(\.token) == reference.map(\.token))
            for (a, b) in zip(frames, reference) {
                // The same samples in blocks cut elsewhere: FFT round-off (1e-7) only, which can move a
                // value rounded for the report by one step.
                #expect(abs(a.startTime - b.startTime) < 1e-6 && abs(a.snr - b.snr) <= 0.1
                        && abs(a.clockOffsetPPM - b.clockOffsetPPM) <= 1, "\(a) against \(b)")
            }
        }
    }

    /// Any prefix also moves the baseband's sample grid by a fraction of a sample: the frames decoded
    /// then are measured on other samples of the same band-limited signal. Their start times agree to a
    /// fraction of a sample, and the number decoded stays within one of the reference (before, windows
    /// cut at whole samples lost 1-2 of 40 frames at some grid phases).
    @Test func anyPrefixMovesStartTimesByLessThanASample() async {
        let reference = Self.decode(prefix: 0, chunks: [1 << 20])
        await propertyCheck(count: 5, input: Gen.int(in: 1...200_000)) { prefix in
            let frames = Self.decode(prefix: prefix, chunks: [4_096])
            #expect(abs(frames.count - reference.count) <= 1, "prefix \(prefix): \(frames.count) against \(reference.count)")
            for frame in frames {
                if let match = reference.first(where: { $0.token == frame.token }) {
                    #expect(abs(frame.startTime - match.startTime) < 0.1e-3, "prefix \(prefix)")
                }
            }
        }
    }
}
