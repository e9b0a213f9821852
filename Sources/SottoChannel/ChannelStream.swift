import RealModule
import SottoDSP

/// ``ChannelModel/apply(_:sampleRate:interference:measuredImpulseResponse:)`` block by block, for recordings of
/// any length in bounded memory: the same stages in the same order, seeded the same way, so that the outputs
/// joined are `apply`'s (bit for bit but for the reverberation, whose block transforms round differently).
///
/// What `apply` takes from the whole input is given up front: the input's length (frames) when interference or
/// noise with quantisation is on (the interference's offset and the dither's random numbers depend on the
/// output's length) and its active power (``Channel/activePower(_:sampleRate:)``, for SNR and SIR), which a
/// caller reading a file measures in a pass of its own with ``ActivePowerMeter``.
///
/// One owner; not for concurrent use.
public final class ChannelStream {
    /// Output sample rate (Hz).
    public let outputRate: Double
    /// Output samples in all, when the input's length was given.
    public let outputFrames: Int?
    private let model: ChannelModel
    private let sampleRate: Double
    private let convolver: OverlapAddConvolver?
    private var clock: StreamingResampler?
    private var rate: StreamingResampler?
    /// The speaker's and microphone's roll-off, with its state across blocks.
    private var rollOffFilter: RollOffFilter?
    /// The interference at the output rate, read from its random offset on; the samples of it still to mix in,
    /// and its gain.
    private let interference: (any InterferenceSource)?
    private var interferenceRemaining = 0
    private let interferenceGain: Float
    private let noiseSigma: Float?
    private var noiseRandom: SeededRandom
    private var ditherRandom: SeededRandom
    /// Output samples produced so far.
    private var position = 0

    /// Why a channel cannot be streamed.
    public struct Failure: Error, CustomStringConvertible {
        /// What is missing or failed.
        public let description: String
    }

