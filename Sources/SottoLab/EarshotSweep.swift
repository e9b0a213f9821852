import Foundation
import SottoTools
import SottoChannel
import SottoDSP
import SottoExchange
import SottoExchangeCore
import SottoModem

/// The earshot sweep: the receiver's in-band SNR of one frame against the true distance, in synthetic rooms
/// and behind the measured room responses, and the distance estimated from it (`AudioDistance`).
///
/// Level model: the nominal speaker (the modulator's default level) and a quiet room whose white noise puts
/// the direct sound at 1 m ``EarshotSweep/fullBandSNRAt1m`` dB above it (full band; about 31 dB in band).
/// The direct sound falls as 1 / distance and the room adds its diffuse sound (`Room`), as in `CrowdRoom`.
/// The frame follows 0.5 s of the same noise, so the receiver measures the noise before it.
public enum EarshotSweep {
    /// Full-band SNR (dB) of the direct sound at 1 m: `AudioDistance.referenceSNRAt1m` less the default
    /// profile's band gain at 48 kHz (11.2 dB).
    public static let fullBandSNRAt1m = 20.0
    /// Distances of the synthetic rooms (m).
    public static let distances: [Double] = [0.5, 1, 1.5, 2, 3, 4, 6, 8]
    /// The synthetic rooms: nil RT60 is a free field (direct sound only).
    public static let rooms: [(name: String, rt60: Double?, volume: Double)] = [
        ("free field", nil, 60), ("60 m3, RT60 0.3 s", 0.3, 60), ("60 m3, RT60 0.5 s", 0.5, 60), ("250 m3, RT60 0.5 s", 0.5, 250),
    ]
    /// Distances (m) at which the measured responses (normalised to their peak, the direct sound) are placed.
    public static let measuredDistances: [Double] = [1, 3]

    /// One frame's outcome.
    struct Trial: Sendable {
        var decoded: Bool
        /// Reported in-band SNR (dB) and level (dBFS); nil when not decoded.
        var snr: Double?
        var level: Double?
    }

    /// One frame of `profile` (8-byte token) through `response` (already scaled), with white noise at
    /// `noisePower` (mean square), decoded.
    static func trial(profile: Profile, response: [Float], noisePower: Double, rate: Double, random: inout SeededRandom) throws(FFTError) -> Trial {
        let token = (0..<8).map { _ in UInt8.random(in: 0...255, using: &random) }
        guard let frame = try decode(token, profile: profile, response: response, noisePower: noisePower, rate: rate, random: &random) else {
            return Trial(decoded: false)
        }
        return Trial(decoded: true, snr: frame.snr, level: frame.level)
    }

    static func decode(_ token: [UInt8], profile: Profile, response: [Float], noisePower: Double, rate: Double,
                       random: inout SeededRandom) throws(FFTError) -> DecodedFrame? {
        let modulator = try! Modulator(profile: profile, sampleRate: rate)
        let burst = try! modulator.modulate(token)
        let lead = Int(0.5 * rate)
        var x = try fftConvolve([Float](repeating: 0, count: lead) + burst + [Float](repeating: 0, count: Int(0.3 * rate)), response)
        let sigma = Float(noisePower.squareRoot())
        for i in x.indices { x[i] += sigma * Float(random.gaussian()) }
        let frames = (try? StreamingDecoder.decode(x, sampleRate: rate, profiles: [profile])) ?? []
        return frames.first { $0.token == token }
    }

    /// The path from a speaker to a microphone `distance` m away (at `rate` Hz): a synthetic room (RT60 `rt60`
    /// s at mid frequencies, `volume` m^3, source directivity `directivity`), or a free field for a nil RT60,
    /// scaled by 1 / distance.
    static func response(distance: Double, rt60: Double?, volume: Double, directivity: Double, rate: Double, random: inout SeededRandom) throws(FFTError) -> [Float] {
        var response: [Float]
        if let rt60 {
            response = try Room(rt60: rt60, distance: distance, volume: volume, directivity: directivity).impulseResponse(sampleRate: rate, rng: &random)
        } else {
            response = [Float](repeating: 0, count: Int((distance / 343 * rate).rounded()) + 1)
            response[response.count - 1] = 1
        }
        for i in response.indices { response[i] /= Float(distance) }
        return response
    }

    /// The frame carrying `token` as decoded `distance` m (1 / distance) from the nominal speaker in a
    /// synthetic room (RT60 `rt60` s, `volume` m^3, source directivity `directivity`; a nil RT60 is a free
    /// field) with the sweep's quiet-room noise, at 48 kHz; nil when not decoded. Seeded.
    /// - Parameters:
    ///   - token: the frame's payload (1 to 16 bytes).
    ///   - distance: speaker to microphone (m).
    ///   - rt60: reverberation time at mid frequencies (s), nil for a free field.
    ///   - volume: room volume (m^3).
    ///   - directivity: source directivity factor Q.
    ///   - seed: seed of the room's response and the noise.
    /// - Throws: `FFTError` when the room's transforms cannot be allocated or planned (out of memory).
    public static func hear(_ token: [UInt8], distance: Double, rt60: Double?, volume: Double, directivity: Double = 4,
                            seed: UInt64) throws(FFTError) -> DecodedFrame? {
        var random = SeededRandom(seed: seed)
        let rate = 48_000.0
        let path = try response(distance: distance, rt60: rt60, volume: volume, directivity: directivity, rate: rate, random: &random)
        return try decode(token, profile: .standard, response: path, noisePower: noisePower(profile: .standard, rate: rate), rate: rate, random: &random)
    }

