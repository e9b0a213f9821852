import SottoDSP

/// Finds and decodes frames in a stream of samples: the one decoding engine behind file decoding, live
/// capture and the benchmarks.
///
/// Feed chunks of any size with `process`; each call returns the frames completed so far, in order of
/// completion. Results do not depend on how the stream is chunked (blocks are cut at fixed positions
/// from the start of the stream). Memory is bounded: a fixed ring buffer per profile, sized for the
/// longest frame. Call `finish()` at the end of a finite stream to flush frames that end right at it.
///
/// One owner; not for concurrent use (it is a class because it holds FFT plans and buffers).
public final class StreamingDecoder {
    /// Input sample rate (Hz).
    public let sampleRate: Double
    /// Profiles searched for.
    public let profiles: [Profile]
    private let receivers: [FrameReceiver]
    /// The band extractors, each with the receivers it feeds (profiles with the same band share one).
    let frontEnds: [(frontEnd: BasebandFrontEnd, receivers: [FrameReceiver])]
    /// The front ends' decimators, in the same order, sharing one FFT of the input per block.
    private let bank: BandDecimatorBank
    /// Input samples consumed so far.
    public private(set) var sampleCount: Int64 = 0
    /// Successive interference cancellation, when asked for (`cancelsInterference`).
    private let canceller: InterferenceCanceller?

    /// - Parameters:
    ///   - sampleRate: input rate (Hz).
    ///   - profiles: the profiles to listen for.
    ///   - aliasFrames: also look for alias frames (`FrameFormat`'s short frame of a 12-bit alias, one chirp),
    ///     reported with ``DecodedFrame/alias`` set; token frames are decoded as without (but for a token frame whose
    ///     down-chirp is lost, which is then tried as an alias frame and rejected by its check).
    ///   - lowLatency: input taken in blocks half as long (2 048 samples at 48 kHz instead of 4 096), for a
    ///     live capture: frames are reported 18-31 ms after their last sample in the median instead of
    ///     40-59 ms (max 53 ms instead of 96; `sotto bench sweep latency`), for about 40 % more CPU on noise
    ///     with all four profiles (0.07 -> 0.10 s for 60 s). Decoded frames are the same but for frames at
    ///     the edge of decoding (the band filters differ slightly).
    ///   - cancelsInterference: after each frame, subtract it (made again, through the room estimated from the
    ///     input) and decode what is left for a frame it hid: two bursts of one band that overlap, the weaker
    ///     one 6 dB or more under the other. A frame found so is reported once the input reaches the end of the
    ///     frame that hid it plus the longest frame of the profiles plus 0.8 s (for the default profile alone,
    ///     about 1.6 s), out of order; the frames found without it are the same, reported at the same time. Costs a few milliseconds and a decode
    ///     of about three frames' audio for each frame heard (nothing on audio without frames).
    ///   - tuning: the receivers' thresholds and limits (``ReceiverTuning``); ``ReceiverTuning/standard`` unless a
    ///     sweep or an experiment measures another.
    /// - Throws: `ModemError` when the rate is absurd or too low for one of the profiles, or when the
    ///   receiver's transforms cannot be made (``ModemError/transformFailed(_:)``: out of memory).
    public init(sampleRate: Double, profiles: [Profile] = [.standard], aliasFrames: Bool = false, lowLatency: Bool = false,
                cancelsInterference: Bool = false, tuning: ReceiverTuning = .standard) throws(ModemError) {
        for profile in profiles { try validate(sampleRate: sampleRate, for: profile) }
        self.sampleRate = sampleRate
        self.profiles = profiles
        // One front end per distinct set of band parameters, its history long enough for every profile on it.
        var groups: [(parameters: BasebandFrontEnd.Parameters, profiles: [Profile])] = []
        for profile in profiles {
            let parameters = FrameReceiver.frontEndParameters(profile: profile, sampleRate: sampleRate)
            if let index = groups.firstIndex(where: { $0.parameters == parameters }) {
                groups[index].profiles.append(profile)
            } else {
                groups.append((parameters, [profile]))
            }
        }
        // The transforms' buffers and plans: a failure (out of memory) is an error, not a trap.
        let bank: BandDecimatorBank
        var frontEnds: [(frontEnd: BasebandFrontEnd, receivers: [FrameReceiver])] = []
        let board = DetectionBoard()
        do throws(FFTError) {
            bank = try BandDecimatorBank(checkedSampleRate: sampleRate, bands: groups.map { $0.parameters.band }, lowLatency: lowLatency)
            for (group, decimator) in zip(groups, bank.bands) {
                let frontEnd = try BasebandFrontEnd(group.parameters, decimator: decimator, profiles: group.profiles, board: board,
                                                    tuning: tuning)
                frontEnds.append((frontEnd: frontEnd, receivers: group.profiles.map { FrameReceiver(profile: $0, frontEnd: frontEnd) }))
            }
        } catch {
            throw .transformFailed(error.description)
        }
        self.bank = bank
        self.frontEnds = frontEnds
        let all = frontEnds.flatMap { $0.receivers }
        receivers = profiles.map { profile in all.first { $0.profile == profile }! }
        for receiver in receivers { receiver.preamble.looksForAliases = aliasFrames }
        canceller = cancelsInterference
            ? InterferenceCanceller(sampleRate: sampleRate, profiles: profiles, aliasFrames: aliasFrames, tuning: tuning) : nil
    }

