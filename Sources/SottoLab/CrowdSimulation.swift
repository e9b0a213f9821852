import Foundation
import SottoTools
import SottoChannel
import SottoDSP
import SottoExchange
import SottoExchangeCore
import SottoModem

/// A room full of devices, end to end: every device broadcasts its matcher token on the sender's rules
/// (`TransmitScheduler`), hears the sum of everyone's sound (its own included, loudest) through the room,
/// decodes it with the real streaming decoder, senses the band for listen-before-talk with its own
/// `BandActivityMonitor`, and reports what it heard to one embedded matcher where every device publishes
/// a message and subscribes to all of the app's messages.
///
/// Time runs in device periods (1 024 samples at 48 kHz): each period every device decides whether to start
/// a frame (it starts one period later, as a device buffer delays it) and then hears that period.
///
/// Measures, for every ordered pair (listener, speaker), when the listener first decoded the speaker's
/// token, counted from the later of their two starts, and when the listener's subscription found the
/// speaker's message. Seeded: the same configuration gives the same result.
public struct CrowdSimulation: Sendable {
    /// What is simulated.
    public struct Configuration: Sendable, Hashable, Codable {
        /// Devices in the room.
        public var devices: Int
        /// The sender's rules every device follows.
        public var rules: TransmitScheduler.Rules
        /// Profile of the token frames.
        public var profile: String = Profile.standard.name
        /// Reverberation time at mid frequencies (s).
        public var rt60: Double = 0.5
        /// Room size (m): length, width, height.
        public var size: [Double] = [7, 5, 2.6]
        /// Devices start at uniformly random times within this many seconds.
        public var startSpread: Double = 1
        /// How long after both have started a pair counts as heard in time (s): the exchange's lost timeout.
        public var window: Double = 10
        /// White noise at each listener: its mean received power from the others over the noise (dB, full band).
        public var snrDB: Double = 10
        /// Levels of the devices differ by up to this much (dB).
        public var levelSpreadDB: Double = 6
        /// Clocks differ from nominal by up to this much (ppm).
        public var ppmSpread: Double = 100
        /// Speaker roll-off corner (Hz) of every device, or nil for flat speakers.
        public var rollOffCornerHz: Double?
        /// Profiles every device listens for (names); nil for every profile the rate carries.
        public var listenProfiles: [String]?
        /// Token length the matcher issues (bytes).
        public var tokenLength: Int = 8
        /// Sample rate (Hz).
        public var sampleRate: Double = 48_000
        /// Whether the matcher gives the devices that hear each other turns (`BroadcastCoordinator`); the
        /// devices follow them and fall back to `rules` outside them.
        public var coordinated: Bool = false
        /// The guard of a coordinated slot after the frame's airtime (s).
        public var slotGuard: Double = 0.08
        /// How far each device's idea of the service's clock is off, at most (s): each device draws its
        /// error uniformly within plus or minus this.
        public var clockError: Double = 0.005
        /// How often the matcher plans (s).
        public var coordinatorTick: Double = 0.1
        /// Whether the devices can play room aliases in their coordinated slots (`Payload.roomAlias`).
        public var roomAliases: Bool = true
        /// Whether every device's decoder cancels the frames it decodes and looks under them for frames they hid
        /// (`StreamingDecoder`'s `cancelsInterference`).
        public var cancelsInterference: Bool = false
        /// Members taking turns from which the matcher gives a room aliases.
        public var aliasRoomSize: Int = BroadcastCoordinator.Rules().aliasRoomSize
        /// Devices with a weak speaker (issue 37): this many devices, drawn from the seed, lose a roll-off loss at
        /// 19 kHz drawn uniformly within ``weakLossDB`` (`RollOffFilter` at its default slope, 24 dB per octave),
        /// instead of ``rollOffCornerHz``.
        public var weakDevices: Int = 0
        /// The range of the weak speakers' loss at 19 kHz (dB): low and high.
        public var weakLossDB: [Double] = [20, 25]
        /// Whether the embedded matcher runs link adaptation (`LinkAdaptation`): a device plays its token frames in
        /// the profile the matcher directs it to (the configured profile, or the robust one). Its sender's rules keep
        /// the configured frame's airtime for their intervals; room aliases stay in the configured profile.
        public var linkAdaptation: Bool = false
        /// Seed of the room, the devices' draws and the noise.
        public var seed: UInt64

