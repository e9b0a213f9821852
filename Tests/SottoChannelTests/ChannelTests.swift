import Foundation
import SottoDSP
import Testing
@testable import SottoChannel

/// Frequency (Hz) and amplitude of the strongest component of `x`, by a windowed FFT with
/// parabolic interpolation.
func dominantTone(_ x: [Float], sampleRate: Double) -> (frequency: Double, amplitude: Double) {
    let n = fastFFTSize(atLeast: x.count)
    let fft = RealFFT(size: n)
    for i in 0..<n {
        let w = i < x.count ? 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(x.count)) : 0
        fft.input[i] = i < x.count ? Float(w) * x[i] : 0
    }
    fft.execute()
    let magnitude = (0...(n / 2)).map { k in hypot(Double(fft.output[2 * k]), Double(fft.output[2 * k + 1])) }
    let k = magnitude.indices.dropFirst().dropLast().max { magnitude[$0] < magnitude[$1] }!
    let (a, b, c) = (log(magnitude[k - 1]), log(magnitude[k]), log(magnitude[k + 1]))
    let offset = 0.5 * (a - c) / (a - 2 * b + c)
    return ((Double(k) + offset) * sampleRate / Double(n), magnitude[k] * 4 / Double(x.count))
}

func tone(_ f: Double, rate: Double, seconds: Double, amplitude: Float = 0.5) -> [Float] {
    (0..<Int(rate * seconds)).map { amplitude * Float(sin(2 * Double.pi * f * Double($0) / rate)) }
}

@Suite struct ChannelTests {
    @Test func seededRandomIsReproducibleAndNormal() {
        var a = SeededRandom(seed: 42), b = SeededRandom(seed: 42), c = SeededRandom(seed: 43)
        let xa = (0..<1000).map { _ in a.next() }, xb = (0..<1000).map { _ in b.next() }, xc = (0..<1000).map { _ in c.next() }
        #expect(xa == xb && xa != xc)
        var g = SeededRandom(seed: 7)
        let samples = (0..<200_000).map { _ in g.gaussian() }
        let mean = samples.reduce(0, +) / Double(samples.count)
        let variance = samples.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(samples.count)
        #expect(abs(mean) < 0.01 && abs(variance - 1) < 0.02)
    }

    @Test func fftConvolutionMatchesDirect() throws {
        var g = SeededRandom(seed: 1)
        let x = (0..<300).map { _ in Float(g.gaussian()) }, h = (0..<77).map { _ in Float(g.gaussian()) }
        let fast = try fftConvolve(x, h)
        #expect(fast.count == 376)
        for n in stride(from: 0, to: 376, by: 5) {
            var direct: Float = 0
            for k in 0..<77 where n - k >= 0 && n - k < 300 { direct += h[k] * x[n - k] }
            #expect(abs(fast[n] - direct) < 1e-3)
        }
    }

    @Test func resamplingKeepsA19kHzToneAndAddsNoImages() {
        let x = tone(19_000, rate: 48_000, seconds: 0.5)
        let y = Channel.resample(x, from: 48_000, to: 44_100)
        #expect(abs(y.count - 22_050) <= 1)
        let core = Array(y[2000..<(y.count - 2000)])
        let (f, a) = dominantTone(core, sampleRate: 44_100)
        #expect(abs(f - 19_000) < 1)
        #expect(abs(20 * log10(a / 0.5)) < 0.1, "amplitude \(a)")
    }

    @Test(arguments: [1000.0, -1000.0, 5000.0])
    func clockOffsetStretchesAndLowersTones(ppm: Double) {
        let x = tone(19_000, rate: 48_000, seconds: 0.5)
        let y = Channel.clockOffset(x, ppm: ppm)
        #expect(abs(Double(y.count) - Double(x.count) * (1 + ppm * 1e-6)) <= 1)
        let (f, _) = dominantTone(Array(y[1000..<(y.count - 1000)]), sampleRate: 48_000)
        let expected = 19_000 / (1 + ppm * 1e-6)
        #expect(abs(f - expected) < 0.5, "measured \(f), expected \(expected)")
    }

