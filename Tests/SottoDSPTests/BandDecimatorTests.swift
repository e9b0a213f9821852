import RealModule
import Testing
@testable import SottoDSP

@Suite struct BandDecimatorTests {
    /// Runs `input` through a decimator in chunks of the given sizes (cycled).
    static func run(_ decimator: BandDecimator, _ input: [Float], chunks: [Int]) -> (re: [Float], im: [Float]) {
        var re: [Float] = [], im: [Float] = []
        var offset = 0, c = 0
        input.withUnsafeBufferPointer { all in
            while offset < all.count {
                let n = min(chunks[c % chunks.count], all.count - offset)
                decimator.process(UnsafeBufferPointer(rebasing: all[offset..<(offset + n)])) { r, i in
                    re += r; im += i
                }
                offset += n; c += 1
            }
        }
        return (re, im)
    }

    @Test(arguments: [44_100.0, 48_000.0, 96_000.0])
    func toneAppearsAtItsOffsetWithUnitAmplitude(rate: Double) {
        let decimator = BandDecimator(sampleRate: rate, centerFrequency: 19_000, passbandHalfWidth: 1_100, minimumOutputRate: 4_400)
        let f = 19_400.0
        let input = (0..<Int(rate)).map { Float(Double.cos(2 * Double.pi * f * Double($0) / rate)) }
        let out = Self.run(decimator, input, chunks: [1000])
        #expect(out.re.count > 3000)
        // Skip the start, check amplitude and instantaneous frequency in the middle.
        let fd = decimator.outputRate
        let expected = f - decimator.centerFrequency
        for j in stride(from: 500, to: out.re.count - 500, by: 97) {
            let amplitude = (out.re[j] * out.re[j] + out.im[j] * out.im[j]).squareRoot()
            #expect(abs(amplitude - 1) < 0.01, "amplitude \(amplitude) at \(j)")
            // Phase must match the analytic signal at input time j / outputRate.
            let t = Double(j) / decimator.outputRate
            let phase = 2 * Double.pi * (f * t - decimator.centerFrequency * t)
            let dr = Double(out.re[j]) - Double.cos(phase), di = Double(out.im[j]) - Double.sin(phase)
            #expect((dr * dr + di * di).squareRoot() < 0.02, "phase error at \(j)")
        }
        _ = (fd, expected)
    }

    @Test func outOfBandToneIsRejected() {
        let rate = 48_000.0
        let decimator = BandDecimator(sampleRate: rate, centerFrequency: 19_000, passbandHalfWidth: 1_100, minimumOutputRate: 4_400)
        // 15 kHz would alias near the band if the filter did not remove it.
        let input = (0..<48_000).map { Float(Double.cos(2 * Double.pi * 15_000 * Double($0) / rate)) }
        let out = Self.run(decimator, input, chunks: [4096])
        let peak = out.re.indices.dropFirst(200).map { out.re[$0] * out.re[$0] + out.im[$0] * out.im[$0] }.max() ?? 1
        #expect(10 * Float.log10(peak) < -70)
    }

    @Test func outputDoesNotDependOnChunking() {
        let rate = 44_100.0
        var state: UInt64 = 12345
        let input = (0..<30_000).map { _ -> Float in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Float(Int64(bitPattern: state >> 11) % 1000) / 1000
        }
        let a = Self.run(BandDecimator(sampleRate: rate, centerFrequency: 19_000, passbandHalfWidth: 1_000, minimumOutputRate: 4_000), input, chunks: [30_000])
        let b = Self.run(BandDecimator(sampleRate: rate, centerFrequency: 19_000, passbandHalfWidth: 1_000, minimumOutputRate: 4_000), input, chunks: [1, 7, 333, 4096, 2])
        #expect(a.re == b.re && a.im == b.im)
    }
}

/// Several bands from one FFT per block: each band must be what a decimator of its own would give.
@Suite struct BandDecimatorBankTests {
    static let rate = 48_000.0
    /// The decoder's three bands at 48 kHz (the 18-20 kHz profiles, the fast one, the audible one):
    /// output blocks of 320, 432 and 320 samples per 4 096 input samples, so the shared blocks must fit
    /// both ratios (12.8 and 9.48 input samples per output sample).
    static let bands = [
        BandSpecification(centerFrequency: 19_000, passbandHalfWidth: 1_109, minimumOutputRate: 3_618),
        BandSpecification(centerFrequency: 19_000, passbandHalfWidth: 1_709, minimumOutputRate: 4_818),
        BandSpecification(centerFrequency: 3_000, passbandHalfWidth: 1_082, minimumOutputRate: 3_564),
    ]
    /// Two tones: 19.4 kHz (amplitude 1) in the first two bands, 3.3 kHz (amplitude 0.5) in the third.
    static let tones: [(frequency: Double, amplitude: Double)] = [(19_400, 1), (3_300, 0.5)]
    static let input: [Float] = (0..<Int(rate)).map { n in
        Float(tones.reduce(0) { $0 + $1.amplitude * Double.cos(2 * Double.pi * $1.frequency * Double(n) / rate) })
    }