        public init(devices: Int, rules: TransmitScheduler.Rules, seed: UInt64) {
            self.devices = devices
            self.rules = rules
            self.seed = seed
        }
    }

    /// What one run measured.
    public struct Result: Sendable, Hashable, Codable {
        /// Devices in the room.
        public var devices: Int
        /// `firstHeard[listener][speaker]`: seconds from the later of their starts until the listener first
        /// decoded the speaker's token; nil if never within the run (and on the diagonal).
        public var firstHeard: [[Double?]]
        /// `firstFound[listener][speaker]`: seconds from the later of their starts until the listener's
        /// subscription found the speaker's message; nil if never.
        public var firstFound: [[Double?]]
        /// Frames decoded that no device sent and that the exchange takes (a payload, as a client's radio reads it:
        /// `Payload(decoded:alias:)`).
        public var falseTokens: Int
        /// Frames sent by all devices.
        public var framesSent: Int
        /// Frames decoded by listeners other than their sender.
        public var framesHeard: Int
        /// Share of the run's time in which at least one device was sending.
        public var bandBusyShare: Double
        /// The window the shares below count (s).
        public var window: Double
        /// When each device started (s).
        public var starts: [Double]
        /// Every frame sent: by which device, and when it started (s).
        public var transmissions: [Transmission]
        /// Every frame decoded by another device: who heard whom, and when (s, the end of the period it
        /// was decoded in).
        public var hearings: [Hearing]
        /// The devices with a weak speaker (``Configuration/weakDevices``), ascending.
        public var weakDevices: [Int] = []
        /// Link adaptation: every profile change the matcher directed (device, time in s, profile name).
        public var profileChanges: [ProfileChange] = []
        /// Every frame decoded that no device sent (``falseTokens`` and ``droppedFalseFrames`` of them): what it was,
        /// for tracing.
        public var falseFrames: [FalseFrame] = []
        /// Frames decoded that no device sent and that the exchange drops (no payload: one byte, an unknown kind, a
        /// token frame claiming the room-alias kind).
        public var droppedFalseFrames: Int { falseFrames.count { !$0.reachesExchange } }
        /// `directSNR[listener][speaker]`: the speaker's direct sound at the listener over the listener's noise (dB,
        /// full band; the reverberation adds to it), 0 on the diagonal: where a link is weak, for tracing.
        public var directSNR: [[Double]] = []

        /// A frame a listener decoded that no device sent: a token no device holds, or an alias nobody holds.
        public struct FalseFrame: Sendable, Hashable, Codable {
            public var listener: Int
            /// When it was decoded (s, the end of the period it was decoded in).
            public var time: Double
            /// The payload as decoded, hexadecimal (an alias frame's as the exchange's room-alias payload).
            public var payload: String
            /// Whether the exchange takes it (a ``CrowdSimulation/Result/falseTokens`` frame) or drops it (a
            /// ``CrowdSimulation/Result/droppedFalseFrames`` one).
            public var reachesExchange: Bool
            public var profile: String
            /// In-band SNR (dB) and the coded bits the code corrected.
            public var snr: Double
            public var correctedBits: Int
            /// The room's tokens of the payload's length (hexadecimal): a payload a few bytes off one of them is
            /// that frame decoded wrong, one like none of them was made of noise and others' symbols.
            public var roomTokens: [String]
        }

        /// A change of a device's token profile, directed by the matcher's link adaptation.
        public struct ProfileChange: Sendable, Hashable, Codable {
            public var device: Int
            public var time: Double
            public var profile: String
        }

        /// Ordered pairs whose speaker is weak, and those of them heard within the window.
        public var weakPairs: (pairs: Int, heard: Int) {
            let weak = Set(weakDevices)
            var pairs = 0, heard = 0
            for listener in 0..<devices {
                for speaker in weak where speaker != listener {
                    pairs += 1
                    if (firstHeard[listener][speaker] ?? .infinity) <= window { heard += 1 }
                }
            }
            return (pairs, heard)
        }

