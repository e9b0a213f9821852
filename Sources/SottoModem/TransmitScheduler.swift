import SottoCodes

/// When one device broadcasts its frames in a band it shares with others: the sender's rules.
///
/// Without rules (``Rules/fixed(interval:jitter:)``) a device sends every `interval` plus 0...`jitter` seconds whatever it
/// hears, which is what Sotto did before: with a handful of devices in a room, their bursts overlap and most
/// are lost. With ``Rules/crowd`` it behaves like CSMA/CA:
/// - **Listen before talk.** When a frame is due, the device draws a random backoff of 0..<window slots
///   and counts them down only while the band has been idle for `idleBeforeTalk`; a busy band freezes the
///   count. A frame due on a band quiet for a while draws from a small window (nobody else is waiting); one
///   due on a busy band from a window that grows with the devices heard, so that the counters of the devices
///   waiting for the same frame to end rarely end in one slot; and from a larger one while the band has been busy
///   most of the time lately, whoever was heard (a crowd's frames collide, so its devices hear few of each other).
/// - **An interval that grows with the room.** The time from one frame to the next is at least
///   `interval`, and at least the airtime of every device heard (itself included) divided by
///   `airtimeShare`: the band's load stays near that share however many devices there are, capped by
///   `maximumInterval` so that a device is still heard within the exchange's lost timeout.
///
/// A value type with no I/O and no clock: the caller steps it with its own time (s) every device period,
/// tells it whether the band is idle (its ``BandActivityMonitor``) and whom it heard, and sends a frame
/// when it answers ``Action/transmit``.
public struct TransmitScheduler: Sendable {
    /// The rules one device follows.
    public struct Rules: Sendable, Hashable {
        /// Shortest time from the start of one frame to the start of the next (s).
        public var interval: Double
        /// Uniform random extra delay per frame, 0...jitter (s).
        public var jitter: Double
        /// Count backoff slots only while the band is idle.
        public var listenBeforeTalk: Bool
        /// A backoff slot (s): longer than the time it takes to hear that another device started (a sense
        /// block, the sound's flight across a room, a device buffer).
        public var slot: Double
        /// How long the band must have been idle before a slot counts (s).
        public var idleBeforeTalk: Double
        /// Slots in the backoff window per device heard (itself included); at least `minimumWindow`.
        public var slotsPerDevice: Double
        /// Smallest backoff window (slots) of a frame that had to wait for the band.
        public var minimumWindow: Int
        /// Smallest backoff window (slots) of a frame that had to wait for a band busy at least `crowdedBusyShare`
        /// of the time lately (over about `loadMemory`): many devices are waiting, heard yet or not (a crowd whose
        /// first frames collided has heard few of its members, and would draw too small a window from them).
        public var crowdedWindow: Int
        /// The share of time the band was busy (0...1) from which the backoff window is at least `crowdedWindow`.
        public var crowdedBusyShare: Double
        /// The time constant of the band's busy share (s).
        public var loadMemory: Double
        /// Backoff window (slots) of a frame that finds the band quiet for `quietBand` seconds when it is due:
        /// nobody else is likely to be waiting, so it need not wait long.
        public var quietWindow: Int
        /// How long the band must have been idle for a due frame to use `quietWindow` (s).
        public var quietBand: Double
        /// Share of the band's time that all devices heard are meant to use together (0 < share <= 1); nil
        /// keeps the interval fixed whatever is heard.
        public var airtimeShare: Double?
        /// Longest interval the adaptation may reach (s).
        public var maximumInterval: Double
        /// How long a device heard counts as present after it was last heard (s).
        public var neighbourMemory: Double
        /// How long to listen after starting before the first frame is due (s): long enough to learn the
        /// band's noise floor and to hear a frame in progress.
        public var listenFirst: Double
        /// A uniformly random extra wait before the first frame, 0...firstFrameSpread (s), so that devices
        /// started together do not all contend at once.
        public var firstFrameSpread: Double
        /// The first frame's extra wait when nothing was heard and the band stayed idle while listening first
        /// (s): a device alone, or the first of a room, speaks soon; nil waits up to `firstFrameSpread` anyway.
        public var quietStartSpread: Double?
        /// When a device is heard for the first time (or again after ``neighbourMemory``), the next frame is
        /// brought forward (once per own frame) to a random time within one airtime per device heard, so that
        /// the newcomer hears this device soon and the devices answering it do not all contend at once.
        public var answerNewcomers: Bool

