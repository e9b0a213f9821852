import SottoCodes

/// The buffers a receiver's decoding path reuses for every attempt: each detection tries up to 16 payload
/// lengths, each with the tone metric and the frame codec (and the coherent detector's likelihoods in
/// rooms), and every attempt allocated its arrays (about 300 mallocs per detection). Sized once for the
/// profile's longest frame, so an attempt that does not decode a frame allocates nothing. One per
/// receiver, passed `inout`; the arrays are written through `withUnsafeMutableBufferPointer` in hot loops.
struct DecodeWorkspace {
    /// Per-symbol log-likelihoods of the 16 values (16 per symbol, row-major): the tone metric's output.
    var likelihoods: [Float]
    /// The tone metric's scratch: the energies of each symbol's sub-band (16 per symbol), the modelled
    /// tail variance of each (16 per symbol), each symbol's strongest tone, and per tone of the profile its
    /// signal sum, number of uses and amplitude.
    var used: [Float]
    var variance: [Float]
    var strongest: [Int]
    var toneSignal: [Double]
    var toneUses: [Double]
    var toneAmplitude: [Float]
    /// The frame codec's scratch: bit LLRs in transmission order (4 per symbol), the same in code order
    /// (deinterleaved and descrambled), and the plain Viterbi path's message bits.
    var llrs: [Float]
    var coded: [Float]
    var message: [UInt8]
    /// The plain Viterbi decoder, with its trellis; the list decoder (nearly right headers), with its own.
    var viterbi = ViterbiDecoder(code: FrameFormat.code)
    var list = ListViterbiDecoder(code: FrameFormat.code)
    /// A list candidate packed into bytes (header, payload, CRC), and re-encoded to count the coded bits it
    /// corrects.
    var messageBytes: [UInt8]
    var recoded: [UInt8]
    /// A decoded frame's symbols (re-encoded) and the tone energies of the noise before it, for its SNR.
    var symbolValues: [Int]
    var noiseProbe: [Float]

    /// Buffers for frames of `profile` up to the longest payload.
    init(profile: Profile) {
        let longest = FrameFormat.payloadBytes.upperBound
        let symbols = FrameFormat.symbolCount(payloadBytes: longest)
        likelihoods = [Float](repeating: 0, count: 16 * symbols)
        used = likelihoods
        variance = likelihoods
        strongest = [Int](repeating: 0, count: symbols)
        toneSignal = [Double](repeating: 0, count: profile.toneCount)
        toneUses = toneSignal
        toneAmplitude = [Float](repeating: 0, count: profile.toneCount)
        llrs = [Float](repeating: 0, count: 4 * symbols)
        coded = [Float](repeating: 0, count: FrameFormat.codedBitCount(payloadBytes: longest))
        message = [UInt8](repeating: 0, count: FrameFormat.messageBitCount(payloadBytes: longest))
        messageBytes = [UInt8](repeating: 0, count: FrameFormat.messageBitCount(payloadBytes: longest) / 8)
        recoded = [UInt8](repeating: 0, count: FrameFormat.codedBitCount(payloadBytes: longest))
        symbolValues = [Int](repeating: 0, count: symbols)
        noiseProbe = []
        noiseProbe.reserveCapacity(profile.toneCount * SignalReport.noiseProbeWindows)
    }

    /// The tone metric's buffers, as pointers valid during one call of `withToneMetricScratch`.
    struct ToneMetricScratch {
        let likelihoods: UnsafeMutablePointer<Float>
        let used: UnsafeMutablePointer<Float>
        let variance: UnsafeMutablePointer<Float>
        let strongest: UnsafeMutablePointer<Int>
        let toneSignal: UnsafeMutablePointer<Double>
        let toneUses: UnsafeMutablePointer<Double>
        let toneAmplitude: UnsafeMutablePointer<Float>
    }

    /// Calls `body` with the tone metric's buffers.
    mutating func withToneMetricScratch<Result>(_ body: (ToneMetricScratch) -> Result) -> Result {
        likelihoods.withUnsafeMutableBufferPointer { likelihoods in
            used.withUnsafeMutableBufferPointer { used in
                variance.withUnsafeMutableBufferPointer { variance in
                    strongest.withUnsafeMutableBufferPointer { strongest in
                        toneSignal.withUnsafeMutableBufferPointer { toneSignal in
                            toneUses.withUnsafeMutableBufferPointer { toneUses in
                                toneAmplitude.withUnsafeMutableBufferPointer { toneAmplitude in
                                    body(ToneMetricScratch(
                                        likelihoods: likelihoods.baseAddress!, used: used.baseAddress!,
                                        variance: variance.baseAddress!, strongest: strongest.baseAddress!,
                                        toneSignal: toneSignal.baseAddress!, toneUses: toneUses.baseAddress!,
                                        toneAmplitude: toneAmplitude.baseAddress!))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
