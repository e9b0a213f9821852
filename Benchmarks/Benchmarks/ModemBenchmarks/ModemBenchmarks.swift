import Benchmark
import Foundation
import SottoAudio
import SottoChannel
import SottoDSP
import SottoModem

/// Ten seconds of 48 kHz audio: a few 8-byte frames in white noise at 0 dB SNR (seeded).
let tenSeconds: [Float] = {
    var state: UInt64 = 42
    func gaussian() -> Float {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        let u1 = max(Double(state >> 11) / Double(1 << 53), 1e-12)
        state = state &* 6364136223846793005 &+ 1442695040888963407
        let u2 = Double(state >> 11) / Double(1 << 53)
        return Float((-2 * log(u1)).squareRoot() * cos(2 * .pi * u2))
    }
    let modulator = try! Modulator()
    var x = (0..<480_000).map { _ in 0.35 * gaussian() }
    for (i, start) in [24_000, 168_000, 312_000].enumerated() {
        let burst = try! modulator.modulate([UInt8](repeating: UInt8(i), count: 8))
        for (j, s) in burst.enumerated() { x[start + j] += s }
    }
    return x
}()

/// The same ten seconds without the frames.
let tenSecondsOfNoise: [Float] = {
    var state: UInt64 = 7
    return (0..<480_000).map { _ in
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Float(Int64(bitPattern: state) >> 40) / Float(1 << 23) * 0.6
    }
}()

/// The first 0.1 s of `tenSecondsOfNoise`.
let tenthOfASecondOfNoise = Array(tenSecondsOfNoise[0..<4_800])

/// The repository's Fixtures directory (../Fixtures from this package).
let fixturesDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures")

/// The first channel of a 48 kHz fixture (`name` relative to `fixturesDirectory`), or nil.
func fixture48k(_ name: String) -> [Float]? {
    guard let (samples, info) = try? AudioFile.read(path: fixturesDirectory.appendingPathComponent(name).path, channel: .channel(0)),
          info.sampleRate == 48_000 else { return nil }
    return samples
}

/// Fixture recordings (../Fixtures), when present.
let fixtures: [[Float]] = {
    let files = FileManager.default.enumerator(atPath: fixturesDirectory.path)?.compactMap { $0 as? String }.filter { $0.hasSuffix(".wav") }.sorted() ?? []
    return files.compactMap(fixture48k)
}()

/// The measured far living room fixture (../Fixtures/rooms): two 8-byte frames of the default profile that the
/// tone metric fails at their length and the coherent detector decodes (a room fit, its candidate tables and
/// the sequence decisions each), then 2 s of silence in which both complete; nil when the fixture is missing.
let coherentFrames: [Float]? = fixture48k("rooms/livingroom_far_arroyo-default.wav").map { $0 + [Float](repeating: 0, count: 96_000) }

/// Streams `signal` through a decoder in 4096-sample chunks, as a file reader or a device would.
func stream(_ signal: [Float], profiles: [Profile]) -> Int {
    stream(signal, through: try! StreamingDecoder(sampleRate: 48_000, profiles: profiles))
}

/// Streams `signal` through `decoder` in 4096-sample chunks.
func stream(_ signal: [Float], through decoder: StreamingDecoder) -> Int {
    var frames = 0
    signal.withUnsafeBufferPointer { all in
        var offset = 0
        while offset < all.count {
            let n = min(4096, all.count - offset)
            frames += decoder.process(UnsafeBufferPointer(rebasing: all[offset..<(offset + n)])).count
            offset += n
        }
    }
    return frames
}

/// The profile sets the decoder benchmarks listen with.
let profileSets: [(name: String, profiles: [Profile])] = [("default profile", [.standard]), ("all four profiles", Profile.all)]

