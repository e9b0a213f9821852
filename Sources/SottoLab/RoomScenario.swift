import Foundation
import SottoTools
import SottoChannel
import SottoDSP
import SottoExchange
import SottoExchangeCore
import SottoModem

/// Several virtual devices in one simulated room, end to end: each broadcasts its matcher token through
/// the real modem on a jittered schedule, each hears the mix of all the others (room response, distance,
/// noise), decodes it with the real streaming decoder, and reports what it heard to one embedded matcher;
/// every device subscribes to the app's messages. Device C stops publishing at `stopAt`; device B walks
/// out of range (its sound drops by 50 dB) at `walkAwayAt`.
public struct RoomScenario: Sendable {
    /// What a run measured.
    public struct Report: Sendable {
        /// Found latency: publication start to the subscriber's found (s), per (subscriber, publisher).
        public var foundLatencies: [Double] = []
        /// Stop (unpublish) to lost (s).
        public var stopToLost: [Double] = []
        /// Walking out of range to lost (s).
        public var walkAwayToLost: [Double] = []
        /// Found or lost events that should not have happened.
        public var falseEvents = 0
        public var framesSent = 0
        public var framesHeard = 0
        /// Frames that overlapped another device's frame in time.
        public var collisions = 0
        /// Receptions of collided frames that were still decoded.
        public var collidedHeard = 0

        public init() {}

        /// Adds another run's measurements to these.
        public mutating func add(_ other: Report) {
            foundLatencies += other.foundLatencies
            stopToLost += other.stopToLost
            walkAwayToLost += other.walkAwayToLost
            falseEvents += other.falseEvents
            framesSent += other.framesSent
            framesHeard += other.framesHeard
            collisions += other.collisions
            collidedHeard += other.collidedHeard
        }
    }

    let devices = ["A", "B", "C"]
    /// Length of the run (s).
    public let duration: Double
    /// When C unpublishes (s).
    public let stopAt: Double
    /// When B walks out of range (s).
    public let walkAwayAt: Double
    /// Repetition: every 1.5 s plus 0-1 s of uniform jitter (mean 2 s, about four times the 0.54 s airtime
    /// of a 9-byte frame), so that three devices rarely collide twice in a row.
    let interval = 1.5
    let jitter = 1.0
    let lostTimeout = 10.0
    let rate = 48_000.0
    public let seed: UInt64

    public init(duration: Double, stopAt: Double, walkAwayAt: Double, seed: UInt64) {
        self.duration = duration
        self.stopAt = stopAt
        self.walkAwayAt = walkAwayAt
        self.seed = seed
    }