        /// A frame sent: by which device, when it started and how long it lasted (s; a room alias's frame is
        /// shorter than a token's).
        public struct Transmission: Sendable, Hashable, Codable {
            public var device: Int
            public var start: Double
            public var airtime: Double
            /// Whether the frame was played in a slot of the matcher's turns (not on the sender's own rules).
            public var scheduled: Bool = false
        }

        /// A frame decoded by a device other than its sender.
        public struct Hearing: Sendable, Hashable, Codable {
            public var listener: Int
            public var speaker: Int
            public var time: Double
            /// Whether it was the speaker's alias frame (else its token frame).
            public var alias: Bool
            /// In-band SNR (dB) and the coded bits the code corrected: how real frames look beside false ones.
            public var snr: Double
            public var correctedBits: Int
        }

        /// Ordered pairs (listener != speaker).
        public var pairs: Int { devices * (devices - 1) }
        /// Ordered pairs heard within the window.
        public var pairsHeard: Int { count(firstHeard) }
        /// Ordered pairs whose message was found within the window.
        public var pairsFound: Int { count(firstFound) }
        /// Whether every ordered pair was heard within the window.
        public var everyoneHeard: Bool { pairsHeard == pairs }
        /// First-hearing times of the pairs heard within the window (s).
        public var hearingTimes: [Double] { times(firstHeard) }

        func count(_ matrix: [[Double?]]) -> Int {
            matrix.reduce(0) { $0 + $1.reduce(0) { $0 + (($1 ?? .infinity) <= window ? 1 : 0) } }
        }

        func times(_ matrix: [[Double?]]) -> [Double] {
            matrix.flatMap { $0.compactMap { $0 } }.filter { $0 <= window }
        }
    }

    public let configuration: Configuration

    public init(_ configuration: Configuration) { self.configuration = configuration }

    /// One contribution of a device's frame to a listener's microphone: the heard samples from `start`.
    private struct Arrival {
        var start: Int
        var samples: [Float]
        var end: Int { start + samples.count }
    }

    /// The room of the configuration: the devices' places, levels and clocks, and its weak speakers (ascending).
    func makeRoom() throws -> (room: CrowdRoom, weak: [Int]) {
        let c = configuration
        let n = c.devices
        var room = CrowdRoom.random(count: n, size: [c.size[0], c.size[1], c.size[2]], rt60: c.rt60,
                                    levelSpreadDB: c.levelSpreadDB, ppmSpread: c.ppmSpread,
                                    rollOffCornerHz: c.rollOffCornerHz, seed: c.seed)
        // Weak speakers, from a stream of their own (the other draws stay as without them).
        var weak: [Int] = []
        if c.weakDevices > 0 {
            guard c.weakLossDB.count == 2, c.weakLossDB[0] <= c.weakLossDB[1], c.weakLossDB[0] >= 0 else {
                throw ParameterError("the weak speakers' loss is LOW,HIGH (dB, 0 <= LOW <= HIGH)")
            }
            var weakRandom = SeededRandom(seed: c.seed ^ 0x3EA4_5EED)
            var order = Array(0..<n)
            for i in stride(from: n - 1, to: 0, by: -1) { order.swapAt(i, min(i, Int(weakRandom.uniform() * Double(i + 1)))) }
            for d in order.prefix(min(c.weakDevices, n)) {
                let loss = c.weakLossDB[0] + weakRandom.uniform() * (c.weakLossDB[1] - c.weakLossDB[0])
                room.devices[d].rollOffCornerHz = RollOffFilter.corner(forLossDB: loss, at: 19_000, sampleRate: c.sampleRate)
                weak.append(d)
            }
            weak.sort()
        }
        return (room, weak)
    }