    /// The frame carrying `token` as decoded behind `response` (a path already placed at its distance, as
    /// ``calibratedPair(close:far:extraDistance:rate:)`` places a measured room's) from the nominal speaker made
    /// `gain` dB louder, with the sweep's quiet-room noise, at 48 kHz; nil when not decoded. Seeded.
    /// - Parameters:
    ///   - token: the frame's payload (1 to 16 bytes).
    ///   - response: the speaker-to-microphone path at 48 kHz.
    ///   - gain: the speaker's level above the nominal one (dB).
    ///   - seed: seed of the noise.
    /// - Throws: `FFTError` when the transforms cannot be allocated or planned (out of memory).
    public static func hear(_ token: [UInt8], through response: [Float], gain: Double = 0, seed: UInt64) throws(FFTError) -> DecodedFrame? {
        var random = SeededRandom(seed: seed)
        let scale = Float(pow(10, gain / 20))
        return try decode(token, profile: .standard, response: response.map { $0 * scale },
                      noisePower: noisePower(profile: .standard, rate: 48_000), rate: 48_000, random: &random)
    }

    /// One real room measured at two positions with the same rig (MANIFEST.md of `../shared/data`): the
    /// Arroyo House living room, "Close" and "Far", the far microphone 4.1 m further (from the onset delays).
    public static let measuredPair = (close: "rir_livingroom_close_arroyo.wav", far: "rir_livingroom_far_arroyo.wav", extraDistance: 4.1)

    /// The late (diffuse) window after the onset (s) whose broadband energy calibrates a measured pair.
    static let lateWindow = (from: 0.05, to: 0.3)

    /// Broadband energy of `x` from `from` to `to` s after its onset (the first sample within 20 dB of its
    /// peak), at `rate` Hz.
    static func energy(after x: [Float], from: Double, to: Double, rate: Double) -> Double {
        let peak = x.map { abs($0) }.max() ?? 0
        guard peak > 0, let onset = x.firstIndex(where: { abs($0) >= 0.1 * peak }) else { return 0 }
        let start = max(0, min(x.count, onset + Int(from * rate))), end = max(start, min(x.count, onset + Int(to * rate)))
        return x[start..<end].reduce(0) { $0 + Double($1) * Double($1) }
    }

    /// A room measured at two positions, `extraDistance` m apart along the path, placed at its own
    /// distances: both responses scaled to the same late energy (50-300 ms after the onset, broadband: a
    /// room's diffuse sound is about as loud everywhere in it), so the ratio r of their direct sounds (the
    /// root of the energy from 1 ms before the onset to 2 ms after) is the ratio of the distances, which gives
    /// the near one, `extraDistance / (r - 1)`; then scaled so that the near direct sound is 1 / distance, as
    /// the synthetic rooms' is. Nil when the far direct sound is not weaker (r below 1.05).
    /// - Parameters:
    ///   - close: the near position's measured response.
    ///   - far: the far position's, measured with the same rig.
    ///   - extraDistance: how much farther the far microphone is (m).
    ///   - rate: both responses' sample rate (Hz).
    public static func calibratedPair(close: [Float], far: [Float], extraDistance: Double, rate: Double)
        -> (close: [Float], far: [Float], closeDistance: Double, farDistance: Double)? {
        let lateClose = energy(after: close, from: lateWindow.from, to: lateWindow.to, rate: rate)
        let lateFar = energy(after: far, from: lateWindow.from, to: lateWindow.to, rate: rate)
        guard lateClose > 0, lateFar > 0 else { return nil }
        let farGain = (lateClose / lateFar).squareRoot()
        // The direct sound: its energy from 1 ms before the onset to 2 ms after (one sample's peak may be a
        // reflection's, or the rig's ringing).
        let directClose = energy(after: close, from: -0.001, to: 0.002, rate: rate).squareRoot()
        let directFar = farGain * energy(after: far, from: -0.001, to: 0.002, rate: rate).squareRoot()
        guard directClose > 0, directFar > 0 else { return nil }
        let ratio = directClose / directFar
        guard ratio >= 1.05 else { return nil }
        let closeDistance = extraDistance / (ratio - 1)
        let scale = 1 / (closeDistance * directClose)
        return (close.map { Float(Double($0) * scale) }, far.map { Float(Double($0) * scale * farGain) }, closeDistance, closeDistance + extraDistance)
    }