        public init(interval: Double, jitter: Double, listenBeforeTalk: Bool, slot: Double = 0.06,
                    idleBeforeTalk: Double = 0.04, slotsPerDevice: Double = 3, minimumWindow: Int = 16,
                    crowdedWindow: Int = 32, crowdedBusyShare: Double = 0.5, loadMemory: Double = 3,
                    quietWindow: Int = 4, quietBand: Double = 0.45,
                    airtimeShare: Double?, maximumInterval: Double = 6, neighbourMemory: Double = 10,
                    listenFirst: Double = 0, firstFrameSpread: Double = 0, quietStartSpread: Double? = nil,
                    answerNewcomers: Bool = false) {
            self.interval = interval
            self.jitter = jitter
            self.listenBeforeTalk = listenBeforeTalk
            self.slot = slot
            self.idleBeforeTalk = idleBeforeTalk
            self.slotsPerDevice = slotsPerDevice
            self.minimumWindow = minimumWindow
            self.crowdedWindow = crowdedWindow
            self.crowdedBusyShare = crowdedBusyShare
            self.loadMemory = loadMemory
            self.quietWindow = quietWindow
            self.quietBand = quietBand
            self.airtimeShare = airtimeShare
            self.maximumInterval = maximumInterval
            self.neighbourMemory = neighbourMemory
            self.listenFirst = listenFirst
            self.firstFrameSpread = firstFrameSpread
            self.quietStartSpread = quietStartSpread
            self.answerNewcomers = answerNewcomers
        }

        /// Sotto's rule before listen-before-talk: every `interval` + 0...`jitter` s whatever is heard.
        public static func fixed(interval: Double = 1, jitter: Double = 0.25) -> Rules {
            Rules(interval: interval, jitter: jitter, listenBeforeTalk: false, airtimeShare: nil)
        }

        /// Listen before talk, a backoff window and an interval that grow with the devices heard.
        public static let crowd = Rules(interval: 1, jitter: 0.25, listenBeforeTalk: true, slot: 0.08, airtimeShare: 0.6,
                                        listenFirst: 0.5, firstFrameSpread: 1.5, quietStartSpread: 0.25,
                                        answerNewcomers: true)
    }

    /// What to do now.
    public enum Action: Sendable, Equatable {
        /// Nothing to send now.
        case wait
        /// Start sending the frame now.
        case transmit
        /// Start sending the short frame the schedule's slot names (the matcher's room alias) now.
        case transmitAlias
    }

    /// One slot of a schedule someone else made: when it starts (s) and whether it is for the short frame (the
    /// matcher's room alias) rather than the device's own.
    public struct Slot: Sendable, Hashable {
        public var start: Double
        public var alias: Bool
    }

    /// Where the device is between two frames.
    enum State: Sendable, Equatable {
        /// Listening before the first frame, until `until`.
        case starting(until: Double)
        /// Waiting for the next frame to be due.
        case waiting(until: Double)
        /// Due: counting down `slotsLeft` idle slots, the next one ending at `slotEnds`.
        case contending(slotsLeft: Int, slotEnds: Double)
        /// Sending a frame that started at `started` and ends at `until`.
        case transmitting(started: Double, until: Double)
        /// Following a schedule someone else made (the matcher's turns): sending at each of `slots`, and
        /// nothing else, until `until`.
        case following(slots: [Slot], until: Double)
    }

    public let rules: Rules
    /// Airtime of one frame of this device (s).
    public let airtime: Double
    private(set) var state: State
    private var lastHeard: [[UInt8]: Double] = [:]
    private var generator: SplitMix64
    /// Whether a newcomer already brought the next frame forward since the last one.
    private var answeredSinceLastFrame = false
    /// A schedule received while a frame of the device's own was on the air: followed once it ends.
    private var pendingSchedule: (slots: [Slot], until: Double)?
    /// The share of time the band was busy lately (0...1; an exponential average over about ``Rules/loadMemory``
    /// of the steps outside the device's own frames, from 0 at the start).
    private(set) var busyShare = 0.0
    /// The time of the last step that measured the band (s).
    private var lastMeasured: Double?
    /// How late a scheduled slot may still be used (s): a slot missed by more is skipped.
    public static let slotLateness = 0.05