/// Audio after a frame's last sample until a decoder fed 1024-sample periods reports it (ms), for `trials`
/// frames of each profile and 1-, 8- and 16-byte tokens in white noise at 0 dB SNR (seeded), sorted: what
/// `sotto bench sweep latency --profiles all --lengths 1,8,16` measures.
func reportLatencies(trials: Int) -> [Double] {
    var random = SeededRandom(seed: 37)
    var latencies: [Double] = []
    for profile in Profile.all {
        let modulator = try! Modulator(profile: profile, sampleRate: 48_000)
        for bytes in [1, 8, 16] {
            for _ in 0..<trials {
                let token = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) }
                let burst = try! modulator.modulate(token)
                let lead = Int.random(in: 0..<48_000, using: &random)
                var x = [Float](repeating: 0, count: lead) + burst + [Float](repeating: 0, count: 48_000)
                Channel.addWhiteNoise(&x, snrDB: 0, signalPower: Double(modulator.amplitude * modulator.amplitude) / 2, rng: &random)
                let decoder = try! StreamingDecoder(sampleRate: 48_000, profiles: [profile], lowLatency: true)
                var offset = 0
                search: while offset < x.count {
                    let n = min(1024, x.count - offset)
                    let frames = x.withUnsafeBufferPointer { decoder.process(UnsafeBufferPointer(rebasing: $0[offset..<(offset + n)])) }
                    offset += n
                    if frames.contains(where: { $0.token == token }) {
                        latencies.append(1000 * Double(offset - lead - burst.count) / 48_000)
                        break search
                    }
                }
            }
        }
    }
    return latencies.sorted()
}

/// Frames of the default profile lost in the reverberant hall of the receiver issue (`sotto bench sweep
/// hall`: a 20 x 12 x 6 m shoebox, RT60 0.9 s, image sources, 5 m from the speaker, white noise over the
/// whole band at `hallSNR` against the direct sound), `trials` frames of each of 4, 8 and 16 bytes (seeded),
/// and the frames reported that were not the token sent.
func hallLosses(trials: Int) -> (lost: Int, falseTokens: Int) {
    var random = SeededRandom(seed: 37)
    let modulator = try! Modulator(profile: .standard, sampleRate: 48_000)
    var lost = 0, falseTokens = 0
    for bytes in [4, 8, 16] {
        for _ in 0..<trials {
            let room = ShoeboxRoom.random(size: ShoeboxRoom.hallSize, rt60: ShoeboxRoom.hallRT60, distance: 5, rng: &random)
            let token = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) }
            let lead = Int.random(in: 4_800...14_400, using: &random)
            let x = [Float](repeating: 0, count: lead) + (try! modulator.modulate(token)) + [Float](repeating: 0, count: 9_600)
            var y = try! fftConvolve(x, room.impulseResponse(sampleRate: 48_000))
            Channel.addWhiteNoise(&y, snrDB: hallSNR, signalPower: Double(modulator.amplitude * modulator.amplitude) / 2, rng: &random)
            let frames = try! StreamingDecoder.decode(y, sampleRate: 48_000, profiles: [.standard])
            let hits = frames.filter { $0.token == token }.count
            if hits != 1 || frames.count != 1 { lost += 1 }
            falseTokens += frames.count - min(hits, 1)
        }
    }
    return (lost, falseTokens)
}

/// Full-band SNR (dB) of the hall benchmark against the direct sound (as `sotto bench sweep hall`).
let hallSNR = -10.0

/// Custom metrics: report latency (median and maximum, ms) and frames lost or false in the hall.
let latencyMedian = BenchmarkMetric.custom("reportLatencyMedianMs")
let latencyMaximum = BenchmarkMetric.custom("reportLatencyMaximumMs")
let hallFramesLost = BenchmarkMetric.custom("hallFramesLost")
let hallFalseTokens = BenchmarkMetric.custom("hallFalseTokens")