    @Test func whiteNoiseHasTheRequestedSNR() {
        var g = SeededRandom(seed: 5)
        var x = [Float](repeating: 0, count: 200_000)
        Channel.addWhiteNoise(&x, snrDB: -10, signalPower: 0.125, rng: &g)
        let measured = 10 * log10(0.125 / Channel.power(x))
        #expect(abs(measured + 10) < 0.1)
    }

    @Test func roomDecaysFasterAt19kHzAndHasTheRequestedRT60() throws {
        var g = SeededRandom(seed: 9)
        let room = Room(rt60: 0.5, distance: 3)
        #expect(room.rt60(at: 19_000) < 0.3 && room.rt60(at: 19_000) > 0.15)
        let h = try room.impulseResponse(sampleRate: 48_000, rng: &g)
        // Direct path at r / c.
        let direct = Int((3 / 343.0 * 48_000).rounded())
        #expect(h[direct] != 0)
        #expect(h[..<direct].allSatisfy { $0 == 0 })
        // Schroeder decay in a band: T20 extrapolated to 60 dB, within 20% of the model.
        func t60(band: ClosedRange<Double>) -> Double {
            var filtered = h
            let n = fastFFTSize(atLeast: h.count)
            let forward = RealFFT(size: n), inverse = InverseRealFFT(size: n)
            for i in 0..<n { forward.input[i] = i < h.count ? h[i] : 0 }
            forward.execute()
            for k in 0...(n / 2) {
                let keep: Float = band.contains(Double(k) * 48_000 / Double(n)) ? 1 : 0
                inverse.input[2 * k] = forward.output[2 * k] * keep
                inverse.input[2 * k + 1] = forward.output[2 * k + 1] * keep
            }
            inverse.execute()
            for i in filtered.indices { filtered[i] = inverse.output[i] / Float(n) }
            var energy = [Double](repeating: 0, count: filtered.count + 1)
            for i in stride(from: filtered.count - 1, through: 0, by: -1) { energy[i] = energy[i + 1] + Double(filtered[i] * filtered[i]) }
            let start = direct + 200
            let level = { (i: Int) in 10 * log10(energy[i] / energy[start]) }
            let i5 = (start..<filtered.count).first { level($0) < -5 }!
            let i25 = (start..<filtered.count).first { level($0) < -25 }!
            return 3 * Double(i25 - i5) / 48_000
        }
        let mid = t60(band: 700...1400), high = t60(band: 18_000...20_000)
        #expect(abs(mid - room.rt60(at: 1000)) < 0.2 * room.rt60(at: 1000), "mid \(mid)")
        #expect(abs(high - room.rt60(at: 19_000)) < 0.25 * room.rt60(at: 19_000), "high \(high)")
        #expect(high < mid)
    }

    @Test func rollOffAttenuatesAboveTheCorner() {
        // A 4th-order Butterworth response (two sections, 24 dB/octave) is -24.1 dB one octave above
        // the corner and flat well below it (little bilinear warping at 8 kHz of 48 kHz).
        func gain(_ f: Double) -> Double {
            let x = tone(f, rate: 48_000, seconds: 0.3)
            var y = x
            Channel.rollOff(&y, sampleRate: 48_000, cornerHz: 4_000, slopeDBPerOctave: 24)
            // Same window and frequency for both: the FFT's scalloping loss cancels.
            return 20 * log10(dominantTone(Array(y[2000...]), sampleRate: 48_000).amplitude
                / dominantTone(Array(x[2000...]), sampleRate: 48_000).amplitude)
        }
        let octaveAbove = gain(8_000), below = gain(1_000)
        #expect(octaveAbove < -22 && octaveAbove > -28, "\(octaveAbove) dB")
        #expect(abs(below) < 0.2, "\(below) dB")
    }