    /// The standard deviation of the white noise at each listener: its mean received power from the others (direct
    /// path, frames of power `burstPower`), ``Configuration/snrDB`` above.
    func noiseLevels(in room: CrowdRoom, burstPower: Double) -> [Float] {
        let n = room.devices.count
        return (0..<n).map { to in
            var sum = 0.0
            for from in 0..<n where from != to {
                let g = pow(10, room.devices[from].levelDB / 20) / room.distance(from, to)
                sum += burstPower * g * g
            }
            let mean = n > 1 ? sum / Double(n - 1) : burstPower
            return Float((mean / pow(10, configuration.snrDB / 10)).squareRoot())
        }
    }

    /// `[listener][speaker]`: the speaker's direct sound at the listener over the listener's noise of standard
    /// deviation `noiseSigma[listener]` (dB, full band), 0 on the diagonal.
    func directSNR(in room: CrowdRoom, noiseSigma: [Float], burstPower: Double) -> [[Double]] {
        let n = room.devices.count
        return (0..<n).map { to in
            (0..<n).map { from in
                guard from != to else { return 0 }
                let g = pow(10, room.devices[from].levelDB / 20) / room.distance(from, to)
                return 10 * log10(burstPower * g * g / Double(noiseSigma[to] * noiseSigma[to]))
            }
        }
    }

    /// The profiles every device listens for: ``Configuration/listenProfiles``, or every profile the rate carries.
    func listenProfiles() throws -> [Profile] {
        try (configuration.listenProfiles ?? Profile.carried(atSampleRate: configuration.sampleRate).map(\.name)).map { name in
            guard let p = Profile.named(name) else { throw ParameterError("unknown profile \(name)") }
            return p
        }
    }