let benchmarks: @Sendable () -> Void = {
    let metrics: [BenchmarkMetric] = [.wallClock, .cpuTotal, .throughput, .mallocCountTotal, .peakMemoryResident]
    // What `scripts/check-benchmarks` lets the p90 of each metric move from the committed thresholds
    // (Benchmarks/Thresholds/: wall clock, allocations and resident memory; CPU time is left out, the
    // benchmark reads it in 10 ms steps) before it calls it a regression: wall clock by a third (a shared
    // 2-core machine varies that much between runs), memory by a fifth, allocations by 2 % or by 5, whichever
    // is more (`typicalMallocs`, about what the benchmark makes): the harness itself makes a few more or fewer
    // from run to run (35 or 37 for the encoder, 16 to 20 for a running decoder on noise).
    func tolerances(typicalMallocs: Int) -> [BenchmarkMetric: BenchmarkThresholds] {
        let timeTolerance = BenchmarkThresholds(relative: [.p90: 33])
        return [
            .mallocCountTotal: BenchmarkThresholds(relative: [.p90: max(2, 100 * 5 / Double(typicalMallocs))]),
            .peakMemoryResident: BenchmarkThresholds(relative: [.p90: 20]),
            .wallClock: timeTolerance, .cpuTotal: timeTolerance, .throughput: timeTolerance,
        ]
    }
    func memoryTolerances(typicalMallocs: Int) -> [BenchmarkMetric: BenchmarkThresholds] {
        tolerances(typicalMallocs: typicalMallocs).filter { $0.key == .mallocCountTotal || $0.key == .peakMemoryResident }
    }

    // One iteration = 10 s of audio: throughput x 10 is seconds of audio per second.
    Benchmark("Decoder, default profile, 10 s of 48 kHz noise, no frames",
              configuration: .init(metrics: metrics, maxDuration: .seconds(5), thresholds: tolerances(typicalMallocs: 335))) { benchmark in
        blackHole(stream(tenSecondsOfNoise, profiles: [.standard]))
    }

    // The noise-only figure with every profile listening (one FFT per block for all bands).
    Benchmark("Decoder, all four profiles, 10 s of 48 kHz noise, no frames",
              configuration: .init(metrics: metrics, maxDuration: .seconds(5), thresholds: tolerances(typicalMallocs: 930))) { benchmark in
        blackHole(stream(tenSecondsOfNoise, profiles: Profile.all))
    }

    Benchmark("Decoder, default profile, 10 s of 48 kHz audio",
              configuration: .init(metrics: metrics, maxDuration: .seconds(5), thresholds: tolerances(typicalMallocs: 415))) { benchmark in
        blackHole(stream(tenSeconds, profiles: [.standard]))
    }

    Benchmark("Decoder, all four profiles, 10 s of 48 kHz audio",
              configuration: .init(metrics: metrics, maxDuration: .seconds(5), thresholds: tolerances(typicalMallocs: 1_025))) { benchmark in
        blackHole(stream(tenSeconds, profiles: Profile.all))
    }

    // What a program pays before its first samples (`sotto decode` once per file, the C and Python bindings once
    // per recording): a decoder for all four profiles made (its filters, correlators, tables and FFT plans) and
    // fed 0.1 s. Issue 37 asks for under 5 ms.
    Benchmark("Decoder ready, all four profiles, made and fed 0.1 s of 48 kHz noise",
              configuration: .init(metrics: metrics, maxDuration: .seconds(3), thresholds: tolerances(typicalMallocs: 800))) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(stream(tenthOfASecondOfNoise, profiles: Profile.all)) }
    }

    // A listener's cost: the same ten seconds through a decoder that is already running (made, and fed the
    // ten seconds once, outside the measurement), where the benchmarks above make a decoder for every ten
    // seconds (its filters, correlators and FFT plans) as `sotto decode` does once per file.
    for (name, signal, framed) in [("noise, no frames", tenSecondsOfNoise, false), ("audio", tenSeconds, true)] {
        for (profilesName, profiles) in profileSets {
            let typicalMallocs = !framed ? 18 : profiles.count == 1 ? 27 : 70
            Benchmark("Running decoder, \(profilesName), 10 s of 48 kHz \(name)",
                      configuration: .init(metrics: metrics, maxDuration: .seconds(5),
                                           thresholds: tolerances(typicalMallocs: typicalMallocs))) { benchmark in
                let decoder = try! StreamingDecoder(sampleRate: 48_000, profiles: profiles)
                blackHole(stream(signal, through: decoder))
                benchmark.startMeasurement()
                blackHole(stream(signal, through: decoder))
                benchmark.stopMeasurement()
            }
        }
    }

    // The "a frame that needs the coherent path": per frame, half of one iteration. The decoder runs
    // already (made, and fed the recording once outside the measurement: the candidate shapes are built once
    // per process), so an iteration is what a listener pays for two such frames, the 5.7 s of audio around
    // them included.
    if let coherentFrames {
        for (profilesName, profiles) in profileSets {
            Benchmark("Running decoder, \(profilesName), 2 frames that need the coherent path",
                      configuration: .init(metrics: metrics, maxDuration: .seconds(5),
                                           thresholds: tolerances(typicalMallocs: profiles.count == 1 ? 150 : 300))) { benchmark in
                let decoder = try! StreamingDecoder(sampleRate: 48_000, profiles: profiles)
                precondition(stream(coherentFrames, through: decoder) == 2)
                benchmark.startMeasurement()
                let frames = stream(coherentFrames, through: decoder)
                benchmark.stopMeasurement()
                precondition(frames == 2, "the coherent benchmark's recording decoded \(frames) frames, not 2")
            }
        }
    }

    Benchmark("Decoder, every 48 kHz fixture, all profiles",
              configuration: .init(metrics: metrics, maxDuration: .seconds(5), thresholds: tolerances(typicalMallocs: 27_000))) { benchmark in
        for fixture in fixtures { blackHole(stream(fixture, profiles: Profile.all)) }
    }

    // Not speed: what a listener waits for a frame (median under 50 ms, LiveAudio.md), and the hall's frames
    // (all decoded), so that a receiver change cannot lose either silently. Both seeded: the same build gives
    // the same figures; a change of 10 ms in the median or 40 in the maximum, or one frame lost, fails.
    Benchmark("Report latency, all four profiles, 1, 8 and 16 bytes, 1024-sample periods",
              configuration: .init(metrics: [latencyMedian, latencyMaximum], maxIterations: 1,
                                   thresholds: [latencyMedian: BenchmarkThresholds(absolute: [.p90: 10]),
                                                latencyMaximum: BenchmarkThresholds(absolute: [.p90: 40])])) { benchmark in
        let latencies = reportLatencies(trials: 20)
        benchmark.measurement(latencyMedian, Int(latencies[latencies.count / 2].rounded()))
        benchmark.measurement(latencyMaximum, Int(latencies.last!.rounded()))
    }

    Benchmark("Hall 20 x 12 x 6 m, RT60 0.9 s, 5 m, default profile, 4, 8 and 16 bytes",
              configuration: .init(metrics: [hallFramesLost, hallFalseTokens], maxIterations: 1,
                                   thresholds: [hallFramesLost: BenchmarkThresholds(absolute: [.p90: 0]),
                                                hallFalseTokens: BenchmarkThresholds(absolute: [.p90: 0])])) { benchmark in
        let hall = hallLosses(trials: 20)
        benchmark.measurement(hallFramesLost, hall.lost)
        benchmark.measurement(hallFalseTokens, hall.falseTokens)
    }

    Benchmark("Encoder, 8-byte token, default profile, 48 kHz",
              configuration: .init(metrics: metrics, maxDuration: .seconds(3), thresholds: tolerances(typicalMallocs: 35))) { benchmark in
        let modulator = try! Modulator()
        for i in benchmark.scaledIterations { blackHole(try! modulator.modulate([UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 8))) }
    }

    // Memory must not grow with the length of the stream: compare peak resident memory of 1 and 10 minutes.
    for minutes in [1, 10] {
        Benchmark("Decoder memory, \(minutes) min of noise, default profile",
                  configuration: .init(metrics: [.peakMemoryResident, .mallocCountTotal], maxIterations: 1, thresholds: memoryTolerances(typicalMallocs: 450 * minutes))) { benchmark in
            let decoder = try! StreamingDecoder(sampleRate: 48_000)
            var frames = 0
            for _ in 0..<(minutes * 6) {
                frames += decoder.process(tenSeconds).count
            }
            blackHole(frames)
        }
    }
}