    /// The roll-off's stated loss is the loss a tone meets, its slope is as asked, and the corner found for a loss
    /// gives it (what the roll-off sweep's columns rely on).
    @Test func rollOffLossIsWhatItSaysAndTheCornerForALossGivesIt() {
        func measured(_ f: Double, _ filter: RollOffFilter) -> Double {
            let x = tone(f, rate: 48_000, seconds: 0.3)
            var y = x, copy = filter
            copy.process(&y)
            return -20 * log10(dominantTone(Array(y[2000...]), sampleRate: 48_000).amplitude
                / dominantTone(Array(x[2000...]), sampleRate: 48_000).amplitude)
        }
        let steep = RollOffFilter(cornerHz: 4_000, slopeDBPerOctave: 48, sampleRate: 48_000)
        let gentle = RollOffFilter(cornerHz: 4_000, slopeDBPerOctave: 24, sampleRate: 48_000)
        #expect(steep.slopeDBPerOctave == 48 && gentle.slopeDBPerOctave == 24)
        for f in [2_000.0, 6_000, 8_000, 12_000] {
            #expect(abs(measured(f, steep) - steep.attenuationDB(at: f)) < 0.5, "\(f) Hz")
        }
        // Twice the sections: twice the loss, at every frequency.
        #expect(abs(steep.attenuationDB(at: 8_000) - 2 * gentle.attenuationDB(at: 8_000)) < 0.01)
        #expect(steep.attenuationDB(at: 8_000) > 45)
        for loss in [5.0, 20, 35] {
            let corner = RollOffFilter.corner(forLossDB: loss, at: 19_000, sampleRate: 48_000)!
            let filter = RollOffFilter(cornerHz: corner, sampleRate: 48_000)
            #expect(abs(filter.attenuationDB(at: 19_000) - loss) < 0.01, "\(loss) dB: corner \(corner) Hz")
            #expect(abs(measured(19_000, filter) - loss) < 0.5)
        }
        #expect(RollOffFilter.corner(forLossDB: 0, at: 19_000, sampleRate: 48_000) == nil)
        // Filtered in blocks, the same as filtered whole.
        let x = tone(18_000, rate: 48_000, seconds: 0.1)
        var whole = x, blocks: [Float] = [], blockFilter = steep, wholeFilter = steep
        wholeFilter.process(&whole)
        for start in stride(from: 0, to: x.count, by: 1000) {
            var block = Array(x[start..<min(x.count, start + 1000)])
            blockFilter.process(&block)
            blocks += block
        }
        #expect(blocks == whole)
    }

    @Test func clippingAndQuantisationStayInRange() {
        var g = SeededRandom(seed: 3)
        var x = (0..<10_000).map { _ in Float(3 * g.gaussian()) }
        Channel.clip(&x, level: 0.5)
        #expect(x.allSatisfy { abs($0) <= 0.5 })
        Channel.quantize16(&x, rng: &g)
        #expect(x.allSatisfy { ($0 * 32768).rounded() == $0 * 32768 })
    }

    @Test func channelModelIsReproducible() throws {
        var model = ChannelModel(seed: 11)
        model.rt60 = 0.4
        model.distance = 2
        model.snrDB = 10
        model.ppm = 200
        model.outputRate = 44_100
        model.quantize16 = true
        let x = tone(19_000, rate: 48_000, seconds: 0.2)
        let a = try model.apply(x, sampleRate: 48_000), b = try model.apply(x, sampleRate: 48_000)
        #expect(a.samples == b.samples && a.sampleRate == 44_100)
        model.seed = 12
        #expect(try model.apply(x, sampleRate: 48_000).samples != a.samples)
    }
}

@Suite struct RoomResponseEndTests {
    /// The synthetic response fades to zero at its end: an abrupt end is an edge that the convolution turns
    /// into a copy of the input delayed by the response's length (the simulator's ghost frame, issue 11).
    @Test(arguments: [(2.0, 1.0), (3.0, 10.0), (0.5, 3.0)])
    func responseEndsSmoothly(rt60: Double, distance: Double) throws {
        var rng = SeededRandom(seed: 1)
        let h = try Room(rt60: rt60, distance: distance).impulseResponse(sampleRate: 48_000, rng: &rng)
        func rms(_ s: ArraySlice<Float>) -> Double { (s.reduce(0) { $0 + Double($1) * Double($1) } / Double(s.count)).squareRoot() }
        let beforeEnd = rms(h[(h.count * 8 / 10)..<(h.count * 8 / 10 + 480)])
        let end = rms(h[(h.count - 10)...])
        #expect(end < 0.01 * beforeEnd, "last samples at \(end), 80% into the response at \(beforeEnd)")
    }
}