    /// Runs the simulation (seconds of CPU grow with devices squared for the sound paths and linearly for
    /// the decoding).
    public func run() throws -> Result {
        let c = configuration
        guard c.devices >= 1, c.size.count == 3 else { throw ParameterError("a crowd needs at least one device and a room of three sizes") }
        guard let profile = Profile.named(c.profile) else { throw ParameterError("unknown profile \(c.profile)") }
        let rate = c.sampleRate
        let n = c.devices
        let (room, weak) = try makeRoom()
        var random = SeededRandom(seed: c.seed ^ 0x5EED_C0DE)

        // The matcher issues every device's token; every device publishes and subscribes.
        var core = MatcherCore(tokenLength: c.tokenLength, generator: SeededRandom(seed: c.seed &+ 17))
        var frames: [[UInt8]] = Array(repeating: [], count: n)
        for d in 0..<n {
            for event in core.handle(.openSession(SessionID("\(d)"), appID: "crowd", broadcasts: true), now: 0) {
                if case .broadcastToken(_, let token) = event { frames[d] = Payload.token(token).frameBytes }
            }
        }
        let owner = Dictionary(frames.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { a, _ in a })
        let starts = (0..<n).map { _ in random.uniform() * c.startSpread }
        let modulator = try Modulator(profile: profile, sampleRate: rate)
        let bursts = try frames.enumerated().map { room.played(try modulator.modulate($0.element), by: $0.offset, sampleRate: rate) }
        let airtime = Double(bursts[0].count) / rate
        // Link adaptation: each device's token profile now, and its robust frames (made when first needed).
        if c.linkAdaptation { core.linkAdaptation = LinkAdaptation() }
        var robust: [Bool] = Array(repeating: false, count: n)
        var robustBursts: [Int: [Float]] = [:]
        let robustModulator = try Modulator(profile: .robust, sampleRate: rate)
        let robustAirtime = Profile.robust.airtime(payloadBytes: frames[0].count)
        // Room-alias frames, modulated when the matcher first hands an alias out: who holds which now, and its sound.
        var aliasBursts: [UInt16: [Float]] = [:]
        var aliasOf: [UInt16?] = Array(repeating: nil, count: n)
        var aliasHolder: [UInt16: Int] = [:]
        let aliasAirtime = profile.aliasAirtime
        var schedulers = (0..<n).map {
            TransmitScheduler(rules: c.rules, airtime: airtime, start: starts[$0], seed: c.seed &+ UInt64($0) &* 7919)
        }
        // The matcher's turns, as `sotto serve` plans them: every device's radio follows them.
        if c.coordinated {
            core.turns = BroadcastCoordinator(rules: .init(slotGuard: c.slotGuard, aliasRoomSize: c.aliasRoomSize))
            for d in 0..<n {
                _ = core.handle(.takeTurns(SessionID("\(d)"), frameAirtime: airtime, aliasAirtime: c.roomAliases ? aliasAirtime : nil), now: 0)
            }
        }
        let clockErrors = (0..<n).map { _ in (2 * random.uniform() - 1) * c.clockError }

        let burstPower = Double(modulator.amplitude * modulator.amplitude) / 2
        let noiseSigma = noiseLevels(in: room, burstPower: burstPower)

        let listenProfiles = try listenProfiles()
        // Devices that can play room aliases listen for their frames (the short alias frame).
        let decoders = try (0..<n).map { _ in try StreamingDecoder(sampleRate: rate, profiles: listenProfiles, aliasFrames: c.roomAliases,
                                                                         cancelsInterference: c.cancelsInterference) }
        let inaudible = listenProfiles.filter { $0.band.lowerBound > 10_000 }
        let senseBand = (inaudible.map(\.band.lowerBound).min() ?? profile.band.lowerBound)...(inaudible.map(\.band.upperBound).max() ?? profile.band.upperBound)
        let monitors = try (0..<n).map { _ in try BandActivityMonitor(band: senseBand, sampleRate: rate) }
        let period = 1024
        let duration = c.startSpread + c.window + airtime + 0.5
        let steps = Int((duration * rate / Double(period)).rounded(.up))
        var arrivals: [[Arrival]] = Array(repeating: [], count: n)
        var heardPaths: [Int: [Float]] = [:]  // from * n + to
        var aliasPaths: [Int: (alias: UInt16, samples: [Float])] = [:]  // from * n + to: the alias last played
        var firstHeard: [[Double?]] = Array(repeating: Array(repeating: nil, count: n), count: n)
        var firstFound: [[Double?]] = Array(repeating: Array(repeating: nil, count: n), count: n)
        var result = Result(devices: n, firstHeard: [], firstFound: [], falseTokens: 0, framesSent: 0, framesHeard: 0,
                            bandBusyShare: 0, window: c.window, starts: starts, transmissions: [], hearings: [], weakDevices: weak)
        result.directSNR = directSNR(in: room, noiseSigma: noiseSigma, burstPower: burstPower)
        var busyUntil = 0
        var busySamples = 0
        var noise = SeededRandom(seed: c.seed ^ 0xA0_15E)
        var block = [Float](repeating: 0, count: period)
        var nextTick = 0.0
        var published = Array(repeating: false, count: n)

        // Each device plays a frame one period after deciding, so it decides one period before its slot; its
        // clock is off the service's by its own error.
        let ahead = Double(period) / rate
        func handle(_ events: [MatcherEvent], at now: Double) {
            for event in events {
                if case .broadcastProfile(let session, let profile) = event, let d = Int(session.value) {
                    robust[d] = profile == .robust
                    result.profileChanges.append(.init(device: d, time: now, profile: robust[d] ? Profile.robust.name : c.profile))
                    // The radio's token frame changed: its turns are for the new airtime.
                    if c.coordinated {
                        handle(core.handle(.takeTurns(session, frameAirtime: robust[d] ? robustAirtime : airtime,
                                                      aliasAirtime: c.roomAliases ? aliasAirtime : nil), now: now), at: now)
                    }
                    continue
                }
                if case .broadcastTurns(let session, let offsets, let follow, let alias) = event, let d = Int(session.value) {
                    if let alias, aliasOf[d] != alias {
                        if let old = aliasOf[d], aliasHolder[old] == d { aliasHolder[old] = nil }
                        aliasOf[d] = alias
                        aliasHolder[alias] = d
                    }
                    schedulers[d].follow(slots: offsets.map { now + $0 + clockErrors[d] - ahead },
                                         until: now + follow + clockErrors[d], now: now, alias: alias != nil)
                    continue
                }
                guard case .found(let subscriber, _, let message) = event,
                      let listener = Int(subscriber.value),
                      let speaker = Int(String(decoding: message.content, as: UTF8.self).dropFirst(7)) else { continue }
                if firstFound[listener][speaker] == nil {
                    firstFound[listener][speaker] = now - max(starts[listener], starts[speaker])
                }
            }
        }

        for step in 0..<steps {
            let first = step * period
            let now = Double(first) / rate
            // Publications and subscriptions start with their devices.
            for d in 0..<n where !published[d] && now >= starts[d] {
                published[d] = true
                let message = try Message(type: "device", content: Array("device \(d)".utf8))
                handle(core.handle(.publish(SessionID("\(d)"), OperationID(1), message, .default), now: now), at: now)
                handle(core.handle(.subscribe(SessionID("\(d)"), OperationID(2), .allMyTypes, .default, lostTimeout: c.window), now: now), at: now)
            }
            // Decisions: a frame decided now starts one period later.
            for d in 0..<n where now >= starts[d] {
                let monitor = monitors[d]
                let idleFor = monitor.isBusy ? 0 : Double(monitor.samplesSeen - monitor.lastBusyEnd) / rate
                let action = schedulers[d].step(now: now, bandIdleFor: idleFor)
                guard action != .wait else { continue }
                let scheduled = schedulers[d].isFollowing
                // The alias a slot names is the one the device holds (the schedule that named it came with it).
                let alias = action == .transmitAlias ? aliasOf[d] : nil
                let burst: [Float]
                if let alias {
                    if aliasBursts[alias] == nil { aliasBursts[alias] = try modulator.modulate(alias: alias) }
                    burst = room.played(aliasBursts[alias]!, by: d, sampleRate: rate)
                } else if robust[d] {
                    if robustBursts[d] == nil { robustBursts[d] = room.played(try robustModulator.modulate(frames[d]), by: d, sampleRate: rate) }
                    burst = robustBursts[d]!
                } else {
                    burst = bursts[d]
                }
                result.framesSent += 1
                let start = first + period
                result.transmissions.append(.init(device: d, start: Double(start) / rate, airtime: Double(burst.count) / rate,
                                                  scheduled: scheduled))
                busySamples += max(0, start + burst.count - max(start, busyUntil))
                busyUntil = max(busyUntil, start + burst.count)
                for to in 0..<n {
                    if let alias {
                        let key = d * n + to
                        if aliasPaths[key]?.alias != alias { aliasPaths[key] = (alias, try room.heard(burst, from: d, to: to, sampleRate: rate)) }
                        arrivals[to].append(Arrival(start: start, samples: aliasPaths[key]!.samples))
                        continue
                    }
                    // Paths of the configured profile's frame at even keys, of the robust one at odd keys.
                    let key = 2 * (d * n + to) + (robust[d] ? 1 : 0)
                    if heardPaths[key] == nil { heardPaths[key] = try room.heard(burst, from: d, to: to, sampleRate: rate) }
                    arrivals[to].append(Arrival(start: start, samples: heardPaths[key]!))
                }
            }
            // Each device hears this period.
            for to in 0..<n {
                for i in 0..<period { block[i] = noiseSigma[to] * Float(noise.gaussian()) }
                var kept: [Arrival] = []
                for arrival in arrivals[to] {
                    let from = max(first, arrival.start), until = min(first + period, arrival.end)
                    if from < until {
                        arrival.samples.withUnsafeBufferPointer { s in
                            for i in from..<until { block[i - first] += s[i - arrival.start] }
                        }
                    }
                    if arrival.end > first + period { kept.append(arrival) }
                }
                arrivals[to] = kept
                guard now >= starts[to] else { continue }
                monitors[to].process(block)
                for frame in decoders[to].process(block) {
                    // Decoder time counts from the device's first period.
                    let heardAt = Double(first + period) / rate
                    // What the exchange takes from it, as a client's radio reads it: an alias frame is the room-alias
                    // payload; a token frame claiming the alias kind is nothing.
                    let payload = Payload(decoded: frame.token, alias: frame.alias)
                    let bytes = frame.alias.map { Payload.roomAlias($0).frameBytes } ?? frame.token
                    let aliasSpeaker: Int? = if case .roomAlias(let alias)? = payload { aliasHolder[alias] } else { nil }
                    guard let speaker = owner[bytes] ?? aliasSpeaker else {
                        if payload != nil { result.falseTokens += 1 }
                        // The tokens of that length, to tell a frame decoded wrong from one made of nothing.
                        let sameLength = owner.keys.filter { $0.count == bytes.count }.map { $0.map { String(format: "%02x", $0) }.joined() }
                        result.falseFrames.append(.init(listener: to, time: heardAt, payload: bytes.map { String(format: "%02x", $0) }.joined(),
                                                        reachesExchange: payload != nil,
                                                        profile: frame.profile, snr: frame.snr, correctedBits: frame.correctedBits,
                                                        roomTokens: sameLength.sorted()))
                        continue
                    }
                    guard speaker != to else { continue }
                    result.framesHeard += 1
                    result.hearings.append(.init(listener: to, speaker: speaker, time: heardAt, alias: frame.alias != nil, snr: frame.snr,
                                                correctedBits: frame.correctedBits))
                    schedulers[to].heard(bytes, at: heardAt)
                    if firstHeard[to][speaker] == nil {
                        firstHeard[to][speaker] = heardAt - max(starts[to], starts[speaker])
                    }
                    if let payload {
                        handle(core.handle(.observe(SessionID("\(to)"), payload, snr: frame.snr, level: frame.level), now: heardAt), at: heardAt)
                    }
                }
            }
            if now >= nextTick {
                // The service ticks its core every coordinator tick (0.1 s); an embedded one every 0.2 s.
                handle(core.handle(.tick, now: now), at: now)
                nextTick = now + (c.coordinated ? c.coordinatorTick : 0.2)
            }
        }
        result.firstHeard = firstHeard
        result.firstFound = firstFound
        let runLength = steps * period
        busySamples -= max(0, busyUntil - runLength)  // frames still on the air at the end count up to it
        result.bandBusyShare = Double(busySamples) / Double(runLength)
        return result
    }

