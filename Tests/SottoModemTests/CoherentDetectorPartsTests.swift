import Foundation
import SottoDSP
import Testing
@testable import SottoModem

/// The coherent detector's parts on their own: the candidate shapes, the room estimator and the sequence
/// decision, on a frame synthesised directly on the detector's grid.
@Suite struct CoherentDetectorPartsTests {
    /// The receiver's baseband rate and centre for a profile at 48 kHz.
    static func detector(_ profile: Profile) -> CoherentDetector {
        let receiver = FrameReceiver(profile: profile, sampleRate: 48_000)
        return CoherentDetector(profile: profile, basebandRate: receiver.basebandRate,
                                centerFrequency: receiver.decimator.centerFrequency)
    }

    @Test func candidateShapesAreBuiltOncePerProfileAndRate() {
        let first = Self.detector(.standard), second = Self.detector(.standard)
        #expect(first.shapes === second.shapes)
        #expect(Self.detector(.fast).shapes !== first.shapes)
        let other = CandidateShapes.shared(profile: .standard, basebandRate: first.shapes.basebandRate * 2,
                                           centerFrequency: first.shapes.centerFrequency)
        #expect(other !== first.shapes && other.samplesPerSymbol > first.shapes.samplesPerSymbol)
    }

    /// Every part-2 shape (and every part-1 shape after a data symbol) is a unit-magnitude phase shape of
    /// the segment's length.
    @Test(arguments: Profile.all)
    func candidateShapesHaveTheSegmentGeometry(profile: Profile) {
        let shapes = Self.detector(profile).shapes
        #expect(shapes.shapes1.count == profile.subBands && shapes.shapes2.count == profile.subBands)
        for parity in 0..<profile.subBands {
            #expect(shapes.shapes1[parity].count == 17 * 16 && shapes.shapes2[parity].count == 256)
            var deviation: Float = 0
            for shape in shapes.shapes1[parity].prefix(256) + shapes.shapes2[parity] {
                for i in stride(from: 0, to: shape.count, by: 2) {
                    deviation = max(deviation, abs(shape[i] * shape[i] + shape[i + 1] * shape[i + 1] - 1))
                }
            }
            #expect(deviation < 1e-4)
            #expect(shapes.shapes2[parity][0].count == 2 * (shapes.segmentLength - shapes.segmentSplit))
        }
        #expect(shapes.channelTaps > shapes.precursorTaps && shapes.knownPreamble < shapes.preambleLength)
    }

    /// A transmitted frame on the grid: the preamble, then each symbol's first `samplesPerSymbol` samples
    /// of its candidate segment, as the sequence decision commits them.
    static func transmitted(_ shapes: CandidateShapes, values: [Int]) -> [Float] {
        let profile = shapes.profile
        var sent = [Float](repeating: 0, count: 2 * (shapes.preambleLength + (values.count + 1) * shapes.samplesPerSymbol))
        for m in 0..<shapes.knownPreamble {
            sent[2 * m] = shapes.preambleReal[m]; sent[2 * m + 1] = shapes.preambleImaginary[m]
        }
        var phase = shapes.dataStartPhase
        for k in 0..<(values.count - 1) {
            let parity = k % profile.subBands
            let previous = k == 0 ? 16 : values[k - 1], a = values[k], b = values[k + 1]
            let shape1 = shapes.shapes1[parity][previous * 16 + a], shape2 = shapes.shapes2[parity][a * 16 + b]
            let segmentStart = shapes.preambleLength + k * shapes.samplesPerSymbol - shapes.guardSamples
            let (c, s) = (Float(cos(phase)), Float(sin(phase)))
            for i in 0..<shapes.samplesPerSymbol {
                let (xr, xi) = i < shapes.segmentSplit
                    ? (shape1[2 * i], shape1[2 * i + 1])
                    : (shape2[2 * (i - shapes.segmentSplit)], shape2[2 * (i - shapes.segmentSplit) + 1])
                sent[2 * (segmentStart + i)] = c * xr - s * xi
                sent[2 * (segmentStart + i) + 1] = c * xi + s * xr
            }
            phase += 2 * Double.pi * shapes.toneOffset(k, a) * profile.symbolTime
            phase = phase.remainder(dividingBy: 2 * Double.pi)
        }
        return sent
    }