    /// Noise power (mean square) that puts the direct sound at 1 m `fullBandSNRAt1m` above it.
    static func noisePower(profile: Profile, rate: Double) -> Double {
        let amplitude = Double((try! Modulator(profile: profile, sampleRate: rate)).amplitude)
        return amplitude * amplitude / 2 / pow(10, fullBandSNRAt1m / 10)
    }
}

extension SweepRunner {
    mutating func sweepEarshot(_ profile: Profile) throws {
        let rate = self.rate
        let noise = EarshotSweep.noisePower(profile: profile, rate: rate)
        let roomModel = AudioDistance(), freeModel = AudioDistance(criticalDistance: .infinity)
        output.table("Earshot: in-band SNR of an 8-byte \(profile.name) frame against distance, nominal speaker (\(fixed(Modulator.defaultLevel, 0)) dBFS) with white noise \(fixed(EarshotSweep.fullBandSNRAt1m, 0)) dB (full band) under its direct sound at 1 m, source Q = \(fixed(directivity, 1)), \(trials) frames per point; distance estimated with AudioDistance (room: critical distance \(fixed(AudioDistance.nominalCriticalDistance, 1)) m; free: inverse square).",
                     ["room", "distance (m)", "decoded", "SNR p10 (dB)", "SNR median (dB)", "SNR p90 (dB)", "level median (dBFS)",
                      "room estimate median (m)", "room estimate error median (m)", "free estimate median (m)", "free estimate error median (m)"])
        func row(_ room: String, _ distance: Double, _ results: [EarshotSweep.Trial]) {
            let snrs = results.compactMap(\.snr).sorted(), levels = results.compactMap(\.level).sorted()
            func q(_ x: [Double], _ p: Double) -> String { x.isEmpty ? "-" : fixed(x[min(x.count - 1, Int(p * Double(x.count)))], 2) }
            let roomEstimates = snrs.map { roomModel.meters(snr: $0) }.sorted(), freeEstimates = snrs.map { freeModel.meters(snr: $0) }.sorted()
            let roomErrors = roomEstimates.map { abs($0 - distance) }.sorted(), freeErrors = freeEstimates.map { abs($0 - distance) }.sorted()
            output.row([room, fixed(distance, 1), "\(fixed(100 * Double(snrs.count) / Double(max(1, results.count)), 0))%", q(snrs, 0.1), q(snrs, 0.5), q(snrs, 0.9), q(levels, 0.5),
                        q(roomEstimates, 0.5), q(roomErrors, 0.5), q(freeEstimates, 0.5), q(freeErrors, 0.5)])
        }
        for room in EarshotSweep.rooms {
            for distance in EarshotSweep.distances {
                output.status("\(room.name) at \(distance) m")
                var results: [EarshotSweep.Trial] = []
                for _ in 0..<trials {
                    let response = try EarshotSweep.response(distance: distance, rt60: room.rt60, volume: room.volume, directivity: directivity,
                                                         rate: rate, random: &random)
                    results.append(try EarshotSweep.trial(profile: profile, response: response, noisePower: noise, rate: rate, random: &random))
                }
                row(room.name, distance, results)
            }
        }
        // Measured rooms: their responses normalised to the peak (the direct sound, or a stronger early
        // reflection) and placed at a distance; what their reverberation adds to the SNR of the direct sound.
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: dataDirectory)) ?? []).filter { $0.hasPrefix("rir_") && $0.hasSuffix(".wav") }.sorted()
        for name in names {
            var response = try loadAt48k(dataDirectory + "/" + name)
            let peak = response.map { abs($0) }.max() ?? 1
            for i in response.indices { response[i] /= max(peak, 1e-9) }
            for distance in EarshotSweep.measuredDistances {
                output.status("\(name) at \(distance) m")
                let scaled = response.map { $0 / Float(distance) }
                let results = try (0..<trials).map { _ in try EarshotSweep.trial(profile: profile, response: scaled, noisePower: noise, rate: rate, random: &random) }
                row("measured " + String(name.dropFirst(4).dropLast(4)), distance, results)
            }
        }
        // One real room at two real positions (its own distances, implied by the late-energy calibration).
        let pair = EarshotSweep.measuredPair
        if names.contains(pair.close) && names.contains(pair.far),
           let placed = EarshotSweep.calibratedPair(close: try loadAt48k(dataDirectory + "/" + pair.close), far: try loadAt48k(dataDirectory + "/" + pair.far),
                                                    extraDistance: pair.extraDistance, rate: rate) {
            for (label, response, distance) in [("close", placed.close, placed.closeDistance), ("far", placed.far, placed.farDistance)] {
                output.status("measured living room, \(label), at \(fixed(distance, 1)) m")
                let results = try (0..<trials).map { _ in try EarshotSweep.trial(profile: profile, response: response, noisePower: noise, rate: rate, random: &random) }
                row("measured pair: living room \(label) (its own position)", distance, results)
            }
        }
    }
}