    /// A configuration that cannot run.
    public struct ParameterError: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}

/// Runs and summarises crowd simulations: the `crowd` sweep and its benchmarks.
public enum CrowdSweep {
    /// The named sender rules a sweep can compare.
    public static let ruleNames = ["fixed", "crowd", "coordinated", "coordinated-tokens"]

    /// Rules by name: `fixed` (every 1 s + 0-0.25 s whatever is heard, Sotto's rule before listen-before-talk),
    /// `crowd` (`TransmitScheduler/Rules/crowd`), `coordinated` (the crowd rules until the matcher's turns
    /// reach the device, then the turns, with room aliases in crowded rooms), `coordinated-tokens` (the turns
    /// with tokens only, as before room aliases).
    public static func rules(named name: String) -> TransmitScheduler.Rules? {
        switch name {
        case "fixed": return .fixed()
        case "crowd", "coordinated", "coordinated-tokens": return .crowd
        default: return nil
        }
    }

    /// A configuration of `devices` devices on the rules named `name` (see ``ruleNames``), or nil for an
    /// unknown name.
    public static func configuration(devices: Int, rules name: String, seed: UInt64) -> CrowdSimulation.Configuration? {
        guard let rules = rules(named: name) else { return nil }
        var c = CrowdSimulation.Configuration(devices: devices, rules: rules, seed: seed)
        c.coordinated = name.hasPrefix("coordinated")
        c.roomAliases = name == "coordinated"
        return c
    }

