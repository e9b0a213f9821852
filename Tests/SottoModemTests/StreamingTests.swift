import PropertyBased
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
