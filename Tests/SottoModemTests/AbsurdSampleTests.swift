import Testing
@testable import SottoModem

@Suite struct AbsurdSampleTests {
    /// R11 of issue 11: one sample of 1e10 (a float file) 2000 samples before a frame must not hide it.
    /// Before the input limit, the FFT filter's round-off spread that sample over its whole block.
    @Test(arguments: [Float(1e10), -1e10, 1e30, .infinity, .nan])
    func oneAbsurdSampleDoesNotHideAFrame(spike: Float) throws {
        let token: [UInt8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        var samples = try recording(frames: [(token, 4_800)], profile: .standard, rate: 48_000, length: 33_734)
        samples[2_000] = spike
        let frames = try StreamingDecoder.decode(samples, sampleRate: 48_000, profiles: [.standard])
        #expect(frames.map(\.token) == [token], "spike \(spike)")
    }
}