    /// Runs every configuration, two at a time (one per core here), in order of the results.
    public static func run(_ configurations: [CrowdSimulation.Configuration]) throws -> [CrowdSimulation.Result] {
        let results = ResultsBox<CrowdSimulation.Result>(count: configurations.count)
        DispatchQueue.concurrentPerform(iterations: configurations.count) { i in
            results.set(i, Result { try CrowdSimulation(configurations[i]).run() })
        }
        return try results.values.map { try $0!.get() }
    }

    /// Runs every link survey, two at a time, in order of the configurations.
    public static func survey(_ configurations: [CrowdSimulation.Configuration], repeats: Int) throws -> [CrowdLinkSurvey.Result] {
        let results = ResultsBox<CrowdLinkSurvey.Result>(count: configurations.count)
        DispatchQueue.concurrentPerform(iterations: configurations.count) { i in
            results.set(i, Result { try CrowdLinkSurvey(configurations[i], repeats: repeats).run() })
        }
        return try results.values.map { try $0!.get() }
    }

    /// Appends one JSON line per link survey to `path` (`{"links": ...}`), for analysis.
    public static func appendTrace(_ results: [CrowdLinkSurvey.Result], to path: String) throws {
        try appendLines(results.map { ["links": $0] }, to: path)
    }

    /// Appends every room's whole result to `path` as JSON Lines (`{"rules": ..., "result": ...}`), for analysis.
    /// - Parameters:
    ///   - results: the rooms' results.
    ///   - rules: the rules' name, written on every line.
    ///   - path: the file, created if missing.
    public static func appendTrace(_ results: [CrowdSimulation.Result], rules: String, to path: String) throws {
        struct Line: Encodable { var rules: String; var result: CrowdSimulation.Result }
        try appendLines(results.map { Line(rules: rules, result: $0) }, to: path)
    }

