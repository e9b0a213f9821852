import Foundation
import SottoChannel
import SottoExchangeCore
import SottoModem

/// The links of a crowd room alone: for every ordered pair of a ``CrowdSimulation``'s room (the same room, device for
/// device, for the same configuration), whether the listener decodes the speaker's frame when nothing else is on the
/// air, through the pair's path and the listener's noise as the simulation makes them. It tells the frames a crowd
/// loses to its room (the link) from those it loses to its access (overlaps, a listener sending).
///
/// Each frame kind (the token in the configuration's profile, its room-alias frame, the token in the robust
/// profile) is sent `repeats` times to every listener, each time with fresh noise; the listener decodes every
/// profile the simulation's devices listen for, alias frames included.
public struct CrowdLinkSurvey: Sendable {
    /// A frame kind the survey sends.
    public enum Kind: String, CaseIterable, Sendable, Codable {
        /// The token frame in the configuration's profile.
        case token
        /// The room-alias frame in the configuration's profile.
        case alias
        /// The token frame in the robust profile.
        case robustToken = "robust token"
    }

    /// What one room's survey measured.
    public struct Result: Sendable, Hashable, Codable {
        /// Devices in the room.
        public var devices: Int
        /// Times each frame was sent to each listener.
        public var repeats: Int
        /// `decoded[kind][listener][speaker]`: how many of the repeats the listener decoded (0 on the diagonal).
        public var decoded: [String: [[Int]]]
        /// `directSNR[listener][speaker]` as in ``CrowdSimulation/Result/directSNR`` (dB).
        public var directSNR: [[Double]]
        /// The room's seed (``CrowdSimulation/Configuration/seed``): the same room again.
        public var seed: UInt64
        /// Each device's clock offset (ppm; the speaker's alone sets a pair's time scale).
        public var ppm: [Double]

        /// Ordered pairs (listener != speaker).
        public var pairs: Int { devices * (devices - 1) }

        /// The ordered pairs (listener, speaker) of `kind` decoded in none of the repeats.
        public func neverDecoded(_ kind: Kind) -> [(listener: Int, speaker: Int)] {
            guard let matrix = decoded[kind.rawValue] else { return [] }
            return (0..<devices).flatMap { l in (0..<devices).filter { $0 != l && matrix[l][$0] == 0 }.map { (l, $0) } }
        }

        /// The share of frames of `kind` decoded, over every pair and repeat.
        public func share(_ kind: Kind) -> Double {
            guard let matrix = decoded[kind.rawValue], pairs > 0 else { return 0 }
            return Double(matrix.joined().reduce(0, +)) / Double(pairs * repeats)
        }
    }

    public let configuration: CrowdSimulation.Configuration
    /// Times each frame is sent to each listener.
    public let repeats: Int

    public init(_ configuration: CrowdSimulation.Configuration, repeats: Int) {
        self.configuration = configuration
        self.repeats = repeats
    }

    /// Runs the survey of `kinds` (nil: every kind whose profile the devices listen for; seconds of CPU grow with the
    /// devices squared).
    public func run(kinds: [Kind]? = nil) throws -> Result {
        let c = configuration
        let simulation = CrowdSimulation(c)
        guard c.devices >= 2 else { throw CrowdSimulation.ParameterError("a link survey needs two devices at least") }
        guard let profile = Profile.named(c.profile) else { throw CrowdSimulation.ParameterError("unknown profile \(c.profile)") }
        let (room, _) = try simulation.makeRoom()
        let n = c.devices, rate = c.sampleRate
        let modulator = try Modulator(profile: profile, sampleRate: rate)
        let robustModulator = try Modulator(profile: .robust, sampleRate: rate)
        let burstPower = Double(modulator.amplitude * modulator.amplitude) / 2
        let noiseSigma = simulation.noiseLevels(in: room, burstPower: burstPower)
        let listenProfiles = try simulation.listenProfiles()
        let kinds = kinds ?? Kind.allCases.filter { $0 != .robustToken || listenProfiles.contains(.robust) }
        var random = SeededRandom(seed: c.seed ^ 0x11_4C5)
        var noise = SeededRandom(seed: c.seed ^ 0x11_4C5_A015E)
        let lead = Int(0.3 * rate), tail = Int(1.0 * rate)
        var decoded: [String: [[Int]]] = [:]
        for kind in kinds {
            var matrix = Array(repeating: Array(repeating: 0, count: n), count: n)
            for speaker in 0..<n {
                let token = (0..<c.tokenLength).map { _ in UInt8.random(in: 0...255, using: &random) }
                let alias = UInt16.random(in: 0...Payload.maxRoomAlias, using: &random)
                let frame = Payload.token(token).frameBytes
                let burst: [Float] = switch kind {
                case .token: try modulator.modulate(frame)
                case .alias: try modulator.modulate(alias: alias)
                case .robustToken: try robustModulator.modulate(frame)
                }
                let played = room.played(burst, by: speaker, sampleRate: rate)
                for listener in 0..<n where listener != speaker {
                    let heard = try room.heard(played, from: speaker, to: listener, sampleRate: rate)
                    for _ in 0..<repeats {
                        var samples = [Float](repeating: 0, count: lead + heard.count + tail)
                        for i in samples.indices { samples[i] = noiseSigma[listener] * Float(noise.gaussian()) }
                        for (i, x) in heard.enumerated() { samples[lead + i] += x }
                        let frames = try StreamingDecoder.decode(samples, sampleRate: rate, profiles: listenProfiles, aliasFrames: true)
                        let found = frames.contains { kind == .alias ? $0.alias == alias : ($0.alias == nil && $0.token == frame) }
                        if found { matrix[listener][speaker] += 1 }
                    }
                }
            }
            decoded[kind.rawValue] = matrix
        }
        return Result(devices: n, repeats: repeats, decoded: decoded,
                      directSNR: simulation.directSNR(in: room, noiseSigma: noiseSigma, burstPower: burstPower), seed: c.seed,
                      ppm: room.devices.map(\.ppm))
    }
}
