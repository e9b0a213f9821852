import Foundation
import SottoTools
import SottoAudio
import SottoChannel
import SottoDSP
import SottoModem

/// The robustness sweeps.
public enum SweepKind: String, CaseIterable, Sendable {
    case snr, offset, reverb, rooms, longroom, hall, rolloff, speech, `false`, latency, exchange, crowd, links, earshot, skew, overlap
}

/// Where a sweep's tables go, row by row as they are measured.
public struct SweepOutput {
    /// A table starts: its caption and column titles.
    public var table: (_ caption: String, _ columns: [String]) -> Void
    /// One row of cells, in column order.
    public var row: ([String]) -> Void
    /// What is being measured now (for a progress line).
    public var status: (String) -> Void
    /// The row under way, its cells measured so far in column order (fewer than the columns), after each
    /// point of a sweep whose rows take several points (offset, reverb, rooms): what an interrupted sweep
    /// can still print. The next ``row`` replaces it.
    public var partial: ([String]) -> Void = { _ in }

    public init(table: @escaping (String, [String]) -> Void, row: @escaping ([String]) -> Void, status: @escaping (String) -> Void) {
        self.table = table
        self.row = row
        self.status = status
    }
}

/// Robustness sweeps: frames through the channel simulator (or measured rooms) into the decoder.
///
/// Conventions (as in the issue): the burst's RMS is fixed over its active part (it has a constant
/// envelope, so this is amplitude^2 / 2); SNR is that power over the white-noise power in the whole
/// 0...fs/2 band; Eb/N0 = SNR + 10 log10(T_active x (fs / 2) / payload bits), charging preamble, header,
/// CRC and code to the payload.
public struct SweepRunner {
    let trials: Int
    /// Where the tables go.
    var output: SweepOutput
    var random: SeededRandom
    /// The stream the rooms sweep's long synthetic room draws from (see `longRoomStreamSalt`).
    var longRoomRandom: SeededRandom
    let dataDirectory: String
    let speechPath: String?
    let rate = 48_000.0
    let directivity: Double
    /// Device counts of the crowd sweep.
    public var crowdDevices = [2, 5, 10, 20]
    /// Sender rules of the crowd sweep, by name (see ``CrowdSweep/rules(named:)``).
    public var crowdRules = ["fixed", "crowd"]
    /// Guard of a coordinated slot after the frame (s), for the crowd sweep's `coordinated` rules.
    public var crowdSlotGuard = 0.08
    /// Members taking turns from which the matcher gives a room aliases, for the crowd sweep's `coordinated` rules.
    public var crowdAliasRoomSize = 4
    /// Where the crowd sweep writes every room's whole result (JSON Lines: configuration and result), or nil.
    public var crowdTrace: String?
    /// Devices with a weak speaker in each crowd room, and the range of their loss at 19 kHz (dB: low, high).
    public var crowdWeakDevices = 0
    public var crowdWeakLoss = [20.0, 25.0]
    /// Whether the crowd sweep's matcher runs link adaptation.
    public var crowdLinkAdaptation = false
    /// How long after both have started a pair counts as heard in time, in the crowd sweep (s; also the run's length
    /// and the subscriptions' lost timeout).
    public var crowdWindow = 10.0
    /// Whether the decoders of the crowd and false sweeps cancel the frames they decode and look under them
    /// (`StreamingDecoder`'s `cancelsInterference`); the overlap sweep measures both ways.
    public var cancelsInterference = false
    /// The profiles the decoder of a one-frame trial listens for (snr, offset, reverb, rooms, hall, rolloff, speech),
    /// or nil for the profile under test alone. `sotto decode` and the radio listen for all four: the other
    /// profiles' receivers see the frame's chirps on the shared band, and decide what to do with them.
    public var listeningProfiles: [Profile]?

    /// `trials` frames (or runs) per point, seeded; measured rooms and noise from `dataDirectory`, speech for
    /// the speech and false sweeps from `speechPath`; `directivity` is the source's Q in synthetic rooms.
    public init(trials: Int, seed: UInt64, dataDirectory: String, speechPath: String?, directivity: Double, output: SweepOutput) {
        self.output = output
        self.directivity = directivity
        self.trials = trials
        random = SeededRandom(seed: seed)
        longRoomRandom = SeededRandom(seed: seed ^ Self.longRoomStreamSalt)
        self.dataDirectory = dataDirectory
        self.speechPath = speechPath
    }

    /// dB to add to SNR to get Eb/N0 for a profile and token length (0: the alias frame, 12 bits).
    func ebN0Offset(_ profile: Profile, _ bytes: Int) -> Double {
        10 * log10(airtime(profile, bytes) * rate / 2 / Double(bytes == 0 ? FrameFormat.aliasBits : 8 * bytes))
    }

    /// Airtime of a frame of `bytes` bytes, or of the alias frame for 0 (s).
    func airtime(_ profile: Profile, _ bytes: Int) -> Double {
        bytes == 0 ? profile.aliasAirtime : profile.airtime(payloadBytes: bytes)
    }