    /// Appends `lines` to the file at `path` (made if missing), one JSON object a line.
    static func appendLines(_ lines: [some Encodable], to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var data = Data()
        for line in lines {
            data.append(try encoder.encode(line))
            data.append(0x0A)
        }
        if !FileManager.default.fileExists(atPath: path) { FileManager.default.createFile(atPath: path, contents: nil) }
        guard let handle = FileHandle(forWritingAtPath: path) else { throw CrowdSimulation.ParameterError("cannot write the trace \(path)") }
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: data)
    }

    /// What a set of rooms measured together.
    public struct Summary: Sendable {
        /// Share of ordered pairs heard within the window, over every room.
        public var heardShare: Double
        /// Share of ordered pairs found within the window.
        public var foundShare: Double
        /// Rooms where every ordered pair was heard within the window.
        public var roomsAllHeard: Int
        /// False tokens over every room (``CrowdSimulation/Result/falseTokens``).
        public var falseTokens: Int
        /// False frames the exchange drops, over every room (``CrowdSimulation/Result/droppedFalseFrames``).
        public var droppedFalseFrames: Int
        /// Mean share of time with at least one device sending.
        public var busyShare: Double
        /// Every pair's first hearing within the window (s), sorted.
        public var hearingTimes: [Double]

        public init(_ results: [CrowdSimulation.Result]) {
            let pairs = Double(max(1, results.reduce(0) { $0 + $1.pairs }))
            heardShare = Double(results.reduce(0) { $0 + $1.pairsHeard }) / pairs
            foundShare = Double(results.reduce(0) { $0 + $1.pairsFound }) / pairs
            roomsAllHeard = results.filter(\.everyoneHeard).count
            falseTokens = results.reduce(0) { $0 + $1.falseTokens }
            droppedFalseFrames = results.reduce(0) { $0 + $1.droppedFalseFrames }
            busyShare = results.isEmpty ? 0 : results.reduce(0) { $0 + $1.bandBusyShare } / Double(results.count)
            hearingTimes = results.flatMap(\.hearingTimes).sorted()
        }

        /// The `p` quantile of the first hearings within the window (s); nil when none.
        public func hearingQuantile(_ p: Double) -> Double? {
            guard !hearingTimes.isEmpty else { return nil }
            return hearingTimes[min(hearingTimes.count - 1, Int(p * Double(hearingTimes.count)))]
        }
    }

    private final class ResultsBox<Value: Sendable>: @unchecked Sendable {
        private let lock = NSLock()
        private(set) var values: [Result<Value, any Error>?]
        init(count: Int) { values = Array(repeating: nil, count: count) }
        func set(_ i: Int, _ value: Result<Value, any Error>) { lock.withLock { values[i] = value } }
    }
}