    /// Preambles detected so far, per profile name, including those that yielded no frame (a measure of
    /// the false-alarm rate on noise).
    public var detections: [String: Int] {
        var counts: [String: Int] = [:]
        for receiver in receivers { counts[receiver.profile.name, default: 0] += receiver.detections }
        return counts
    }

    /// Feeds samples (any count, full scale = 1); returns frames completed by them.
    public func process(_ samples: UnsafeBufferPointer<Float>) -> [DecodedFrame] {
        var frames: [DecodedFrame] = []
        feed(samples, into: &frames)
        sampleCount += Int64(samples.count)
        if let canceller {
            canceller.append(samples)
            frames = canceller.takeReported(frames) + canceller.runDue(final: false)
        }
        return frames.sorted { $0.startTime < $1.startTime }
    }

    /// Transforms the input once per block for every front end; each front end takes its new baseband
    /// (history and preamble correlation), then its receivers run the events it made possible.
    private func feed(_ samples: UnsafeBufferPointer<Float>, into frames: inout [DecodedFrame]) {
        let frontEnds = frontEnds
        bank.process(samples) { index, re, im in
            let (frontEnd, receivers) = frontEnds[index]
            frontEnd.append(real: re, imaginary: im)
            for receiver in receivers { receiver.runEvents(into: &frames) }
        }
    }

    /// Feeds samples; returns frames completed by them.
    public func process(_ samples: [Float]) -> [DecodedFrame] {
        samples.withUnsafeBufferPointer { process($0) }
    }

    /// Ends a finite stream: feeds silence until every frame under way is complete (at most the longest
    /// frame plus the detector's latency), so that a frame ending at the last sample is still reported.
    public func finish() -> [DecodedFrame] {
        let longest = profiles.map { $0.airtime(payloadBytes: FrameFormat.payloadBytes.upperBound) }.max() ?? 0
        let padding = Int((longest + 0.5) * sampleRate)
        // The detector needs this much after a preamble before it can tell whether one was there, once the
        // front end has let it through: one block of the band decimator and one of each correlator.
        let settle = Int(0.3 * sampleRate) + bank.blockSize + (receivers.map { $0.correlationBlockInputSamples }.max() ?? 0)
        let silence = [Float](repeating: 0, count: 4096)
        var frames: [DecodedFrame] = []
        var fed = 0
        while fed < padding && (fed < settle || !receivers.allSatisfy { $0.isIdle }) {
            frames += silence.withUnsafeBufferPointer { buffer in
                var found: [DecodedFrame] = []
                feed(buffer, into: &found)
                return found
            }
            fed += silence.count
        }
        let end = Double(sampleCount) / sampleRate
        if let canceller { frames = canceller.takeReported(frames) + canceller.runDue(final: true) }
        // A frame must have started inside the stream.
        return frames.filter { $0.startTime < end }.sorted { $0.startTime < $1.startTime }
    }

    /// Decodes a whole buffer: `process` then `finish`.
    /// - Parameters:
    ///   - samples: the stream (full scale = 1).
    ///   - sampleRate: its rate (Hz).
    ///   - profiles: the profiles to listen for.
    ///   - aliasFrames: also look for alias frames (see ``init(sampleRate:profiles:aliasFrames:lowLatency:cancelsInterference:tuning:)``).
    ///   - cancelsInterference: decode frames hidden under stronger ones too (see the initialiser).
    ///   - tuning: the receivers' thresholds and limits (``ReceiverTuning``).
    public static func decode(_ samples: [Float], sampleRate: Double, profiles: [Profile] = [.standard],
                              aliasFrames: Bool = false, cancelsInterference: Bool = false,
                              tuning: ReceiverTuning = .standard) throws(ModemError) -> [DecodedFrame] {
        let decoder = try StreamingDecoder(sampleRate: sampleRate, profiles: profiles, aliasFrames: aliasFrames,
                                           cancelsInterference: cancelsInterference, tuning: tuning)
        return decoder.process(samples) + decoder.finish()
    }
}

#if !SOTTO_PORTABLE_FFT
extension StreamingDecoder {
    /// Measures FFTW plans (`FFTWisdom`, SottoDSP) for every transform a decoder makes at `sampleRates`
    /// (Hz), for every set of the profiles each rate carries (the block transform and the correlators depend
    /// on the set), and returns the process's wisdom in FFTW's text format, to keep where decoders will find
    /// it (`FFTWisdom.systemPath`, or the file named by `FFTWisdom.environmentVariable`). Tens of
    /// milliseconds for each transform size not measured before in this process.
    /// - Throws: `ModemError` when a rate is absurd or carries no profile.
    public static func measureTransforms(sampleRates: [Double]) throws(ModemError) -> String {
        var sets: [(Double, [Profile])] = []
        for rate in sampleRates {
            let carried = Profile.carried(atSampleRate: rate)
            if carried.isEmpty {
                // The audible profile needs the lowest rate: its error says what is wrong with this one.
                try validate(sampleRate: rate, for: .audible)
                throw .invalidSampleRate(rate)
            }
            for mask in 1..<(1 << carried.count) {
                sets.append((rate, carried.indices.filter { mask & (1 << $0) != 0 }.map { carried[$0] }))
            }
        }
        FFTWisdom.measuring {
            // Every rate carries its profiles: these decoders cannot fail.
            for (rate, profiles) in sets { _ = try? StreamingDecoder(sampleRate: rate, profiles: profiles) }
        }
        return FFTWisdom.exported()
    }
}
#endif