    /// - Parameters:
    ///   - rules: the sender's rules.
    ///   - airtime: one frame's airtime (s).
    ///   - start: when the device starts listening (s); its first frame is due ``Rules/listenFirst`` later, plus a random
    ///     wait of up to ``Rules/quietStartSpread`` when it heard nothing by then, else up to ``Rules/firstFrameSpread``.
    ///   - seed: seed of the jitter and backoff draws (each device its own).
    public init(rules: Rules, airtime: Double, start: Double, seed: UInt64) {
        self.rules = rules
        self.airtime = airtime
        generator = SplitMix64(seed: seed)
        state = .starting(until: start + rules.listenFirst)
    }

    /// Devices heard within ``Rules/neighbourMemory`` of `now`, not counting this one.
    public func neighbours(at now: Double) -> Int {
        lastHeard.values.reduce(0) { $0 + (now - $1 <= rules.neighbourMemory ? 1 : 0) }
    }

    /// The time from one frame's start to the next's before jitter (s), for `now`.
    public func interval(at now: Double) -> Double {
        guard let share = rules.airtimeShare else { return rules.interval }
        let load = Double(neighbours(at: now) + 1) * airtime / share
        return min(max(rules.interval, load), max(rules.interval, rules.maximumInterval))
    }

    /// The backoff window (slots) for a frame due at `now` on a band idle for `bandIdleFor` seconds.
    func window(at now: Double, bandIdleFor: Double) -> Int {
        let floor = busyShare >= rules.crowdedBusyShare ? max(rules.minimumWindow, rules.crowdedWindow) : rules.minimumWindow
        let crowded = max(floor, Int((rules.slotsPerDevice * Double(neighbours(at: now) + 1)).rounded(.up)))
        return bandIdleFor >= rules.quietBand ? min(rules.quietWindow, crowded) : crowded
    }

    /// Another device's frame was heard at `now`; `sender` identifies it (its frame bytes or token).
    public mutating func heard(_ sender: [UInt8], at now: Double) {
        let isNew = lastHeard[sender].map { now - $0 > rules.neighbourMemory } ?? true
        lastHeard[sender] = now
        if isNew && rules.answerNewcomers && !answeredSinceLastFrame && pendingSchedule == nil, case .waiting(let until) = state, until > now {
            answeredSinceLastFrame = true
            let spread = Double(max(1, neighbours(at: now))) * airtime
            state = .waiting(until: min(until, now + uniform() * spread))
        }
        if lastHeard.count > 4 * 1024 { lastHeard = lastHeard.filter { now - $0.value <= rules.neighbourMemory } }
    }

    /// Follow a schedule made by someone else (the matcher's turns, already in this device's time, s): send
    /// at each of `slots` and nothing else until `until`; then the device's own rules again. A later schedule
    /// adds its slots and moves `until`. A frame on the air is finished first. With `alias`, the slots are for the
    /// short frame the schedule names (``Action/transmitAlias``).
    public mutating func follow(slots: [Double], until: Double, now: Double, alias: Bool = false) {
        let slots = slots.map { Slot(start: $0, alias: alias) }
        func merged(_ earlier: [Slot]) -> [Slot] { Array(Set(earlier + slots)).sorted { ($0.start, $0.alias ? 1 : 0) < ($1.start, $1.alias ? 1 : 0) } }
        switch state {
        case .transmitting:
            pendingSchedule = (merged(pendingSchedule?.slots ?? []), max(until, pendingSchedule?.until ?? until))
        case .following(let earlier, let before):
            state = .following(slots: merged(earlier).filter { $0.start >= now - Self.slotLateness }, until: max(until, before))
        case .starting, .waiting, .contending:
            state = .following(slots: merged([]).filter { $0.start >= now - Self.slotLateness }, until: until)
        }
    }

    /// Whether the device follows someone else's schedule now.
    public var isFollowing: Bool {
        if case .following = state { return true }
        return pendingSchedule != nil
    }