    static func run(_ bank: BandDecimatorBank, chunks: [Int]) -> [(re: [Float], im: [Float])] {
        var outputs = [(re: [Float], im: [Float])](repeating: ([], []), count: bank.bands.count)
        var offset = 0, c = 0
        input.withUnsafeBufferPointer { all in
            while offset < all.count {
                let n = min(chunks[c % chunks.count], all.count - offset)
                bank.process(UnsafeBufferPointer(rebasing: all[offset..<(offset + n)])) { band, r, i in
                    outputs[band].re += r; outputs[band].im += i
                }
                offset += n; c += 1
            }
        }
        return outputs
    }

    @Test func everyBandCarriesItsTonesWithTheirPhaseAndNothingElse() {
        let bank = BandDecimatorBank(sampleRate: Self.rate, bands: Self.bands)
        #expect(bank.bands.map(\.blockSize) == [4096, 4096, 4096])
        #expect(bank.bands.map(\.outputBlockSize) == [320, 432, 320])
        #expect(bank.bands.map(\.outputRate) == [3_750, 5_062.5, 3_750])
        let outputs = Self.run(bank, chunks: [1000])
        for (index, decimator) in bank.bands.enumerated() {
            let out = outputs[index]
            // A second of input: every band's output covers it but for the last block still pending.
            #expect(out.re.count > Int(0.8 * decimator.outputRate), "band \(index): \(out.re.count) samples")
            let inBand = Self.tones.filter { abs($0.frequency - Self.bands[index].centerFrequency) < Self.bands[index].passbandHalfWidth }
            #expect(inBand.count == 1)
            for j in stride(from: 500, to: out.re.count - 500, by: 97) {
                // The analytic signal of the band's tone at input time j / outputRate, shifted by the centre.
                let t = Double(j) / decimator.outputRate
                let phase = 2 * Double.pi * (inBand[0].frequency - decimator.centerFrequency) * t
                let dr = Double(out.re[j]) - inBand[0].amplitude * Double.cos(phase)
                let di = Double(out.im[j]) - inBand[0].amplitude * Double.sin(phase)
                #expect((dr * dr + di * di).squareRoot() < 0.01, "band \(index), sample \(j)")
            }
        }
    }

    @Test func outputDoesNotDependOnChunking() {
        let whole = Self.run(BandDecimatorBank(sampleRate: Self.rate, bands: Self.bands), chunks: [48_000])
        let pieces = Self.run(BandDecimatorBank(sampleRate: Self.rate, bands: Self.bands), chunks: [1, 7, 333, 4096, 2])
        for band in whole.indices { #expect(whole[band].re == pieces[band].re && whole[band].im == pieces[band].im) }
    }

    /// One band in a bank is exactly the decimator of its own (the same blocks, filter and transform).
    @Test func aBankOfOneIsTheStandaloneDecimator() {
        let band = Self.bands[0]
        let bank = Self.run(BandDecimatorBank(sampleRate: Self.rate, bands: [band]), chunks: [4096])[0]
        let own = BandDecimatorTests.run(BandDecimator(sampleRate: Self.rate, centerFrequency: band.centerFrequency,
                                                       passbandHalfWidth: band.passbandHalfWidth,
                                                       minimumOutputRate: band.minimumOutputRate), Self.input, chunks: [4096])
        #expect(bank.re == own.re && bank.im == own.im)
    }
}

@Suite struct StreamingCorrelatorTests {
    /// Templates are correlated when asked for, once per block: asking for the second template in some
    /// blocks only, or for both in either order, gives each the values of a correlator asked for it alone.
    @Test func templatesAreCorrelatedWhenAskedForInAnyOrder() {
        var state: UInt64 = 7
        func noise() -> Float {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Float(Int64(bitPattern: state >> 11) % 2000) / 1000 - 1
        }
        let length = 100
        let templates = (0..<2).map { _ in ((0..<length).map { _ in noise() }, (0..<length).map { _ in noise() }) }
        let xRe = (0..<5000).map { _ in noise() }, xIm = (0..<5000).map { _ in noise() }
        func run(_ correlator: StreamingCorrelator, ask: (Int) -> [Int]) -> [[Float]] {
            var rows: [[Float]] = [[], []]
            var block = 0
            xRe.withUnsafeBufferPointer { r in
                xIm.withUnsafeBufferPointer { i in
                    correlator.process(real: r, imaginary: i) { count, correlation in
                        for t in ask(block) { rows[t] += correlation(t); _ = correlation(t) }
                        for t in 0..<2 where !ask(block).contains(t) { rows[t] += [Float](repeating: .nan, count: count) }
                        block += 1
                    }
                }
            }
            return rows
        }
        let alone = (0..<2).map { t in run(StreamingCorrelator(templates: [templates[t]])) { _ in [0] }[0] }
        let mixed = run(StreamingCorrelator(templates: templates)) { block in [[1], [0, 1], [1, 0], [0]][block % 4] }
        #expect(alone[0].count > 4000)
        for t in 0..<2 {
            for n in alone[t].indices where !mixed[t][n].isNaN {
                #expect(mixed[t][n] == alone[t][n], "template \(t), position \(n)")
            }
        }
        #expect(mixed[1].filter { !$0.isNaN }.count > mixed[0].filter { !$0.isNaN }.count)
    }

