import Foundation
import SottoChannel
import SottoCodes
import SottoDSP
import SottoModem
import Testing

/// The worked examples of the SottoModem, SottoCodes, SottoChannel and SottoDSP catalogs, compiled and run here;
/// `DocCExampleTests` (SottoCLITests) checks that each catalog shows its example exactly as written here.
struct DocCExamples {
    /// SottoModem.md: a token to a burst, and back out of a stream.
    @Test func modem() throws {
        let token: [UInt8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        // One burst at 48 kHz, -6 dBFS peak, with 0.1 s of silence on each side.
        let modulator = try Modulator(profile: .standard, sampleRate: 48_000)
        let silence = [Float](repeating: 0, count: 4_800)
        let stream = silence + (try modulator.modulate(token)) + silence
        // A decoder of every profile; feed it blocks of any size as they come, then finish.
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: Profile.all)
        var frames = decoder.process(Array(stream[..<10_000]))
        frames += decoder.process(Array(stream[10_000...]))
        frames += decoder.finish()
        for frame in frames {
            print(frame.token, frame.profile, frame.startTime, frame.snr)  // start in s, SNR in dB
        }
        #expect(frames.map(\.token) == [token] && frames.first?.profile == "default")
    }

    /// SottoCodes.md: the K = 7 convolutional code and the frame's CRC, encoded and decoded.
    @Test func codes() {
        let message: [UInt8] = [0x68, 0x69]
        let crc = CRC16.checksum(message, initial: 0xFFFF)
        let bits = Bits.unpack(message + [UInt8(crc >> 8), UInt8(crc & 0xFF)])
        let coded = ConvolutionalCode.k7r12.encode(bits)  // rate 1/2, zero-terminated: 2 x (32 + 6) bits
        // Soft decisions: a log-likelihood ratio per coded bit, positive for 0; two of them wrong.
        var llrs = coded.map { $0 == 0 ? Float(4) : Float(-4) }
        llrs[5] = -llrs[5]
        llrs[40] = -llrs[40]
        let decoded = Bits.pack(ConvolutionalCode.k7r12.decode(llrs: llrs, messageBits: bits.count))
        let intact = CRC16.checksum(decoded.prefix(2), initial: 0xFFFF) == UInt16(decoded[2]) << 8 | UInt16(decoded[3])
        #expect(Array(decoded.prefix(2)) == message && intact)
    }

    /// SottoChannel.md: a burst through a synthetic room and white noise, seeded.
    @Test func channel() throws {
        let burst = try Modulator().modulate([0x0a, 0x0b])
        var rng = SeededRandom(seed: 7)
        let response = try Room(rt60: 0.5, distance: 3).impulseResponse(sampleRate: 48_000, rng: &rng)
        var heard = try fftConvolve(burst, response)
        Channel.addWhiteNoise(&heard, snrDB: 20, signalPower: Channel.power(burst), rng: &rng)
        let decoder = try StreamingDecoder(sampleRate: 48_000)
        let frames = decoder.process(heard + [Float](repeating: 0, count: 24_000)) + decoder.finish()
        #expect(frames.map(\.token) == [[0x0a, 0x0b]])
    }

    /// SottoDSP.md: a real transform of a 1 kHz tone; its peak is in bin 1000 / (48000 / 4096).
    @Test func dsp() {
        let fft = RealFFT(size: 4_096)
        for n in 0..<fft.size { fft.input[n] = Float(sin(2 * Double.pi * 1_000 * Double(n) / 48_000)) }
        fft.execute()
        // Interleaved complex bins 0...size/2: re, im, re, im, ...
        let magnitudes = (0...fft.size / 2).map { (k: Int) -> Float in
            let re = fft.output[2 * k], im = fft.output[2 * k + 1]
            return (re * re + im * im).squareRoot()
        }
        let peak = magnitudes.indices.max { magnitudes[$0] < magnitudes[$1] }!
        #expect(peak == 85)  // 1000 Hz / 11.72 Hz a bin
    }
}
