import Foundation
import SottoDSP
import Testing
@testable import SottoChannel

/// A 2 s test signal at 48 kHz: bursts of a 19 kHz tone between silences, and quiet noise.
private func burstSignal() -> [Float] {
    var random = SeededRandom(seed: 21)
    return (0..<96_000).map { i -> Float in
        let on = (i / 12_000) % 2 == 1
        let phase: Double = 2 * Double.pi * 19_000 * Double(i) / 48_000
        let tone: Float = on ? 0.4 * Float(sin(phase)) : 0
        return tone + 0.001 * Float(random.gaussian())
    }
}

/// Feeds `x` to `stream` in pieces of 1 to 20 000 samples.
private func streamed(_ x: [Float], _ stream: ChannelStream) throws -> [Float] {
    var y: [Float] = []
    var index = 0, length = 1
    while index < x.count {
        y += try stream.process(Array(x[index..<min(x.count, index + length)]))
        index += length
        length = length * 7 % 20_011 + 1
    }
    return y + (try stream.finish())
}

@Suite struct ChannelStreamTests {
    /// Without reverberation every stage is the same arithmetic in the same order: bit for bit `apply`'s output.
    @Test func streamWithoutRoomIsBitExact() throws {
        let x = burstSignal()
        var interferenceRandom = SeededRandom(seed: 5)
        let interference = (0..<150_000).map { _ in Float(interferenceRandom.gaussian()) * 0.1 }
        var model = ChannelModel(seed: 9)
        model.rollOffCornerHz = 17_000
        model.ppm = 250
        model.outputRate = 44_100
        model.sirDB = 6
        model.snrDB = 12
        model.clipLevel = 0.7
        model.quantize16 = true
        let whole = try model.apply(x, sampleRate: 48_000, interference: interference)
        let power = Channel.activePower(x, sampleRate: 48_000)
        let stream = try ChannelStream(model: model, sampleRate: 48_000, inputFrames: x.count, signalPower: power, interference: interference)
        #expect(stream.outputFrames == whole.samples.count && stream.outputRate == whole.sampleRate)
        let y = try streamed(x, stream)
        #expect(y.count == whole.samples.count)
        #expect(y == whole.samples)
    }

    /// With a room (synthetic or measured), the block transforms round differently from one transform of the
    /// whole input: equal within float rounding, and the noise after it the same draws.
    @Test(arguments: [false, true]) func streamWithRoomMatchesWithinRounding(measured: Bool) throws {
        let x = burstSignal()
        var model = ChannelModel(seed: 4)
        var response: [Float]?
        if measured {
            var random = SeededRandom(seed: 8)
            response = (0..<9_000).map { i -> Float in
                let decay: Double = exp(-Double(i) / 1_500)
                return Float(random.gaussian() * decay)
            }
        } else {
            model.rt60 = 0.6
            model.distance = 2
        }
        model.snrDB = 20
        model.ppm = -80
        let whole = try model.apply(x, sampleRate: 48_000, measuredImpulseResponse: response)
        let stream = try ChannelStream(model: model, sampleRate: 48_000, inputFrames: x.count,
                                       signalPower: Channel.activePower(x, sampleRate: 48_000), measuredImpulseResponse: response)
        let y = try streamed(x, stream)
        #expect(y.count == whole.samples.count)
        let peak = whole.samples.map(abs).max()!
        let worst = zip(y, whole.samples).map { abs($0 - $1) }.max()!
        #expect(worst < 1e-4 * peak, "largest difference \(worst) of a peak of \(peak)")
    }

    /// The two-pass meter is `Channel.activePower`, bit for bit, whatever the pieces.
    @Test func activePowerMeterIsExact() {
        let x = burstSignal() + [Float](repeating: 0, count: 1_234)
        var meter = ActivePowerMeter(sampleRate: 48_000)
        for pass in 0..<2 {
            var index = 0
            while index < x.count {
                meter.add(x[index..<min(x.count, index + 333 + pass)])
                index += 333 + pass
            }
            if pass == 0 { meter.startSecondPass() }
        }
        #expect(meter.frames == x.count)
        #expect(meter.finish() == Channel.activePower(x, sampleRate: 48_000))
        var silent = ActivePowerMeter(sampleRate: 8_000)
        silent.add([Float](repeating: 0, count: 500))
        silent.startSecondPass()
        silent.add([Float](repeating: 0, count: 500))
        #expect(silent.finish() == 0)
    }

    /// What the model needs from the whole input must be given.
    @Test func missingWholeInputFactsAreErrors() {
        var model = ChannelModel(seed: 1)
        model.snrDB = 10
        #expect(throws: ChannelStream.Failure.self) { try ChannelStream(model: model, sampleRate: 48_000) }
        model.quantize16 = true
        #expect(throws: ChannelStream.Failure.self) { try ChannelStream(model: model, sampleRate: 48_000, signalPower: 0.1) }
    }
}