    /// A room of two arrivals: the direct sound at the detected start and a reflection `delay` grid
    /// samples later, `gain` (complex) times as strong.
    static let reflectionDelay = 23
    static let reflection = (re: Float(0.5), im: Float(-0.4))

    /// A frame: `sent` through the two-arrival room, written to the frame's grid.
    static func frame(_ detector: CoherentDetector, sent: [Float]) -> CoherentDetector.Frame {
        let frame = detector.makeFrame(start: 0, scale: 1, noiseVariance: 1e-8)
        var grid = [Float](repeating: 0, count: sent.count + 2 * frame.origin + 2 * reflectionDelay)
        for m in 0..<(sent.count / 2) {
            let (xr, xi) = (sent[2 * m], sent[2 * m + 1])
            grid[2 * (m + frame.origin)] += xr
            grid[2 * (m + frame.origin) + 1] += xi
            let late = 2 * (m + reflectionDelay + frame.origin)
            grid[late] += reflection.re * xr - reflection.im * xi
            grid[late + 1] += reflection.re * xi + reflection.im * xr
        }
        frame.grid = grid
        return frame
    }

    @Test(arguments: [Profile.standard, .robust])
    func roomEstimatorRecoversAKnownRoomFromThePreamble(profile: Profile) {
        let detector = Self.detector(profile)
        let shapes = detector.shapes
        let frame = Self.frame(detector, sent: Self.transmitted(shapes, values: Array(repeating: 3, count: 8)))
        #expect(detector.estimator.estimate(frame))
        let pre = shapes.precursorTaps
        #expect(frame.channel.count == 2 * shapes.channelTaps)
        #expect(abs(frame.channel[2 * pre] - 1) < 0.05 && abs(frame.channel[2 * pre + 1]) < 0.05)
        let late = 2 * (pre + Self.reflectionDelay)
        #expect(abs(frame.channel[late] - Self.reflection.re) < 0.05 && abs(frame.channel[late + 1] - Self.reflection.im) < 0.05)
        var elsewhere: Float = 0
        for l in 0..<shapes.channelTaps where l != pre && l != pre + Self.reflectionDelay {
            elsewhere = max(elsewhere, frame.channel[2 * l] * frame.channel[2 * l] + frame.channel[2 * l + 1] * frame.channel[2 * l + 1])
        }
        #expect(elsewhere < 0.01)
        #expect(frame.unexplained < 0.01)
    }

    /// Noise only (no preamble in the grid): the room model explains nothing and the estimator refuses.
    @Test func roomEstimatorRefusesAGridWithoutThePreamble() {
        let detector = Self.detector(.standard)
        // Uniform noise in (-0.5, 0.5) per part: complex variance 1/6.
        let frame = detector.makeFrame(start: 0, scale: 1, noiseVariance: 1.0 / 6)
        var state: UInt64 = 7
        frame.grid = (0..<(2 * (detector.shapes.preambleLength + 64 * detector.shapes.samplesPerSymbol))).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Float(Double(state >> 11) / Double(1 << 53) - 0.5)
        }
        #expect(!detector.estimator.estimate(frame))
        #expect(frame.unexplained > RoomEstimator.maximumUnexplained)
    }

    @Test(arguments: Profile.all)
    func sequenceDecisionPicksTheSentSymbolsThroughTheRoom(profile: Profile) {
        let detector = Self.detector(profile)
        let values = (0..<24).map { ($0 * 7 + 3) % 16 }
        let frame = Self.frame(detector, sent: Self.transmitted(detector.shapes, values: values + [5, 9, 1, 12, 0, 4]))
        #expect(detector.estimator.estimate(frame))
        for _ in values { detector.decision.decideNext(frame) }
        #expect(frame.decided == values)
        // The winner's cost is the smallest of its symbol's 16 by a margin.
        for k in values.indices {
            let costs = frame.costs[16 * k..<16 * k + 16]
            #expect(costs.min() == costs[16 * k + values[k]])
        }
    }
}