    /// Templates from well under a block to a whole half block (256 samples: the block of 512 then yields
    /// only 257 positions), so every block boundary case of the overlap-save is crossed.
    @Test(arguments: [37, 150, 256])
    func matchesDirectNormalisedCorrelation(length: Int) {
        var state: UInt64 = 99
        func noise() -> Float {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Float(Int64(bitPattern: state >> 11) % 2000) / 1000 - 1
        }
        let tRe = (0..<length).map { _ in noise() }, tIm = (0..<length).map { _ in noise() }
        var xRe = (0..<2000).map { _ in 0.3 * noise() }, xIm = (0..<2000).map { _ in 0.3 * noise() }
        // Plant a scaled copy at 700, and silence (exact zeros) over 40 positions' windows from 1 400.
        for i in 0..<length { xRe[700 + i] += 2 * tRe[i]; xIm[700 + i] += 2 * tIm[i] }
        for i in 1_400..<(1_440 + length) { xRe[i] = 0; xIm[i] = 0 }
        let correlator = StreamingCorrelator(templates: [(tRe, tIm)])
        var rho: [Float] = []
        xRe.withUnsafeBufferPointer { r in
            xIm.withUnsafeBufferPointer { i in
                for start in stride(from: 0, to: 2000, by: 123) {
                    let end = min(2000, start + 123)
                    correlator.process(real: UnsafeBufferPointer(rebasing: r[start..<end]),
                                       imaginary: UnsafeBufferPointer(rebasing: i[start..<end])) { _, correlation in
                        rho += correlation(0)
                    }
                }
            }
        }
        #expect(rho.count > 1000)
        let tEnergy = zip(tRe, tIm).reduce(0.0) { $0 + Double($1.0 * $1.0 + $1.1 * $1.1) }
        for n in stride(from: 0, to: rho.count, by: 7) {
            var cr = 0.0, ci = 0.0, e = 0.0
            for i in 0..<length {
                let a = Double(xRe[n + i]), b = Double(xIm[n + i])
                cr += a * Double(tRe[i]) + b * Double(tIm[i])
                ci += b * Double(tRe[i]) - a * Double(tIm[i])
                e += a * a + b * b
            }
            let expected = e > 0 ? (cr * cr + ci * ci) / (tEnergy * e) : 0
            #expect(abs(Double(rho[n]) - expected) < 1e-3, "position \(n)")
        }
        let best = rho.indices.max { rho[$0] < rho[$1] }
        #expect(best == 700)
        #expect(rho[700] > 0.9)
        // No energy under the template: no correlation (not a division by zero).
        #expect((1_400...1_440).allSatisfy { rho[$0] == 0 })
    }

