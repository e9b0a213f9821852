import Foundation
import SottoChannel
import SottoCodes
import SottoDSP
import Testing
@testable import SottoModem

/// The receiver's stages on their own.
@Suite struct ReceiverStageTests {
    // MARK: Candidate state machine

    @Test func candidateTriesEveryLengthWithBothDetectorsThenDrops() {
        var machine = CandidateStateMachine()
        var actions: [CandidateStateMachine.Action] = [machine.action]
        while machine.action != .drop { actions.append(machine.step(decoded: false)) }
        #expect(actions.count == 2 * FrameFormat.payloadBytes.count + 1)
        #expect(actions.prefix(4) == [.decodeWithToneMetric(payloadBytes: 1), .decodeWithRoomModel(payloadBytes: 1),
                                      .decodeWithToneMetric(payloadBytes: 2), .decodeWithRoomModel(payloadBytes: 2)])
        #expect(actions.suffix(2) == [.decodeWithRoomModel(payloadBytes: 16), .drop])
        #expect(machine.step(decoded: true) == .drop && machine.state == .finished)
    }

    /// A dry frame (no reverberant tail measured) is not worth the room model: lengths go by with the tone
    /// metric alone.
    @Test func dryCandidateSkipsTheRoomModel() {
        var machine = CandidateStateMachine()
        #expect(machine.step(decoded: false, reverberant: false) == .decodeWithToneMetric(payloadBytes: 2))
        #expect(machine.step(decoded: false, reverberant: true) == .decodeWithRoomModel(payloadBytes: 2))
        #expect(machine.step(decoded: false) == .decodeWithToneMetric(payloadBytes: 3))
        var steps = 0
        while machine.action != .drop { _ = machine.step(decoded: false, reverberant: false); steps += 1 }
        #expect(steps == 14)
    }

    /// A coherent decode whose header came close gets the room fitted again at the same length, within the
    /// candidate's budget of second fits; a far header, or a spent budget, moves on to the next length.
    @Test func nearlyRightCoherentDecodeIsRefinedWithinItsBudget() {
        var machine = CandidateStateMachine()
        #expect(machine.step(decoded: false) == .decodeWithRoomModel(payloadBytes: 1))
        #expect(machine.step(.init(decoded: false, nearlyRight: false, refinementLimit: 8)) == .decodeWithToneMetric(payloadBytes: 2))
        _ = machine.step(decoded: false)
        let close = CandidateStateMachine.Outcome(decoded: false, nearlyRight: true, refinementLimit: 1)
        #expect(machine.step(close) == .refineRoomModel(payloadBytes: 2))
        #expect(machine.usesRoomModel && machine.payloadBytes == 2 && machine.refinements == 1)
        #expect(machine.step(decoded: false) == .decodeWithToneMetric(payloadBytes: 3))
        #expect(!machine.usesRoomModel)
        _ = machine.step(decoded: false)
        // The budget of one is spent.
        #expect(machine.step(close) == .decodeWithToneMetric(payloadBytes: 4))
        _ = machine.step(decoded: false)
        #expect(machine.step(.init(decoded: false, nearlyRight: true, refinementLimit: 2)) == .refineRoomModel(payloadBytes: 4))
        #expect(machine.step(decoded: true) == .drop && machine.refinements == 2)
        // The longest length's refinement is the last action.
        var last = CandidateStateMachine()
        while last.payloadBytes != 16 || !last.usesRoomModel { _ = last.step(decoded: false) }
        #expect(last.step(close) == .refineRoomModel(payloadBytes: 16))
        #expect(last.step(decoded: false) == .drop)
    }

    /// In a long room the second pass decides the frame again from the code's decision instead of fitting the
    /// room again; it takes the same budget.
    @Test func aLongRoomsSecondPassIsTheFeedbackRedecision() {
        var machine = CandidateStateMachine()
        _ = machine.step(decoded: false)
        let closeInALongRoom = CandidateStateMachine.Outcome(decoded: false, nearlyRight: true, refinementLimit: 2, longRoom: true)
        #expect(machine.step(closeInALongRoom) == .redecideWithFeedback(payloadBytes: 1))
        #expect(machine.usesRoomModel && machine.payloadBytes == 1 && machine.refinements == 1)
        #expect(machine.step(decoded: false) == .decodeWithToneMetric(payloadBytes: 2))
        _ = machine.step(decoded: false)
        #expect(machine.step(closeInALongRoom) == .redecideWithFeedback(payloadBytes: 2))
        #expect(machine.step(decoded: true) == .drop)
    }

    /// Every length failed at the estimated time scale: the preamble is tried again at scale 1 when the receiver
    /// says a retry is possible, and dropped otherwise; a decode never retries.
    @Test func aCandidateThatDecodedNothingRetriesAtUnitScaleWhenItMay() {
        let mayRetry = CandidateStateMachine.Outcome(decoded: false, reverberant: false, canRetryAtUnitScale: true)
        var machine = CandidateStateMachine()
        while machine.payloadBytes != 16 { _ = machine.step(mayRetry) }
        #expect(machine.step(mayRetry) == .restartAtUnitScale && machine.payloadBytes == nil && !machine.usesRoomModel)
        var without = CandidateStateMachine()
        while without.action != .drop { _ = without.step(decoded: false, reverberant: false) }
        #expect(without.state == .finished)
        var decodedLast = CandidateStateMachine()
        while decodedLast.payloadBytes != 16 { _ = decodedLast.step(mayRetry) }
        #expect(decodedLast.step(.init(decoded: true, canRetryAtUnitScale: true)) == .drop)
        // An alias frame's one attempt retries too when it may.
        var alias = CandidateStateMachine(alias: true)
        #expect(alias.step(mayRetry) == .restartAtUnitScale)
    }

    /// A candidate is given up (without a retry) when its samples are gone or it lies inside another profile's
    /// frame; a far better match still on the air stops the tone metric of a token frame only.
    @Test func aCandidateIsGivenUpWhenItsSamplesAreGoneOrAnotherFrameHoldsIt() {
        var gone = CandidateStateMachine()
        #expect(gone.check(.init(samplesGone: true)) == .drop)
        var inside = CandidateStateMachine()
        _ = inside.step(decoded: false)
        #expect(inside.check(.init(insideOtherFrame: true)) == .drop)
        var clear = CandidateStateMachine()
        #expect(clear.check(.init()) == .decodeWithToneMetric(payloadBytes: 1))
        var dominated = CandidateStateMachine()
        #expect(dominated.yieldsToDominantFrames && dominated.check(.init(underDominantFrame: true)) == .drop)
        var roomModel = CandidateStateMachine()
        _ = roomModel.step(decoded: false)
        #expect(!roomModel.yieldsToDominantFrames)
        #expect(roomModel.check(.init(underDominantFrame: true)) == .decodeWithRoomModel(payloadBytes: 1))
        var alias = CandidateStateMachine(alias: true)
        #expect(!alias.yieldsToDominantFrames && alias.check(.init(underDominantFrame: true)) == .decodeWithToneMetric(payloadBytes: 1))
    }

    @Test func candidateStopsAtTheFirstDecode() {
        var toneMetric = CandidateStateMachine()
        #expect(toneMetric.step(decoded: true) == .drop)
        var roomModel = CandidateStateMachine()
        _ = roomModel.step(decoded: false)
        _ = roomModel.step(decoded: false)
        #expect(roomModel.state == .toneMetric(payloadBytes: 2))
        _ = roomModel.step(decoded: false)
        #expect(roomModel.step(decoded: true) == .drop && roomModel.payloadBytes == nil)
        var abandoned = CandidateStateMachine()
        #expect(abandoned.check(.init(samplesGone: true)) == .drop && abandoned.action == .drop)
    }

    // MARK: Baseband history

    @Test func historyWrapsAndKnowsWhatItHolds() {
        let history = BasebandHistory(minimumCapacity: 1500)
        #expect(history.capacity == 2048)
        let ones = [Float](repeating: 1, count: 1000), twos = [Float](repeating: 2, count: 1000)
        for block in [ones, twos, ones] {
            block.withUnsafeBufferPointer { re in twos.withUnsafeBufferPointer { im in history.append(real: re, imaginary: im) } }
        }
        #expect(history.count == 3000)
        // Positions 1000..<2000 hold (2, 2): power 8; 2000..<3000 hold (1, 2): power 5.
        #expect(abs(history.meanPower(from: 1500, length: 100) - 8) < 1e-9)
        #expect(abs(history.meanPower(from: 2500, length: 100) - 5) < 1e-9)
        // Held: the last capacity - 1 positions (one to spare).
        #expect(history.holds(954, at: 3000) && !history.holds(953, at: 3000))
    }

    /// Runs of any length, a run longer than the ring included, land where a sample-by-sample copy puts them.
    @Test func historyHoldsTheLastSamplesWhateverTheRuns() {
        let history = BasebandHistory(minimumCapacity: 1024)
        var rng = SplitMix64(seed: 7)
        var written = 0
        for run in [0, 1, 700, 1023, 1024, 1025, 3000, 5, 2048, 17] {
            let re = (0..<run).map { _ in Float(rng.nextUnitFloat()) }, im = re.map { -$0 }
            re.withUnsafeBufferPointer { r in im.withUnsafeBufferPointer { i in history.append(real: r, imaginary: i) } }
            written += run
            #expect(history.count == written)
            // The last min(run, capacity) samples of this run sit at their positions' slots.
            for k in max(0, run - history.capacity)..<run {
                let slot = (written - run + k) & history.mask
                #expect(history.real[slot] == re[k] && history.imaginary[slot] == im[k], "run \(run), sample \(k)")
            }
        }
    }

    // MARK: Symbol metric

    /// A tone at one of the profile's tones gives all its energy to that correlator, the same wherever
    /// the window falls between samples, and next to nothing to the others.
    @Test func toneEnergiesIntegrateBetweenSamples() {
        let profile = Profile.standard
        let rate = 3_692.0, center = 19_000.0
        let history = BasebandHistory(minimumCapacity: 4096)
        let tone = 5
        let f = profile.toneFrequency(tone) - center
        let re = (0..<2000).map { Float(cos(2 * .pi * f * Double($0) / rate)) }
        let im = (0..<2000).map { Float(sin(2 * .pi * f * Double($0) / rate)) }
        re.withUnsafeBufferPointer { r in im.withUnsafeBufferPointer { i in history.append(real: r, imaginary: i) } }
        let steps = (0..<profile.toneCount).map { t -> (Float, Float) in
            let step = -2 * Double.pi * (profile.toneFrequency(t) - center) / rate
            return (Float(cos(step)), Float(sin(step)))
        }
        let length = SymbolMetric.windowLength(symbolSamples: profile.symbolTime * rate)
        var energies: [Float] = []
        steps.withUnsafeBufferPointer { steps in
            for start in [500.0, 500.25, 500.5, 500.8] {
                SymbolMetric.appendToneEnergies(history, from: start, length: length, steps: steps, into: &energies)
            }
        }
        for w in 0..<4 {
            let row = energies[(16 * w)..<(16 * w + 16)]
            let peak = Double(row[16 * w + tone])
            #expect(abs(peak - length * length) / (length * length) < 0.01, "window \(w): \(peak)")
            for t in 0..<16 where t != tone { #expect(Double(row[16 * w + t]) < 0.01 * peak) }
        }
    }

    // MARK: Preamble detector

    /// A frame's preamble is detected where it starts, with its time scale (chirp-like stretches inside the
    /// frame may follow: the receiver drops those once the frame decodes); noise alone is not detected.
    @Test func detectsAPreambleAtItsStart() throws {
        let rate = 48_000.0
        let receiver = FrameReceiver(profile: .standard, sampleRate: rate)
        let burst = try Modulator(sampleRate: rate * (1 + 2e-3)).modulate([1, 2, 3, 4])
        var x = [Float](repeating: 0, count: 9_600) + burst + [Float](repeating: 0, count: 24_000)
        var noise = SeededRandom(seed: 3)
        for i in x.indices { x[i] += 0.01 * noise.sample() }
        let decimator = receiver.decimator
        let detector = receiver.preamble
        var detections: [PreambleDetection] = []
        x.withUnsafeBufferPointer { input in
            decimator.process(input) { re, im in
                receiver.frontEnd.append(real: re, imaginary: im)
                while let time = detector.nextPairingTime, time <= detector.horizon {
                    if let detection = detector.pairNext() { detections.append(detection) }
                }
            }
        }
        #expect(!detections.isEmpty)
        if let detection = detections.first {
            let startSeconds = detection.start / decimator.outputRate
            #expect(abs(startSeconds - 9_600 / rate) < 0.2e-3, "start \(startSeconds) s")
            #expect(abs(detection.scale - (1 + 2e-3)) < 150e-6, "scale \(detection.scale)")
        }
    }

    /// The up-chirp scan's skip finds the first position whose value is not at most the threshold (over it,
    /// or NaN), eight values at a time, as the one-value loop did: whatever the run's length, its start in the
    /// ring and its wrap, for every place of the value (none, in the vectorised part, in the tail) and for
    /// negative stream positions (the silence before the stream).
    @Test func upChirpScanFindsTheFirstValueOverTheThreshold() {
        let capacity = 64, mask = capacity - 1
        let ring = UnsafeMutableBufferPointer<Float>.allocate(capacity: capacity)
        defer { ring.deallocate() }
        var random = SplitMix64(seed: 5)
        func reference(_ start: Int, _ end: Int, _ threshold: Float) -> Int {
            var n = start
            while n < end && ring[n & mask] <= threshold { n += 1 }
            return n
        }
        var found = 0
        for trial in 0..<2_000 {
            for i in 0..<capacity { ring[i] = Float(random.next() % 1_000) / 1_000 }
            let threshold: Float = trial % 3 == 0 ? 0.999 : 1
            if trial % 5 == 0 { ring[Int(random.next() % UInt64(capacity))] = threshold }  // equal: not over
            if trial % 7 == 0 { ring[Int(random.next() % UInt64(capacity))] = .nan }
            if trial % 2 == 0 { ring[Int(random.next() % UInt64(capacity))] = 1.5 }
            let start = Int(random.next() % 200) - 100
            let end = start + Int(random.next() % UInt64(capacity))
            let expected = reference(start, end, threshold)
            if expected < end { found += 1 }
            #expect(PreambleDetector.firstPosition(in: ring, mask: mask, from: start, to: end, notAtMost: threshold) == expected,
                    "trial \(trial): \(start)..<\(end)")
        }
        #expect(found > 200 && found < 1_800, "both outcomes tried: \(found) of 2 000 found a value")
    }

    /// The down-chirp is correlated only in blocks that a followed or waiting up-chirp peak can read: every
    /// pairing comes out as when it is correlated everywhere, through frames near the threshold in noise
    /// (peaks over the threshold in most blocks, pairings on either side of block boundaries), for every
    /// profile.
    @Test(arguments: [Profile.standard, .fast, .robust, .audible])
    func downChirpOnlyNearPeaksPairsTheSame(profile: Profile) throws {
        let rate = 48_000.0
        let receiver = FrameReceiver(profile: profile, sampleRate: rate)
        let decimator = receiver.decimator, basebandRate = decimator.outputRate
        // Two detectors of the profile on one correlator (its chirps twice), as a front end shares one.
        let templates = PreambleDetector.templates(profile: profile, basebandRate: basebandRate,
                                                   centerFrequency: decimator.centerFrequency)
        let correlator = StreamingCorrelator(templates: templates + templates)
        let lead = PreambleDetector.leadPositions(basebandRate: basebandRate)
        let detectors = [true, false].enumerated().map { index, correlateEverywhere in
            var tuning = ReceiverTuning.standard
            tuning.correlatesDownChirpEverywhere = correlateEverywhere
            return PreambleDetector(profile: profile, basebandRate: basebandRate,
                                    noiseBandwidth: min(basebandRate, profile.highFrequency - profile.lowFrequency + 300),
                                    capacity: receiver.history.capacity, chirpLength: templates[0].real.count,
                                    upTemplate: 2 * index, lead: lead, tuning: tuning)
        }
        func correlate(_ re: UnsafeBufferPointer<Float>, _ im: UnsafeBufferPointer<Float>) {
            correlator.process(real: re, imaginary: im) { count, correlation in
                for detector in detectors { detector.take(count, correlation) }
            }
        }
        [Float](repeating: 0, count: lead).withUnsafeBufferPointer { correlate($0, $0) }
        let modulator = try Modulator(profile: profile, sampleRate: rate)
        var noise = SeededRandom(seed: 21)
        var x: [Float] = []
        for index in 0..<6 {
            // Gaps of different lengths, so the chirps fall at different places in the correlator's blocks.
            x += [Float](repeating: 0, count: 7_000 + 1_733 * index)
            x += try modulator.modulate([UInt8(index), 7, 9])
        }
        x += [Float](repeating: 0, count: 24_000)
        for i in x.indices { x[i] = 0.25 * x[i] + 0.2 * noise.sample() }
        var pairings: [[PreambleDetection?]] = [[], []]
        x.withUnsafeBufferPointer { input in
            decimator.process(input) { re, im in
                correlate(re, im)
                for (index, detector) in detectors.enumerated() {
                    while let time = detector.nextPairingTime, time <= detector.horizon {
                        pairings[index].append(detector.pairNext())
                    }
                }
            }
        }
        #expect(pairings[0].compactMap { $0 }.count >= 3, "too few detections to compare")
        #expect(pairings[0].count > pairings[0].compactMap { $0 }.count, "no rejected pairing to compare")
        #expect(pairings[0] == pairings[1])
    }

    @Test func noiseAloneIsNotAPreamble() {
        let receiver = FrameReceiver(profile: .standard, sampleRate: 48_000)
        var noise = SeededRandom(seed: 8)
        let x = (0..<96_000).map { _ in 0.3 * noise.sample() }
        var count = 0
        x.withUnsafeBufferPointer { input in
            receiver.decimator.process(input) { re, im in
                receiver.frontEnd.append(real: re, imaginary: im)
                while let time = receiver.preamble.nextPairingTime, time <= receiver.preamble.horizon {
                    if receiver.preamble.pairNext() != nil { count += 1 }
                }
            }
        }
        #expect(count == 0)
    }
}