    /// Runs the scenario (seeded: the same seed gives the same report).
    /// - Throws: `FFTError` when the room's transforms cannot be allocated or planned (out of memory).
    public func run() throws(FFTError) -> Report {
        var random = SeededRandom(seed: seed)
        var core = MatcherCore(generator: random)
        var tokens: [String: [UInt8]] = [:]
        for name in devices {
            for event in core.handle(.openSession(SessionID(name), appID: "room", broadcasts: true), now: 0) {
                if case .broadcastToken(_, let token) = event { tokens[name] = token }
            }
        }
        // Publications start staggered; every device subscribes at 0.
        let starts: [String: Double] = ["A": 0.5, "B": 2.0, "C": 3.5]
        var messages: [String: Message] = [:]
        for name in devices {
            messages[name] = try! Message(type: "device", content: Array("from \(name)".utf8))
            _ = core.handle(.subscribe(SessionID(name), OperationID(1), .allMyTypes, .default, lostTimeout: lostTimeout), now: 0)
        }

        // Each device's transmissions (it keeps broadcasting its token for the whole session).
        let modulator = try! Modulator(profile: .standard, sampleRate: rate, level: -12)
        let count = Int(duration * rate)
        var transmitted: [String: [Float]] = [:]
        var frameTimes: [String: [Double]] = [:]
        var report = Report()
        for name in devices {
            let burst = try! modulator.modulate(Payload.token(tokens[name]!).frameBytes)
            var x = [Float](repeating: 0, count: count)
            var t = random.uniform() * interval
            while t + Double(burst.count) / rate < duration {
                let start = Int(t * rate)
                for (i, s) in burst.enumerated() { x[start + i] += s }
                frameTimes[name, default: []].append(t)
                t += interval + random.uniform() * jitter
            }
            if name == "B" {  // walks out of range
                for i in Int(walkAwayAt * rate)..<count { x[i] *= 0.003 }
            }
            transmitted[name] = x
            report.framesSent += frameTimes[name]!.count
        }
        let airtime = Profile.standard.airtime(payloadBytes: 9)
        var collided: Set<String> = []
        for a in devices { for b in devices where a < b {
            for ta in frameTimes[a]! { for tb in frameTimes[b]! where abs(ta - tb) < airtime {
                collided.insert("\(a)@\(ta)"); collided.insert("\(b)@\(tb)")
            } }
        } }
        report.collisions = collided.count

        // What each device hears: the others through the room (distance 1-3 m), plus noise.
        var observations: [(time: Double, observer: String, token: [UInt8], snr: Double, level: Double)] = []
        let distances: [String: Double] = ["AB": 1.5, "AC": 3, "BC": 2]
        for receiver in devices {
            var mix = [Float](repeating: 0, count: count)
            for source in devices where source != receiver {
                let pair = [receiver, source].sorted().joined()
                var rng = SeededRandom(seed: seed &+ pair.utf8.reduce(UInt64(0)) { $0 &* 31 &+ UInt64($1) })
                let response = try Room(rt60: 0.4, distance: distances[pair]!).impulseResponse(sampleRate: rate, rng: &rng)
                let heard = try fftConvolve(transmitted[source]!, response)
                let gain = Float(1 / distances[pair]!)
                for i in 0..<count { mix[i] += gain * heard[i] }
            }
            if receiver == "B" {  // B's microphone leaves with it
                for i in Int(walkAwayAt * rate)..<count { mix[i] *= 0.003 }
            }
            Channel.addWhiteNoise(&mix, snrDB: 15, signalPower: Double(modulator.amplitude * modulator.amplitude) / 2 / 9, rng: &random)
            let frames = (try? StreamingDecoder.decode(mix, sampleRate: rate, profiles: [.standard])) ?? []
            for frame in frames {
                observations.append((frame.endTime, receiver, frame.token, frame.snr, frame.level))
                if let owner = tokens.first(where: { Payload.token($0.value).frameBytes == frame.token })?.key,
                   let t = frameTimes[owner]?.min(by: { abs($0 - frame.startTime) < abs($1 - frame.startTime) }) {
                    report.framesHeard += 1
                    if collided.contains("\(owner)@\(t)") { report.collidedHeard += 1 }
                }
            }
        }
        observations.sort { $0.time < $1.time }

        // Replay everything through the matcher in time order.
        var found: [String: Double] = [:]
        var lost: [String: Double] = [:]
        var now = 0.0, next = 0
        var pending = starts.sorted { $0.value < $1.value }
        var stopped = false
        while now < duration {
            now += 0.05
            var events: [MatcherEvent] = []
            while let first = pending.first, first.value <= now {
                events += core.handle(.publish(SessionID(first.key), OperationID(2), messages[first.key]!, .default), now: now)
                pending.removeFirst()
            }
            if !stopped && now >= stopAt {
                events += core.handle(.unpublish(SessionID("C"), OperationID(2)), now: now)
                stopped = true
            }
            while next < observations.count && observations[next].time <= now {
                let o = observations[next]
                if let payload = Payload(frame: o.token) { events += core.handle(.observe(SessionID(o.observer), payload, snr: o.snr, level: o.level), now: o.time) }
                next += 1
            }
            events += core.handle(.tick, now: now)
            for event in events {
                switch event {
                case .found(let s, _, let m):
                    let publisher = String(String(decoding: m.content, as: UTF8.self).dropFirst(5))
                    let key = "\(s.value)<-\(publisher)"
                    if found[key] != nil && lost[key] == nil { report.falseEvents += 1 }
                    if found[key] == nil { report.foundLatencies.append(now - starts[publisher]!) }
                    found[key] = now
                    lost[key] = nil
                case .lost(let s, _, let m):
                    let publisher = String(String(decoding: m.content, as: UTF8.self).dropFirst(5))
                    let key = "\(s.value)<-\(publisher)"
                    lost[key] = now
                    if publisher == "C" && now >= stopAt { report.stopToLost.append(now - stopAt) }
                    else if (publisher == "B" || s.value == "B") && now >= walkAwayAt { report.walkAwayToLost.append(now - walkAwayAt) }
                    else { report.falseEvents += 1 }
                default: break
                }
            }
        }
        return report
    }
}