    /// Templates of different lengths in one correlator (the preambles of profiles sharing a baseband): each
    /// gives its own normalised correlation at every position, over its own length, in blocks that fit the
    /// longest, as a correlator of that template alone does.
    @Test(arguments: [[150, 225], [225, 37, 150], [256, 1]])
    func templatesOfDifferentLengthsEachGiveTheirOwnCorrelation(lengths: [Int]) {
        var state: UInt64 = UInt64(lengths.reduce(0, +))
        func noise() -> Float {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Float(Int64(bitPattern: state >> 11) % 2000) / 1000 - 1
        }
        let templates = lengths.map { length in ((0..<length).map { _ in noise() }, (0..<length).map { _ in noise() }) }
        var xRe = (0..<4000).map { _ in 0.3 * noise() }, xIm = (0..<4000).map { _ in 0.3 * noise() }
        // Each template planted once, scaled, at its own place.
        for (t, template) in templates.enumerated() {
            for i in template.0.indices { xRe[600 + 900 * t + i] += 2 * template.0[i]; xIm[600 + 900 * t + i] += 2 * template.1[i] }
        }
        func run(_ correlator: StreamingCorrelator) -> [[Float]] {
            var rows = [[Float]](repeating: [], count: correlator.templateCount)
            xRe.withUnsafeBufferPointer { r in
                xIm.withUnsafeBufferPointer { i in
                    for start in stride(from: 0, to: 4000, by: 311) {
                        let end = min(4000, start + 311)
                        correlator.process(real: UnsafeBufferPointer(rebasing: r[start..<end]),
                                           imaginary: UnsafeBufferPointer(rebasing: i[start..<end])) { _, correlation in
                            // Asked for in reverse order: each length's energies are formed by whichever comes first.
                            for t in (0..<correlator.templateCount).reversed() { rows[t] += correlation(t) }
                        }
                    }
                }
            }
            return rows
        }
        let mixed = StreamingCorrelator(templates: templates)
        #expect(mixed.templateLength == lengths.max()! && mixed.templateLengths == lengths)
        #expect(mixed.fftSize == StreamingCorrelator.blockSize(templateLength: lengths.max()!))
        let rows = run(mixed)
        for (t, template) in templates.enumerated() {
            let alone = run(StreamingCorrelator(templates: [template]))[0]
            let count = min(alone.count, rows[t].count)
            #expect(count > 3000)
            for n in 0..<count { #expect(abs(rows[t][n] - alone[n]) < 1e-4, "template \(t), position \(n)") }
            let best = rows[t].indices.max { rows[t][$0] < rows[t][$1] }
            if template.0.count > 1 { #expect(best == 600 + 900 * t && rows[t][best!] > 0.9) }
        }
    }

    /// Blocks are powers of two of two to four template lengths (256 at least): a fast transform, and at
    /// most three template lengths of positions waiting for the next block.
    @Test(arguments: [1, 37, 64, 65, 150, 188, 225, 256, 257, 1000])
    func blocksArePowersOfTwoOfTwoToFourTemplateLengths(length: Int) {
        let size = StreamingCorrelator.blockSize(templateLength: length)
        #expect(size >= 256 && size & (size - 1) == 0)
        #expect(size >= 2 * length)
        #expect(size < 4 * length || size == 256)
    }
}

@Suite struct FrequencyTrajectoryTests {
    @Test func phaseIsContinuousAndEnvelopeConstant() {
        let trajectory = FrequencyTrajectory(
            segments: [.tone(18_000, duration: 0.01), .tone(19_000, duration: 0.01), .chirp(from: 19_000, to: 18_500, duration: 0.02)],
            smoothingSigma: 0.001, fadeDuration: 0.005)
        let rate = 48_000.0
        let x = trajectory.synthesize(sampleRate: rate, amplitude: 0.5)
        #expect(x.count == 1920)
        #expect(x.allSatisfy { abs($0) <= 0.5 + 1e-6 })
        // Largest sample-to-sample step bounded by the highest frequency (no phase jumps).
        let maxStep = zip(x, x.dropFirst()).map { abs($0 - $1) }.max() ?? 0
        #expect(Double(maxStep) <= 0.5 * 2 * Double.pi * 19_100 / rate)
        // Fades: starts and ends near zero.
        #expect(abs(x[0]) < 0.01 && abs(x[x.count - 1]) < 0.01)
    }

    @Test func smoothedFrequencyFollowsSegments() {
        let trajectory = FrequencyTrajectory(segments: [.tone(1000, duration: 0.1), .tone(2000, duration: 0.1)],
                                             smoothingSigma: 0.002, fadeDuration: 0)
        let base = trajectory.synthesizeBaseband(sampleRate: 8000, centerFrequency: 0)
        func frequency(at n: Int) -> Double {
            let p0 = Double.atan2(y: Double(base.imaginary[n]), x: Double(base.real[n]))
            let p1 = Double.atan2(y: Double(base.imaginary[n + 1]), x: Double(base.real[n + 1]))
            var d = p1 - p0
            while d < 0 { d += 2 * Double.pi }
            return d / (2 * Double.pi) * 8000
        }
        #expect(abs(frequency(at: 300) - 1000) < 1)
        #expect(abs(frequency(at: 1300) - 2000) < 1)
        #expect(abs(frequency(at: 800) - 1500) < 20)  // the midpoint of a Gaussian transition
    }

    @Test func gaussianSigmaFollowsBT() {
        let sigma = FrequencyTrajectory.gaussianSigma(bandwidthTime: 1, symbolTime: 0.01)
        #expect(abs(sigma - 0.01 * 0.1325) < 1e-5)
    }
}

@Suite struct LogBesselTests {
    @Test func matchesSeriesAndAsymptote() {
        for x in stride(from: Float(0), through: 50, by: 0.37) {
            // Reference: the power series in Double (exact enough up to 50).
            let reference = Float(Double.log(KaiserFIR.besselI0(Double(x))))
            #expect(abs(logBesselI0(x) - reference) <= 1e-3 * max(1, reference), "x = \(x)")
        }
        #expect(logBesselI0(1e6).isFinite)
        #expect(logBesselI0(0) == 0)
    }
}
