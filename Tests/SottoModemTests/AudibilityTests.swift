import Foundation
import SottoDSP
import Testing
@testable import SottoModem

/// Power of `signal` in third-octave bands, from one FFT of the whole (zero-padded) burst: the burst
/// fades in and out on its own, so no analysis window is needed and the spectrum is exact.
func thirdOctaveLevels(_ signal: [Float], sampleRate: Double, below limit: Double) -> (bands: [(center: Double, dBc: Double)], total: Double) {
    let n = fastFFTSize(atLeast: 2 * signal.count)
    let fft = RealFFT(size: n)
    for i in 0..<n { fft.input[i] = i < signal.count ? signal[i] : 0 }
    fft.execute()
    var power = [Double](repeating: 0, count: n / 2 + 1)
    for k in power.indices {
        let re = Double(fft.output[2 * k]), im = Double(fft.output[2 * k + 1])
        power[k] = re * re + im * im
    }
    let total = power.reduce(0, +)
    var bands: [(Double, Double)] = []
    var center = 25.0
    while center * pow(2, 1.0 / 6) <= limit {
        let lo = Int((center * pow(2, -1.0 / 6) / sampleRate * Double(n)).rounded(.up))
        let hi = Int((center * pow(2, 1.0 / 6) / sampleRate * Double(n)).rounded(.down))
        let p = hi >= lo ? power[lo...hi].reduce(0, +) : 0
        bands.append((center, 10 * log10(max(p, 1e-300) / total)))
        center *= pow(2, 1.0 / 3)
    }
    return (bands.map { (center: $0.0, dBc: $0.1) }, total)
}

@Suite struct AudibilityTests {
    @Test(arguments: [Profile.standard, .fast, .robust], [44_100.0, 48_000.0])
    func nothingAudibleBelow16kHz(profile: Profile, rate: Double) throws {
        let burst = try Modulator(profile: profile, sampleRate: rate).modulate(Array("ABCDEFGH".utf8))
        let (bands, _) = thirdOctaveLevels(burst, sampleRate: rate, below: 16_000)
        let worst = bands.max { $0.dBc < $1.dBc }!
        #expect(worst.dBc < -80, "\(profile.name) at \(rate) Hz: \(Int(worst.center)) Hz band at \(worst.dBc) dBc")
    }

    @Test func phaseJumpsWouldFailTheSameMeasurement() throws {
        // The measurement can fail: naive FSK with independent oscillators (phase jumps at every
        // symbol) and no fades puts clicks into the audible bands.
        let profile = Profile.standard
        let rate = 48_000.0
        let symbols = try FrameFormat.symbols(payload: Array("ABCDEFGH".utf8), profile: profile)
        let perSymbol = Int(profile.symbolTime * rate)
        var x: [Float] = []
        for (k, s) in symbols.enumerated() {
            let f = profile.toneFrequency(symbolIndex: k, value: s)
            x += (0..<perSymbol).map { Float(0.5 * sin(2 * Double.pi * f * Double($0) / rate + Double(k))) }
        }
        let worst = thirdOctaveLevels(x, sampleRate: rate, below: 16_000).bands.map(\.dBc).max()!
        #expect(worst > -60)
    }

    @Test func defaultLevelAndConstantEnvelope() throws {
        let burst = try Modulator().modulate([1, 2, 3, 4, 5, 6, 7, 8])
        let peak = burst.map { abs($0) }.max()!
        #expect(20 * log10(Double(peak)) <= -6 + 0.01)
        #expect(20 * log10(Double(peak)) > -6.1)
        // Outside the fades the envelope is constant: every 10 ms window peaks at the same level.
        let fade = Int(Profile.standard.fadeDuration * 48_000)
        for start in stride(from: fade, to: burst.count - fade - 480, by: 480) {
            let local = burst[start..<(start + 480)].map { abs($0) }.max()!
            #expect(abs(local - peak) < 0.01 * peak)
        }
    }

    @Test func airtimeTargets() {
        #expect(Profile.standard.airtime(payloadBytes: 8) <= 0.6)
        #expect(Profile.fast.airtime(payloadBytes: 8) <= 0.3)
        #expect(Profile.robust.airtime(payloadBytes: 8) <= 1.2)
        // The generated burst is as long as the documented airtime.
        for profile in Profile.all {
            let burst = try? Modulator(profile: profile).modulate([UInt8](repeating: 0, count: 8))
            #expect(abs(Double(burst?.count ?? 0) / 48_000 - profile.airtime(payloadBytes: 8)) < 0.001)
        }
    }
}