    /// One step at `now` (s). `bandIdleFor` is how long the band has been idle up to now (s; 0 when busy),
    /// as the device's own receiver measures it outside its own transmissions.
    public mutating func step(now: Double, bandIdleFor: Double) -> Action {
        measure(now: now, bandIdleFor: bandIdleFor)
        switch state {
        case .starting(let until):
            guard now >= until else { return .wait }
            // Idle all along (give or take the sensing's own lag) and nobody heard.
            let quiet = neighbours(at: now) == 0 && bandIdleFor >= rules.listenFirst - rules.idleBeforeTalk
            let spread = quiet ? (rules.quietStartSpread ?? rules.firstFrameSpread) : rules.firstFrameSpread
            state = .waiting(until: now + uniform() * spread)
            return step(now: now, bandIdleFor: bandIdleFor)
        case .waiting(let until):
            guard now >= until else { return .wait }
            guard rules.listenBeforeTalk else { return begin(now) }
            let slots = Int(uniform() * Double(window(at: now, bandIdleFor: bandIdleFor)))
            state = .contending(slotsLeft: slots, slotEnds: now + rules.slot)
            return step(now: now, bandIdleFor: bandIdleFor)
        case .contending(let slotsLeft, let slotEnds):
            guard bandIdleFor >= rules.idleBeforeTalk else {
                // Busy: the count freezes, and the current slot starts again once the band is idle.
                state = .contending(slotsLeft: slotsLeft, slotEnds: now + rules.slot)
                return .wait
            }
            if slotsLeft == 0 { return begin(now) }
            guard now >= slotEnds else { return .wait }
            state = .contending(slotsLeft: slotsLeft - 1, slotEnds: slotEnds + rules.slot)
            return slotsLeft - 1 == 0 ? begin(now) : .wait
        case .transmitting(let started, let until):
            guard now >= until else { return .wait }
            if let schedule = pendingSchedule {
                pendingSchedule = nil
                state = .following(slots: schedule.slots, until: schedule.until)
            } else {
                state = .waiting(until: started + interval(at: now) + uniform() * rules.jitter)
            }
            return step(now: now, bandIdleFor: bandIdleFor)
        case .following(var slots, let until):
            slots.removeAll { $0.start < now - Self.slotLateness }
            if let next = slots.first, now >= next.start {
                state = .following(slots: Array(slots.dropFirst()), until: until)
                answeredSinceLastFrame = false
                return next.alias ? .transmitAlias : .transmit
            }
            guard slots.isEmpty, now >= until else {
                state = .following(slots: slots, until: until)
                return .wait
            }
            // The schedule ran out (the service went quiet): the device's own rules again, starting with a
            // random share of an interval so that a whole room does not contend at once.
            state = .waiting(until: now + uniform() * interval(at: now))
            return step(now: now, bandIdleFor: bandIdleFor)
        }
    }

    /// Follows the band's busy share: each step outside the device's own frames (its receiver cannot tell then)
    /// weighs the band's state by the time since the last one, over about ``Rules/loadMemory``. From 0 at the start:
    /// a running mean from the start (which would call a band crowded after one frame heard while listening first)
    /// made a room of five hear fewer of its pairs in the crowd sweep.
    private mutating func measure(now: Double, bandIdleFor: Double) {
        defer { lastMeasured = now }
        if case .transmitting = state { return }
        guard let last = lastMeasured, now > last, rules.loadMemory > 0 else { return }
        busyShare += min(1, (now - last) / rules.loadMemory) * ((bandIdleFor > 0 ? 0 : 1) - busyShare)
    }

    /// Uniform in [0, 1) (jitter and backoff only: nothing secret is drawn here).
    private mutating func uniform() -> Double { Double(generator.next() >> 11) * 0x1p-53 }

    private mutating func begin(_ now: Double) -> Action {
        answeredSinceLastFrame = false
        state = .transmitting(started: now, until: now + airtime)
        return .transmit
    }
}

// Codable where there is Codable (not in Embedded Swift, the WebAssembly build).
#if !hasFeature(Embedded)
extension TransmitScheduler.Rules: Codable {}
#endif