    /// One frame in some silence, passed through `channel`, decoded. True when exactly the token came out. Bytes 0:
    /// an alias frame (a random alias; decoded by a decoder that listens for alias frames too).
    mutating func trial(_ profile: Profile, _ bytes: Int, channel: (inout [Float], inout SeededRandom, Double) throws -> Void) rethrows -> (ok: Bool, falseTokens: Int) {
        let alias = bytes == 0 ? UInt16.random(in: 0...FrameFormat.maxAlias, using: &random) : nil
        let token = alias.map { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } ?? (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) }
        let modulator = try! Modulator(profile: profile, sampleRate: rate)
        let burst = try! alias.map { try modulator.modulate(alias: $0) } ?? modulator.modulate(token)
        let lead = Int.random(in: Int(0.1 * rate)...Int(0.3 * rate), using: &random)
        var x = [Float](repeating: 0, count: lead) + burst + [Float](repeating: 0, count: Int(0.2 * rate))
        let power = Double(modulator.amplitude * modulator.amplitude) / 2
        try channel(&x, &random, power)
        let listening = listeningProfiles.map { $0.contains(profile) ? $0 : $0 + [profile] } ?? [profile]
        let frames = (try? StreamingDecoder.decode(x, sampleRate: rate, profiles: listening, aliasFrames: alias != nil)) ?? []
        let hits = frames.filter { $0.token == token && $0.alias == alias }.count
        return (hits == 1 && frames.count == 1, frames.count - min(hits, 1))
    }

    mutating func successRate(_ profile: Profile, _ bytes: Int, channel: (inout [Float], inout SeededRandom, Double) throws -> Void) rethrows -> (rate: Double, falseTokens: Int) {
        var ok = 0, falseTokens = 0
        for _ in 0..<trials {
            let r = try trial(profile, bytes, channel: channel)
            if r.ok { ok += 1 }
            falseTokens += r.falseTokens
        }
        return (Double(ok) / Double(trials), falseTokens)
    }

    /// Runs one sweep over `profiles` and token `lengths` (bytes); `seconds` of audio for the false-token sweep.
    public mutating func run(_ sweep: SweepKind, profiles: [Profile], lengths: [Int], seconds: Double) throws {
        if let listening = listeningProfiles {
            // The caption says what decoded, so that a row read alone (JSON) is not taken for a one-profile decoder's.
            let table = output.table
            let names = listening.map(\.name).joined(separator: ", ")
            output.table = { caption, columns in table(caption + " The decoder listens for \(names) (and the profile under test).", columns) }
        }
        switch sweep {
        case .snr: sweepSNR(profiles, lengths)
        case .offset: sweepOffset(profiles, lengths)
        case .reverb: try sweepReverb(profiles, lengths)
        case .rooms: try sweepRooms(profiles, lengths)
        case .longroom: try sweepLongRooms(profiles, lengths)
        case .hall: try sweepHall(profiles, lengths)
        case .rolloff: try sweepRollOff(profiles, lengths)
        case .speech: try sweepSpeech(profiles, lengths)
        case .false: try sweepFalse(profiles, seconds: seconds)
        case .latency: sweepLatency(profiles, lengths)
        case .exchange: try sweepExchange()
        case .crowd: try sweepCrowd(profiles, lengths)
        case .links: try sweepCrowdLinks(profiles, lengths)
        case .earshot: for profile in profiles { try sweepEarshot(profile) }
        case .skew: try sweepSkew()
        case .overlap: try sweepOverlap(profiles, lengths)
        }
    }

    // MARK: White noise

    mutating func sweepSNR(_ profiles: [Profile], _ lengths: [Int]) {
        output.table("White noise, \(trials) frames per point, 0.5 dB steps (Eb/N0 charges all airtime to the payload).", ["profile", "bytes", "airtime (s)", "Eb/N0 90% (dB)", "SNR 90% (dB)", "Eb/N0 99% (dB)", "SNR 99% (dB)", "false tokens"])
        for profile in profiles {
            for bytes in lengths {
                let offset = ebN0Offset(profile, bytes)
                var at90: Double?, at99: Double?, falseTokens = 0
                var ebN0 = 2.0
                while ebN0 <= 20, at99 == nil {
                    output.status("\(profile.name), \(bytes) bytes, Eb/N0 \(fixed(ebN0, 1)) dB")
                    let snr = ebN0 - offset
                    let r = successRate(profile, bytes) { x, rng, power in
                        Channel.addWhiteNoise(&x, snrDB: snr, signalPower: power, rng: &rng)
                    }
                    falseTokens += r.falseTokens
                    if at90 == nil, r.rate >= 0.9 { at90 = ebN0 }
                    if r.rate >= 0.99 { at99 = ebN0 }
                    ebN0 += 0.5
                }
                func show(_ v: Double?) -> String { v.map { fixed($0, 1) } ?? "> 20" }
                func showSNR(_ v: Double?) -> String { v.map { fixed($0 - offset, 1) } ?? "-" }
                output.row(["\(profile.name)", bytes == 0 ? "alias" : "\(bytes)", "\(fixed(airtime(profile, bytes), 3))", "\(show(at90))", "\(showSNR(at90))", "\(show(at99))", "\(showSNR(at99))", "\(falseTokens)"])
            }
        }
    }

    // MARK: Clock and Doppler offsets

    /// Eb/N0 of the offset sweep: 3 dB above the 99% point of the default profile for 8-byte tokens
    /// (7.5 dB, measured with `sotto bench sweep snr --trials 500`).
    static let offsetSweepEbN0 = 10.5

    mutating func sweepOffset(_ profiles: [Profile], _ lengths: [Int]) {
        let offsets = stride(from: -5000.0, through: 5000, by: 1000).map { $0 }
        output.table("Clock / Doppler offset at Eb/N0 \(fixed(Self.offsetSweepEbN0, 1)) dB, \(trials) frames per point.", ["profile", "bytes"] + offsets.map { "\(Int($0)) ppm" })
        for profile in profiles {
            for bytes in lengths {
                let snr = Self.offsetSweepEbN0 - ebN0Offset(profile, bytes)
                var cells: [String] = []
                for ppm in offsets {
                    output.status("\(profile.name), \(bytes) bytes, \(Int(ppm)) ppm")
                    let r = successRate(profile, bytes) { x, rng, power in
                        x = Channel.clockOffset(x, ppm: ppm)
                        Channel.addWhiteNoise(&x, snrDB: snr, signalPower: power, rng: &rng)
                    }
                    cells.append("\(fixed(100 * r.rate, 1))%")
                    output.partial(["\(profile.name)", "\(bytes)"] + cells)
                }
                output.row(["\(profile.name)", "\(bytes)"] + cells)
            }
        }
    }

    // MARK: Rooms

    mutating func sweepReverb(_ profiles: [Profile], _ lengths: [Int]) throws {
        let rooms: [(rt60: Double, distance: Double)] = [(0.3, 1), (0.5, 1), (0.5, 3), (0.8, 3), (1.0, 5)]
        output.table("Synthetic rooms (60 m^3, source directivity Q = \(fixed(directivity, 1))) at 20 dB SNR, \(trials) frames per point.", ["profile", "bytes"] + rooms.map { "RT60 \($0.rt60) s at \(Int($0.distance)) m" })
        for profile in profiles {
            for bytes in lengths {
                var cells: [String] = []
                for room in rooms {
                    output.status("\(profile.name), \(bytes) bytes, RT60 \(room.rt60) s at \(Int(room.distance)) m")
                    let rate = self.rate, q = directivity
                    let r = try successRate(profile, bytes) { x, rng, power in
                        let response = try Room(rt60: room.rt60, distance: room.distance, directivity: q).impulseResponse(sampleRate: rate, rng: &rng)
                        x = try fftConvolve(x, response)
                        Channel.addWhiteNoise(&x, snrDB: 20, signalPower: power, rng: &rng)
                    }
                    cells.append("\(fixed(100 * r.rate, 1))%")
                    output.partial(["\(profile.name)", "\(bytes)"] + cells)
                }
                output.row(["\(profile.name)", "\(bytes)"] + cells)
            }
        }
    }

    /// Measured impulse responses (rir_*.wav) with real noise (noise_*.wav) at 20 dB in-band SNR.
    mutating func sweepRooms(_ profiles: [Profile], _ lengths: [Int]) throws {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dataDirectory)) ?? []
        let rirs = names.filter { $0.hasPrefix("rir_") && $0.hasSuffix(".wav") }.sorted()
        let noises = names.filter { $0.hasPrefix("noise_") && $0.hasSuffix(".wav") }.sorted()
        guard !rirs.isEmpty, !noises.isEmpty else { throw ToolError("no rir_*.wav and noise_*.wav in \(dataDirectory) (--data)") }
        let noiseClips = try noises.map { try loadAt48k(dataDirectory + "/" + $0) }
        let long = Self.sweepLongRoom
        output.table("Measured rooms (\(dataDirectory)) with real noise at 20 dB in-band SNR, and a synthetic long room (RT60 \(fixed(long.rt60, 1)) s, direct-to-reverberant \(fixed(long.directToReverberantDB, 0)) dB, \(fixed(long.length, 1)) s) with white noise at 20 dB in-band SNR, \(trials) frames per point.", ["profile", "bytes"] + rirs.map { String($0.dropFirst(4).dropLast(4)) } + ["long synthetic"])
        for profile in profiles {
            for bytes in lengths {
                var cells: [String] = []
                for name in rirs {
                    output.status("\(profile.name), \(bytes) bytes, \(name)")
                    var response = try loadAt48k(dataDirectory + "/" + name)
                    let peak = response.map { abs($0) }.max() ?? 1
                    for i in response.indices { response[i] /= max(peak, 1e-9) }
                    var clip = 0
                    let band = profile.band
                    let rate = self.rate
                    let r = try successRate(profile, bytes) { x, rng, _ in
                        x = try fftConvolve(x, response)
                        let noise = noiseClips[clip % noiseClips.count]
                        clip += 1
                        let signalPower = Channel.power(x)  // the burst dominates the clip
                        let noisePower = try bandPower(noise, sampleRate: rate, band: band)
                        let gain = Float((signalPower / pow(10, 2) / max(noisePower, 1e-20)).squareRoot())
                        let start = Int.random(in: 0..<max(1, noise.count - x.count), using: &rng)
                        for i in x.indices { x[i] += gain * noise[(start + i) % noise.count] }
                    }
                    cells.append("\(fixed(100 * r.rate, 1))%")
                    output.partial(["\(profile.name)", "\(bytes)"] + cells)
                }
                output.status("\(profile.name), \(bytes) bytes, long synthetic room")
                var ok = 0
                swap(&random, &longRoomRandom)
                for _ in 0..<trials {
                    let response = long.impulseResponse(sampleRate: rate, rng: &random)
                    let direct = Int((long.directDelay * rate).rounded())
                    if try longRoomTrial(profile, bytes, response: response, directDelay: direct, snrInBand: Self.longRoomSNR).ok { ok += 1 }
                }
                swap(&random, &longRoomRandom)
                cells.append("\(fixed(100 * Double(ok) / Double(trials), 1))%")
                output.row(["\(profile.name)", "\(bytes)"] + cells)
            }
        }
    }

    // MARK: The hall

    /// Full-band SNR (dB) of the hall sweep: white noise against the sent frame's power (the direct sound,
    /// gain 1 at any distance); about 18 dB under the received frame with its reverberation (0.9 s at 5 m
    /// puts 7 dB more in the tail than in the direct sound), about +1 dB in the default profile's band.
    static let hallSNR = -10.0
    /// Speaker to microphone distance (m) in the hall sweep.
    static let hallDistance = 5.0

    /// The reverberant hall of the receiver issue: a shoebox of 20 x 12 x 6 m with RT60 0.9 s at every
    /// frequency (``ShoeboxRoom``, image sources), speaker and microphone 5 m apart at random positions
    /// (one room per frame), white noise over the whole band at `hallSNR` against the direct sound. The
    /// receiver at 4b5b483 decoded every frame; gating the room model by the tail estimate alone (f9f6121)
    /// lost 15-30 % of them.
    mutating func sweepHall(_ profiles: [Profile], _ lengths: [Int]) throws {
        let size = ShoeboxRoom.hallSize, rt60 = ShoeboxRoom.hallRT60
        output.table("Shoebox hall \(Int(size.x)) x \(Int(size.y)) x \(Int(size.z)) m, RT60 \(fixed(rt60, 1)) s at every frequency (image sources), \(fixed(Self.hallDistance, 0)) m from the speaker at random positions, white noise at \(fixed(Self.hallSNR, 0)) dB full-band SNR against the direct sound, \(trials) frames per point.", ["profile", "bytes", "decoded", "false tokens"])
        let rate = self.rate
        for profile in profiles {
            for bytes in lengths {
                output.status("\(profile.name), \(bytes) bytes, hall")
                let r = try successRate(profile, bytes) { x, rng, power in
                    let room = ShoeboxRoom.random(size: size, rt60: rt60, distance: Self.hallDistance, rng: &rng)
                    x = try fftConvolve(x, room.impulseResponse(sampleRate: rate))
                    Channel.addWhiteNoise(&x, snrDB: Self.hallSNR, signalPower: power, rng: &rng)
                }
                output.row(["\(profile.name)", "\(bytes)", "\(fixed(100 * r.rate, 1))%", "\(r.falseTokens)"])
            }
        }
    }

    // MARK: Weak speakers

    /// The roll-off sweep's losses at 19 kHz (dB), one column each.
    static let rollOffLosses: [Double] = [0, 5, 10, 15, 20, 25, 30]
    /// Full-band SNR (dB) of the roll-off sweep: white noise against the sent frame's power, so that the noise
    /// stays as the speaker weakens (about 9 dB in band without a loss).
    static let rollOffSNR = 0.0

    /// Weak speakers and microphones: a living room (synthetic, RT60 0.3 s, 2 m, 60 m^3, one room per frame), the
    /// speaker and microphone together losing 0-30 dB at 19 kHz (``RollOffFilter``, 24 dB/octave, its corner set
    /// for the loss: a tilt across the band as well), white noise at `rollOffSNR` against the sent frame. What a
    /// session's profile has to survive on a small phone speaker (CHANNEL.md budgets 20-40 dB).
    mutating func sweepRollOff(_ profiles: [Profile], _ lengths: [Int]) throws {
        let rate = self.rate, directivity = self.directivity
        let corners = Self.rollOffLosses.map { RollOffFilter.corner(forLossDB: $0, at: 19_000, sampleRate: rate) }
        output.table("Weak speakers: a living room (RT60 0.3 s, 2 m, 60 m^3), speaker and microphone losing L dB at 19 kHz (24 dB/octave above a corner of \(corners.map { $0.map { "\(fixed($0 / 1000, 1)) kHz" } ?? "none" }.joined(separator: ", "))), white noise at \(fixed(Self.rollOffSNR, 0)) dB full-band SNR against the sent frame, \(trials) frames per point.",
                     ["profile", "bytes"] + Self.rollOffLosses.map { "\(fixed($0, 0)) dB" } + ["false tokens"])
        for profile in profiles {
            for bytes in lengths {
                var cells: [String] = [], falseTokens = 0
                for (loss, corner) in zip(Self.rollOffLosses, corners) {
                    output.status("\(profile.name), \(bytes) bytes, \(fixed(loss, 0)) dB at 19 kHz")
                    let r = try successRate(profile, bytes) { x, rng, power in
                        let room = Room(rt60: 0.3, distance: 2, volume: 60, directivity: directivity)
                        x = try fftConvolve(x, room.impulseResponse(sampleRate: rate, rng: &rng))
                        if let corner { Channel.rollOff(&x, sampleRate: rate, cornerHz: corner) }
                        Channel.addWhiteNoise(&x, snrDB: Self.rollOffSNR, signalPower: power, rng: &rng)
                    }
                    falseTokens += r.falseTokens
                    cells.append("\(fixed(100 * r.rate, 1))%")
                    output.partial(["\(profile.name)", "\(bytes)"] + cells)
                }
                output.row(["\(profile.name)", "\(bytes)"] + cells + ["\(falseTokens)"])
            }
        }
    }

    // MARK: Long rooms

    /// The rooms sweep's long room: like the measured one of the receiver issue (3.4 s response), with
    /// a direct sound 10 dB under its tail in band, where the receiver failed (see `sweepLongRooms`).
    static let sweepLongRoom = LongRoom(rt60: 3, directToReverberantDB: -10, length: 3.4)

    /// Mixed into the sweep's seed for the long synthetic room's own random stream. When that column
    /// drew from the measured rooms' stream, adding it gave every row after the first other tokens, noise
    /// clips and offsets in the measured rooms: the studio's 16-byte frames went from 100 to 98 % (100
    /// trials); with this stream they decode 40 of 40 again with the same receiver.
    static let longRoomStreamSalt: UInt64 = 0x4C4F_4E47_524F_4F4D  // "LONGROOM"

    /// In-band SNR (dB) of the long-room sweep: signal power over the frame (its tail included) over the
    /// white noise's power in the profile's band.
    static let longRoomSNR = 20.0

    /// One frame through `response`, then white noise at `snrInBand` dB in the profile's band against the
    /// received frame's power over its airtime. Returns whether exactly the token came out, whether any
    /// preamble was detected, and the decoded frame's clock offset (ppm) and start error (ms).
    mutating func longRoomTrial(_ profile: Profile, _ bytes: Int, response: [Float], directDelay: Int,
                                snrInBand: Double) throws(FFTError) -> (ok: Bool, detected: Bool, ppm: Double?, startError: Double?) {
        let token = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) }
        let modulator = try! Modulator(profile: profile, sampleRate: rate)
        let burst = try! modulator.modulate(token)
        let lead = Int.random(in: Int(0.1 * rate)...Int(0.3 * rate), using: &random)
        let x = [Float](repeating: 0, count: lead) + burst + [Float](repeating: 0, count: Int(0.2 * rate))
        var y = try fftConvolve(x, response)
        let first = lead + directDelay, last = min(y.count, first + burst.count)
        let signal = Channel.power(Array(y[first..<last]))
        let bandwidth = profile.highFrequency - profile.lowFrequency
        let noiseFullBand = signal / pow(10, snrInBand / 10) * (rate / 2) / bandwidth
        let sigma = Float(noiseFullBand.squareRoot())
        for i in y.indices { y[i] += sigma * Float(random.gaussian()) }
        let decoder = try! StreamingDecoder(sampleRate: rate, profiles: [profile])
        let frames = decoder.process(y) + decoder.finish()
        let hit = frames.first { $0.token == token }
        let ok = hit != nil && frames.count == 1
        let startError = hit.map { 1000 * ($0.startTime - Double(first) / rate) }
        return (ok, (decoder.detections[profile.name] ?? 0) > 0, hit.map(\.clockOffsetPPM), startError)
    }

    /// Synthetic long rooms (``LongRoom``): which part of a long, weak-direct-sound response breaks the
    /// receiver. White noise at `longRoomSNR` dB in band.
    mutating func sweepLongRooms(_ profiles: [Profile], _ lengths: [Int]) throws {
        typealias Scenario = (name: String, room: LongRoom, cut: Double?, snr: Double)
        let snr = Self.longRoomSNR
        let late = { (d: Double, g: Double) in LongRoom(rt60: 0.3, directToReverberantDB: 6, length: 1, reflections: [.init(delay: d, gain: g)]) }
        let drr = { (rt60: Double, db: Double) in LongRoom(rt60: rt60, directToReverberantDB: db, length: 3.4) }
        let scenarios: [Scenario] = [
            ("RT60 0.3 s", .issueRoom(rt60: 0.3), nil, snr),
            ("RT60 1 s", .issueRoom(rt60: 1), nil, snr),
            ("RT60 3 s", .issueRoom(rt60: 3), nil, snr),
            ("RT60 1 s at 14 dB", .issueRoom(rt60: 1), nil, 14),
            ("RT60 1 s at 10 dB", .issueRoom(rt60: 1), nil, 10),
            ("RT60 0.3 s DRR -6 dB", drr(0.3, -6), nil, snr),
            ("RT60 0.3 s DRR -10 dB", drr(0.3, -10), nil, snr),
            ("RT60 1 s DRR -6 dB", drr(1, -6), nil, snr),
            ("RT60 1 s DRR -10 dB", drr(1, -10), nil, snr),
            ("RT60 1 s DRR -10 dB cut at 70 ms", drr(1, -10), 0.070, snr),
            ("RT60 1 s DRR -10 dB cut at 300 ms", drr(1, -10), 0.300, snr),
            ("RT60 3 s DRR -6 dB", drr(3, -6), nil, snr),
            ("RT60 3 s DRR -10 dB", drr(3, -10), nil, snr),
            ("reflection 1.0 at 250 ms", late(0.250, 1.0), nil, snr),
            ("reflection 1.4 at 120 ms", late(0.120, 1.4), nil, snr),
            ("notches: 0.9 at 3 ms", late(0.003, 0.9), nil, snr),
            ("RT60 1 s + flutter 0.8^n every 37 ms", LongRoom(rt60: 1, directToReverberantDB: -2.8, length: 3.4,
                reflections: (1...30).map { .init(delay: 0.037 * Double($0), gain: pow(0.8, Double($0))) }), nil, snr),
            ("RT60 1 s + 12 late reflections 0.5", LongRoom(rt60: 1, directToReverberantDB: -2.8, length: 3.4,
                reflections: (1...12).map { .init(delay: 0.08 + 0.061 * Double($0), gain: 0.5) }), nil, snr),
        ]
        output.table("Synthetic long rooms (direct-to-reverberant -2.8 dB, 3.4 s unless named) with white noise at \(fixed(Self.longRoomSNR, 0)) dB in-band SNR unless named, \(trials) frames per point.",
                     ["profile", "bytes", "room", "success", "detected", "ppm (mean, max)", "start error ms (mean, max)"])
        for profile in profiles {
            for bytes in lengths {
                for scenario in scenarios {
                    output.status("\(profile.name), \(bytes) bytes, \(scenario.name)")
                    var ok = 0, detected = 0
                    var ppms: [Double] = [], errors: [Double] = []
                    for _ in 0..<trials {
                        var response = try scenario.room.impulseResponse(sampleRate: rate, rng: &random)
                        let direct = Int((scenario.room.directDelay * rate).rounded())
                        if let cut = scenario.cut {
                            let end = min(response.count, direct + Int(cut * rate))
                            response.removeSubrange(end...)
                        }
                        let r = try longRoomTrial(profile, bytes, response: response, directDelay: direct, snrInBand: scenario.snr)
                        if r.ok { ok += 1 }
                        if r.detected { detected += 1 }
                        if let p = r.ppm { ppms.append(p) }
                        if let e = r.startError { errors.append(e) }
                    }
                    func summary(_ v: [Double]) -> String {
                        guard !v.isEmpty else { return "-" }
                        return "\(fixed(v.reduce(0, +) / Double(v.count), 1)), \(fixed(v.map { abs($0) }.max()!, 1))"
                    }
                    output.row(["\(profile.name)", "\(bytes)", scenario.name, "\(fixed(100 * Double(ok) / Double(trials), 1))%",
                                "\(fixed(100 * Double(detected) / Double(trials), 1))%", summary(ppms), summary(errors)])
                }
            }
        }
    }

    // MARK: Exchange

    mutating func sweepExchange() throws {
        var all = RoomScenario.Report()
        for run in 0..<trials {
            output.status("run \(run + 1) of \(trials)")
            all.add(try RoomScenario(duration: 60, stopAt: 30, walkAwayAt: 40, seed: random.next() &+ UInt64(run)).run())
        }
        func quantile(_ x: [Double], _ q: Double) -> String {
            guard !x.isEmpty else { return "-" }
            let s = x.sorted()
            return fixed(s[min(s.count - 1, Int(q * Double(s.count)))], 2)
        }
        output.table("Simulated room, 3 devices (1.5-3 m apart, RT60 0.4 s, 15 dB SNR), tokens every 1.5 s + 0-1 s jitter, lost timeout 10 s, \(trials) runs of 60 s.", ["measure", "median (s)", "95th percentile (s)", "count"])
        output.row(["publication start -> found", "\(quantile(all.foundLatencies, 0.5))", "\(quantile(all.foundLatencies, 0.95))", "\(all.foundLatencies.count)"])
        output.row(["unpublish -> lost", "\(quantile(all.stopToLost, 0.5))", "\(quantile(all.stopToLost, 0.95))", "\(all.stopToLost.count)"])
        output.row(["walked out of range -> lost", "\(quantile(all.walkAwayToLost, 0.5))", "\(quantile(all.walkAwayToLost, 0.95))", "\(all.walkAwayToLost.count)"])
        output.table("Frames and events over the \(trials) runs (each frame has 2 receivers).", ["count", "value"])
        output.row(["false found/lost events", "\(all.falseEvents)"])
        output.row(["frames heard", "\(all.framesHeard) of \(2 * all.framesSent)"])
        output.row(["frames overlapping another device's frame", "\(all.collisions)"])
        output.row(["receptions of overlapping frames decoded", "\(all.collidedHeard) of \(2 * all.collisions)"])
    }

    // MARK: Crowd

    mutating func sweepCrowd(_ profiles: [Profile], _ lengths: [Int]) throws {
        for name in crowdRules where CrowdSweep.rules(named: name) == nil {
            throw ToolError("unknown sender rules '\(name)': \(CrowdSweep.ruleNames.joined(separator: ", "))")
        }
        let weak = crowdWeakDevices > 0
        let weakText = weak ? " \(crowdWeakDevices) devices a room have a weak speaker (roll-off loss at 19 kHz within \(fixed(crowdWeakLoss[0], 0))-\(fixed(crowdWeakLoss[1], 0)) dB); weak heard: pairs whose speaker is weak heard in time." : ""
        let adaptationText = crowdLinkAdaptation ? " The matcher's link adaptation switches each device's token frames between the profile and robust; profile changes: a room's mean." : ""
        output.table("A room full of devices: 7 x 5 x 2.6 m, RT60 0.5 s, devices at random places, levels within 6 dB, clocks within 100 ppm, each listener's noise 10 dB under its mean received power, starts within 1 s; every device broadcasts its token (the matcher's token length: bytes) and decodes all profiles; coordinated slots are the frame plus \(fixed(crowdSlotGuard, 2)) s; \(trials) rooms a point. Heard: the listener decoded the speaker's token within \(fixed(crowdWindow, 0)) s of both starting; found: its subscription found the speaker's message. False tokens: frames no device sent that the exchange takes; false frames dropped: those it drops (no payload: one byte, an unknown kind, a token frame claiming the room-alias kind).\(weakText)\(adaptationText)",
                     ["rules", "profile", "bytes", "devices", "pairs heard", "rooms all heard", "median first hearing (s)", "95th percentile (s)", "pairs found", "false tokens", "false frames dropped", "band busy", "listeners"]
                        + (weak ? ["weak heard"] : []) + (crowdLinkAdaptation ? ["profile changes"] : []))
        for profile in profiles {
            for name in crowdRules {
              for length in lengths {
                for devices in crowdDevices {
                    output.status("\(name), \(profile.name), \(devices) devices")
                    let results = try CrowdSweep.run(crowdConfigurations(devices: devices, rules: name, profile: profile, length: length))
                    if let crowdTrace { try CrowdSweep.appendTrace(results, rules: name, to: crowdTrace) }
                    let summary = CrowdSweep.Summary(results)
                    func q(_ p: Double) -> String { summary.hearingQuantile(p).map { fixed($0, 2) } ?? "-" }
                    // One device has no pairs: its shares are not zero but undefined.
                    func share(_ x: Double) -> String { devices < 2 ? "-" : "\(fixed(100 * x, 1))%" }
                    output.row([name, profile.name, "\(length)", "\(devices)", share(summary.heardShare),
                                devices < 2 ? "-" : "\(summary.roomsAllHeard) of \(results.count)", q(0.5), q(0.95),
                                share(summary.foundShare), "\(summary.falseTokens)", "\(summary.droppedFalseFrames)",
                                "\(fixed(100 * summary.busyShare, 0))%", cancelsInterference ? "cancel interference" : "plain"]
                               + (weak ? [weakShare(results)] : [])
                               + (crowdLinkAdaptation ? [fixed(Double(results.map(\.profileChanges.count).reduce(0, +)) / Double(max(1, results.count)), 1)] : []))
                }
              }
            }
        }
    }

    /// One point's rooms of `devices` devices on the rules named `rules`, a seed each from the sweep's generator, with the
    /// crowd options of this runner.
    mutating func crowdConfigurations(devices: Int, rules: String, profile: Profile, length: Int) -> [CrowdSimulation.Configuration] {
        (0..<trials).map { _ in random.next() }.map { seed in
            var c = CrowdSweep.configuration(devices: devices, rules: rules, seed: seed)!
            c.profile = profile.name
            c.tokenLength = length
            c.slotGuard = crowdSlotGuard
            c.aliasRoomSize = crowdAliasRoomSize
            c.cancelsInterference = cancelsInterference
            c.weakDevices = crowdWeakDevices
            c.weakLossDB = crowdWeakLoss
            c.linkAdaptation = crowdLinkAdaptation
            c.window = crowdWindow
            return c
        }
    }

    /// The crowd's rooms (those `crowd` makes with the same seed, of one device count and rules), every ordered pair's link alone on the air
    /// (`CrowdLinkSurvey`, two repeats a frame): the share of frames decoded by kind, and the pairs whose token or
    /// alias frames were never decoded (the links a crowd cannot use however its access works), and how many of
    /// those the robust profile's token reaches.
    mutating func sweepCrowdLinks(_ profiles: [Profile], _ lengths: [Int]) throws {
        let repeats = 2
        output.table("The links of a crowd's rooms alone on the air: 7 x 5 x 2.6 m, RT60 0.5 s, the rooms `crowd` makes with the same seed (of one device count and rules), each pair's path and the listener's noise as there, \(repeats) frames a pair and kind, \(trials) rooms a point; every listener decodes all profiles and alias frames. Dead: ordered pairs with no frame of that kind decoded; rescued: dead token or alias pairs the robust token reaches.",
                     ["profile", "bytes", "devices", "token decoded", "alias decoded", "robust token decoded", "dead token pairs", "dead alias pairs", "dead robust pairs", "rescued by robust", "rooms without dead alias pairs"])
        for profile in profiles {
            for length in lengths {
                for devices in crowdDevices {
                    output.status("links, \(profile.name), \(devices) devices")
                    let results = try CrowdSweep.survey(crowdConfigurations(devices: devices, rules: "coordinated", profile: profile, length: length),
                                                        repeats: repeats)
                    if let crowdTrace { try CrowdSweep.appendTrace(results, to: crowdTrace) }
                    let pairs = results.reduce(0) { $0 + $1.pairs }
                    func share(_ kind: CrowdLinkSurvey.Kind) -> String {
                        "\(fixed(100 * results.reduce(0.0) { $0 + $1.share(kind) * Double($1.pairs) } / Double(max(1, pairs)), 2))%"
                    }
                    func dead(_ kind: CrowdLinkSurvey.Kind) -> Int { results.reduce(0) { $0 + $1.neverDecoded(kind).count } }
                    var rescued = 0, deadEither = 0
                    for r in results {
                        let robustDead = Set(r.neverDecoded(.robustToken).map { $0.listener * devices + $0.speaker })
                        let either = Set((r.neverDecoded(.token) + r.neverDecoded(.alias)).map { $0.listener * devices + $0.speaker })
                        deadEither += either.count
                        rescued += either.subtracting(robustDead).count
                    }
                    output.row([profile.name, "\(length)", "\(devices)", share(.token), share(.alias), share(.robustToken),
                                "\(dead(.token))", "\(dead(.alias))", "\(dead(.robustToken))", "\(rescued) of \(deadEither)",
                                "\(results.filter { $0.neverDecoded(.alias).isEmpty }.count) of \(results.count)"])
                }
            }
        }
    }

    /// The share of ordered pairs whose speaker is weak that were heard within the window, over `results`.
    func weakShare(_ results: [CrowdSimulation.Result]) -> String {
        let counts = results.map(\.weakPairs).reduce((pairs: 0, heard: 0)) { ($0.pairs + $1.pairs, $0.heard + $1.heard) }
        return counts.pairs == 0 ? "-" : "\(fixed(100 * Double(counts.heard) / Double(counts.pairs), 1))%"
    }

    // MARK: Overlapping frames

    /// Level differences (dB) and overlaps (share of the weaker frame's airtime under the stronger one) of the
    /// overlap sweep.
    public static let overlapLevels = [0.0, 3, 6, 10, 20]
    static let overlaps = [0.0, 0.25, 0.5, 0.75, 1.0]

    /// Two frames of one profile and length, each through its own synthetic room (RT60 0.5 s, 2 m, the source's
    /// directivity Q), the weaker `level` dB under the stronger, overlapping by a share of their airtime (the
    /// weaker one starting after the stronger in odd trials, before it in even ones), clocks within 100 ppm,
    /// white noise 10 dB under the weaker one's power (full band): the share of weaker and of stronger frames
    /// decoded, by the decoder without interference cancellation and with it, from the same audio.
    mutating func sweepOverlap(_ profiles: [Profile], _ lengths: [Int]) throws {
        let overlaps = Self.overlaps
        output.table("Two overlapping frames of one profile, each through its own synthetic room (RT60 0.5 s, 2 m, Q = \(fixed(directivity, 1))), clocks within 100 ppm, white noise 10 dB under the weaker frame, \(trials) pairs per point: weaker frames decoded without / with interference cancellation (stronger frames decoded without / with).",
                     ["profile", "bytes", "weaker (dB)"] + overlaps.map { "overlap \(Int(100 * $0))%" } + ["false tokens"])
        for profile in profiles {
            for bytes in lengths {
                let modulator = try Modulator(profile: profile, sampleRate: rate)
                let length = Int((profile.airtime(payloadBytes: bytes) * rate).rounded(.up))
                let power = Double(modulator.amplitude * modulator.amplitude) / 2
                for level in Self.overlapLevels {
                    var cells: [String] = []
                    var falseTokens = 0
                    for overlap in overlaps {
                        output.status("\(profile.name), \(bytes) bytes, \(fixed(level, 0)) dB, overlap \(Int(100 * overlap))%")
                        var weak = [0, 0], strong = [0, 0]
                        for trial in 0..<trials {
                            let tokens = (0..<2).map { _ in (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) } }
                            let gain = Float(pow(10, -level / 20))
                            var heard: [[Float]] = []
                            for (k, token) in tokens.enumerated() {
                                var burst = try modulator.modulate(token)
                                if k == 1 { for i in burst.indices { burst[i] *= gain } }
                                burst = Channel.clockOffset(burst, ppm: Double.random(in: -100...100, using: &random))
                                let response = try Room(rt60: 0.5, distance: 2, directivity: directivity).impulseResponse(sampleRate: rate, rng: &random)
                                heard.append(try fftConvolve(burst, response))
                            }
                            // The weaker frame's start against the stronger's: after it, or before it, by the overlap.
                            let shift = Int(Double(length) * (1 - overlap)) * (trial % 2 == 1 ? 1 : -1)
                            let lead = Int(0.3 * rate) + length
                            let starts = [lead, lead + shift]
                            var x = [Float](repeating: 0, count: lead + 2 * length + Int(1.5 * rate))
                            for k in 0..<2 { for (i, v) in heard[k].enumerated() where starts[k] + i < x.count { x[starts[k] + i] += v } }
                            Channel.addWhiteNoise(&x, snrDB: 10, signalPower: power * Double(gain * gain), rng: &random)
                            for (way, cancels) in [false, true].enumerated() {
                                let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: [profile], cancelsInterference: cancels)
                                if frames.contains(where: { $0.token == tokens[1] }) { weak[way] += 1 }
                                if frames.contains(where: { $0.token == tokens[0] }) { strong[way] += 1 }
                                falseTokens += frames.count { !tokens.contains($0.token) }
                            }
                        }
                        func share(_ n: Int) -> String { "\(fixed(100 * Double(n) / Double(trials), 0))" }
                        cells.append("\(share(weak[0])) / \(share(weak[1]))% (\(share(strong[0])) / \(share(strong[1]))%)")
                        output.partial(["\(profile.name)", "\(bytes)", "\(fixed(level, 0))"] + cells)
                    }
                    output.row(["\(profile.name)", "\(bytes)", "\(fixed(level, 0))"] + cells + ["\(falseTokens)"])
                }
            }
        }
    }

    // MARK: Latency

    /// Feeds frames in noise to a low-latency decoder (as `sotto listen` makes) in 1024-sample periods (as a
    /// capture device delivers them) and measures how much audio after a frame's last sample arrived before
    /// the frame was reported.
    mutating func sweepLatency(_ profiles: [Profile], _ lengths: [Int]) {
        output.table("Report latency: audio after the frame's end until it is reported, 1024-sample periods at 48 kHz, \(trials) frames.", ["profile", "bytes", "median (ms)", "95th percentile (ms)", "max (ms)"])
        let period = 1024
        for profile in profiles {
            for bytes in lengths {
                output.status("\(profile.name), \(bytes) bytes")
                var latencies: [Double] = []
                for _ in 0..<trials {
                    let token = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) }
                    let modulator = try! Modulator(profile: profile, sampleRate: rate)
                    let burst = try! modulator.modulate(token)
                    let lead = Int.random(in: 0..<Int(rate), using: &random)
                    var x = [Float](repeating: 0, count: lead) + burst + [Float](repeating: 0, count: Int(rate))
                    Channel.addWhiteNoise(&x, snrDB: 0, signalPower: Double(modulator.amplitude * modulator.amplitude) / 2, rng: &random)
                    let decoder = try! StreamingDecoder(sampleRate: rate, profiles: [profile], lowLatency: true)
                    let end = Double(lead + burst.count) / rate
                    var offset = 0
                    outer: while offset < x.count {
                        let n = min(period, x.count - offset)
                        let frames = x.withUnsafeBufferPointer { decoder.process(UnsafeBufferPointer(rebasing: $0[offset..<(offset + n)])) }
                        offset += n
                        if frames.contains(where: { $0.token == token }) {
                            latencies.append(Double(offset) / rate - end)
                            break outer
                        }
                    }
                }
                latencies.sort()
                guard !latencies.isEmpty else { output.row(["\(profile.name)", "\(bytes)", "-", "-", "-"]); continue }
                func ms(_ q: Double) -> String { fixed(1000 * latencies[min(latencies.count - 1, Int(q * Double(latencies.count)))], 0) }
                output.row(["\(profile.name)", "\(bytes)", "\(ms(0.5))", "\(ms(0.95))", "\(fixed(1000 * latencies.last!, 0))"])
            }
        }
    }

    // MARK: Speech and false tokens

    mutating func speechSamples() throws -> [Float] {
        guard let speechPath else { throw ToolError("give a speech recording with --speech (scripts/make-fixtures makes one with espeak-ng)") }
        return try loadAt48k(speechPath)
    }

    mutating func sweepSpeech(_ profiles: [Profile], _ lengths: [Int]) throws {
        let speech = try speechSamples()
        output.table("Speech interference at SIR -10 dB plus white noise at 30 dB SNR, \(trials) frames per point.", ["profile", "bytes", "success", "false tokens"])
        for profile in profiles {
            for bytes in lengths {
                output.status("\(profile.name), \(bytes) bytes")
                let r = successRate(profile, bytes) { x, rng, power in
                    let offset = Int.random(in: 0..<max(1, speech.count - x.count), using: &rng)
                    Channel.mix(&x, interference: Array(speech[offset..<min(speech.count, offset + x.count)]), sirDB: -10, signalPower: power, offset: 0)
                    Channel.addWhiteNoise(&x, snrDB: 30, signalPower: power, rng: &rng)
                }
                output.row(["\(profile.name)", "\(bytes)", "\(fixed(100 * r.rate, 1))%", "\(r.falseTokens)"])
            }
        }
    }

    /// Streams `seconds` of white noise, then of speech (looped, with a little noise), then of the real
    /// noise recordings (looped), through a decoder for every profile that listens for alias frames too, and counts
    /// what comes out: token frames and alias frames apart.
    mutating func sweepFalse(_ profiles: [Profile], seconds: Double) throws {
        let speech = try speechSamples()
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: dataDirectory)) ?? []).filter { $0.hasPrefix("noise_") }.sorted()
        let realNoise = try names.map { try loadAt48k(dataDirectory + "/" + $0) }.flatMap { $0 }
        let sources: [(String, [Float])] = [("white noise", []), ("speech", speech), ("real noise", realNoise)]
        output.table("False tokens: \(fixed(seconds / 3600, 2)) h of each source through the decoder for \(profiles.map(\.name).joined(separator: ", ")).", ["source", "hours", "preamble detections", "false tokens", "false aliases", "speed (x real time)"])
        let block = Int(rate)
        for (name, clip) in sources where name == "white noise" || !clip.isEmpty {
            output.status("\(name)")
            let decoder = try StreamingDecoder(sampleRate: rate, profiles: profiles, aliasFrames: true,
                                               cancelsInterference: cancelsInterference)
            var buffer = [Float](repeating: 0, count: block)
            var position = 0, frames = 0, aliases = 0, cpu = 0.0
            for second in 0..<Int(seconds) {
                if second % 60 == 0 { output.status("\(name): \(second / 60) of \(Int(seconds) / 60) min") }
                for i in 0..<block {
                    let base: Float = clip.isEmpty ? 0 : clip[(position + i) % clip.count]
                    buffer[i] = base + 0.01 * Float(random.gaussian())
                }
                position += block
                let start = threadCPUTime()
                let found = decoder.process(buffer)
                cpu += threadCPUTime() - start
                frames += found.count { $0.alias == nil }
                aliases += found.count { $0.alias != nil }
            }
            let last = decoder.finish()
            frames += last.count { $0.alias == nil }
            aliases += last.count { $0.alias != nil }
            let detections = decoder.detections.values.reduce(0, +)
            output.row(["\(name)", "\(fixed(seconds / 3600, 2))", "\(detections)", "\(frames)", "\(aliases)", "\(fixed(seconds / max(cpu, 1e-9), 0))"])
        }
    }

    func loadAt48k(_ path: String) throws -> [Float] { try readFirstChannel(path, at: rate) }
}