    /// Prepares the stages of `model` for an input at `sampleRate` (Hz).
    /// - Parameters:
    ///   - model: the channel.
    ///   - sampleRate: the input's rate (Hz).
    ///   - inputFrames: the input's length (samples); needed with interference, or with noise and quantisation.
    ///   - signalPower: the input's active power (mean square); needed with noise or interference.
    ///   - interference: the interfering recording at `sampleRate`, held in memory.
    ///   - interferenceSource: instead of `interference`, a recording read as the output is made (at the
    ///     output rate: `model.outputRate`, or `sampleRate`), for one of any length.
    ///   - measuredImpulseResponse: a measured room response at `sampleRate` (normalised to its peak here).
    /// - Throws: ``Failure`` when what the model needs was not given; `FFTError` (SottoDSP) when the
    ///   reverberation's transforms cannot be made; the source's errors.
    public init(model: ChannelModel, sampleRate: Double, inputFrames: Int? = nil, signalPower: Double? = nil,
                interference: [Float]? = nil, interferenceSource: (any InterferenceSource)? = nil,
                measuredImpulseResponse: [Float]? = nil) throws {
        self.model = model
        self.sampleRate = sampleRate
        var rng = SeededRandom(seed: model.seed)
        var responseLength = 0
        if var response = measuredImpulseResponse, !response.isEmpty {
            let peak = response.map { abs($0) }.max() ?? 1
            if peak > 0 { for i in response.indices { response[i] /= peak } }
            convolver = try OverlapAddConvolver(response: response)
            responseLength = response.count
        } else if let rt60 = model.rt60 {
            let response = try Room(rt60: rt60, distance: model.distance, volume: model.volume, directivity: model.directivity)
                .impulseResponse(sampleRate: sampleRate, rng: &rng)
            convolver = try OverlapAddConvolver(response: response)
            responseLength = response.count
        } else {
            convolver = nil
        }
        rollOffFilter = model.rollOffCornerHz.map {
            RollOffFilter(cornerHz: $0, slopeDBPerOctave: model.rollOffSlopeDBPerOctave ?? RollOffFilter.defaultSlope, sampleRate: sampleRate)
        }
        // The output's length, as apply's stages make it.
        var frames = inputFrames.map { $0 == 0 ? 0 : $0 + max(0, responseLength - 1) }
        if let ppm = model.ppm, ppm != 0 {
            clock = StreamingResampler(ratio: 1 + ppm * 1e-6)
            frames = frames.map { Int((Double($0) * (1 + ppm * 1e-6)).rounded()) }
        }
        var outRate = sampleRate
        if let target = model.outputRate, target != sampleRate {
            rate = StreamingResampler(ratio: target / sampleRate)
            frames = frames.map { Int((Double($0) * (target / sampleRate)).rounded()) }
            outRate = target
        }
        outputRate = outRate
        outputFrames = frames
        var source = interferenceSource
        if source == nil, let other = interference, !other.isEmpty {
            source = InterferenceSamples(outRate != sampleRate ? Channel.resample(other, from: sampleRate, to: outRate) : other)
        }
        if source?.frames == 0 { source = nil }
        let needsPower = model.snrDB != nil || (model.sirDB != nil && source != nil)
        if needsPower && signalPower == nil { throw Failure(description: "noise and interference need the input's active power") }
        if let sirDB = model.sirDB, let source {
            guard let frames else { throw Failure(description: "interference needs the input's length") }
            let offset = Int(rng.uniform() * Double(max(0, source.frames - frames)))
            let range = offset..<min(source.frames, offset + frames)
            let p = try source.power(of: range)
            try source.start(at: offset)
            self.interference = source
            interferenceRemaining = range.count
            interferenceGain = p > 0 ? Float((signalPower! / Double.pow(10, sirDB / 10) / p).squareRoot()) : 0
        } else {
            self.interference = nil
            interferenceGain = 0
        }
        noiseSigma = model.snrDB.map { Float((signalPower! / Double.pow(10, $0 / 10)).squareRoot()) }
        noiseRandom = rng
        // apply draws every noise sample (two numbers each) before the first dither.
        if noiseSigma != nil && model.quantize16 {
            guard let frames else { throw Failure(description: "noise with quantisation needs the input's length") }
            for _ in 0..<(2 * frames) { _ = rng.next() }
        }
        ditherRandom = rng
    }

    /// Takes the next input samples; returns the output samples now complete.
    /// - Parameter input: the next samples of the recording.
    /// - Throws: what the interference source throws (a failed read).
    public func process(_ input: [Float]) throws -> [Float] {
        var y = convolver.map { $0.process(input) } ?? input
        return try later(&y)
    }

    /// Ends the input: returns the rest of the output.
    /// - Throws: what the interference source throws (a failed read).
    public func finish() throws -> [Float] {
        var y = convolver?.finish() ?? []
        y = rollOff(y)
        var tail: [Float] = []
        if clock != nil {
            y = clock!.process(y) + clock!.finish()
        }
        if rate != nil { y = rate!.process(y) + rate!.finish() }
        tail = y
        return try pointwise(tail)
    }

    /// The stages after the reverberation, on samples that are not the last.
    private func later(_ y: inout [Float]) throws -> [Float] {
        var z = rollOff(y)
        if clock != nil { z = clock!.process(z) }
        if rate != nil { z = rate!.process(z) }
        return try pointwise(z)
    }

    private func rollOff(_ x: [Float]) -> [Float] {
        guard rollOffFilter != nil else { return x }
        var y = x
        rollOffFilter!.process(&y)
        return y
    }

    /// Interference, noise, clipping and quantisation, sample by sample.
    private func pointwise(_ x: [Float]) throws -> [Float] {
        var y = x
        var mixed: [Float] = []
        if interferenceRemaining > 0, let interference {
            let count = min(y.count, interferenceRemaining)
            mixed = try interference.next(count)
            interferenceRemaining -= count
        }
        for i in y.indices {
            if i < mixed.count { y[i] += interferenceGain * mixed[i] }
            if let noiseSigma { y[i] += noiseSigma * Float(noiseRandom.gaussian()) }
            if let level = model.clipLevel { y[i] = min(level, max(-level, y[i])) }
            if model.quantize16 {
                let step: Float = 1 / 32768
                let d = Float(ditherRandom.uniform() - ditherRandom.uniform()) * step
                let q = ((y[i] + d) / step).rounded() * step
                y[i] = min(32767 * step, max(-1, q))
            }
        }
        position += y.count
        return y
    }
}

/// ``Channel/activePower(_:sampleRate:)`` over a recording read twice, block by block: the first pass finds
/// the loudest 10 ms, the second averages the blocks within 40 dB of it. The same sums in the same order,
/// so the same value, bit for bit.
public struct ActivePowerMeter: Sendable {
    private let window: Int
    /// The loudest 10 ms block's mean square, after the first pass.
    private var loudest = 0.0
    private var secondPass = false
    private var sum = 0.0
    private var filled = 0
    private var activeSum = 0.0
    private var activeCount = 0
    /// Samples taken in the first pass.
    public private(set) var frames = 0

    /// - Parameter sampleRate: the recording's rate (Hz).
    public init(sampleRate: Double) {
        window = max(1, Int(0.01 * sampleRate))
    }

    /// Takes the next samples of the current pass.
    /// - Parameter samples: the next samples of the recording.
    public mutating func add(_ samples: some Collection<Float>) {
        if !secondPass { frames += samples.count }
        for v in samples {
            sum = sum + Double(v) * Double(v)
            filled += 1
            if filled == window { closeBlock() }
        }
    }

    /// Ends the first pass (the recording is then read again from its start).
    public mutating func startSecondPass() {
        if filled > 0 { closeBlock() }
        secondPass = true
    }

    /// Ends the second pass: the active power (0 for silence).
    public mutating func finish() -> Double {
        if filled > 0 { closeBlock() }
        guard loudest > 0, activeCount > 0 else { return 0 }
        return activeSum / Double(activeCount)
    }

    private mutating func closeBlock() {
        let power = sum / Double(filled)
        sum = 0
        filled = 0
        if !secondPass {
            loudest = max(loudest, power)
        } else if power >= loudest * 1e-4 {
            activeSum += power
            activeCount += 1
        }
    }
}

/// An interfering recording for ``ChannelStream``, read as the output is made rather than held whole: its
/// length first, then the power of the part mixed in, then that part block by block. All at the channel's
/// output rate. One owner; not for concurrent use.
public protocol InterferenceSource: AnyObject {
    /// Samples in all.
    var frames: Int { get }
    /// Mean square of the samples in `range` (within `0..<frames`), summed in order (as ``Channel/power(_:)``).
    /// - Parameter range: the samples to measure.
    func power(of range: Range<Int>) throws -> Double
    /// Starts reading at sample `offset`: the following ``next(_:)`` calls give the samples from there on.
    /// - Parameter offset: the first sample to give.
    func start(at offset: Int) throws
    /// The next `count` samples (fewer at the end).
    /// - Parameter count: samples wanted.
    func next(_ count: Int) throws -> [Float]
}

/// An interfering recording held in memory.
public final class InterferenceSamples: InterferenceSource {
    private let samples: [Float]
    private var position = 0

    /// - Parameter samples: the recording at the channel's output rate.
    public init(_ samples: [Float]) { self.samples = samples }

    public var frames: Int { samples.count }

    public func power(of range: Range<Int>) throws -> Double { Channel.power(Array(samples[range])) }

    public func start(at offset: Int) throws { position = offset }

    public func next(_ count: Int) throws -> [Float] {
        let end = min(samples.count, position + count)
        defer { position = end }
        return Array(samples[position..<end])
    }
}
