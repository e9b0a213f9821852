/// The matcher's side of sharing one band: sessions that hear each other are in one room, and the service
/// gives them turns to broadcast on its clock instead of letting them contend.
///
/// The service learns who hears whom from the sightings it resolves (a listener's session reported another
/// session's token). Sessions joined by such hearings within ``Rules/memory`` form a room. Only the sessions
/// that ``join(_:frameAirtime:)`` take turns (they broadcast, and their radio can follow a schedule); others
/// (listen-only devices, older clients) still join rooms by hearing and being heard. For each room the
/// coordinator plans rounds: a round gives one slot (the member's frame airtime plus ``Rules/slotGuard``) to
/// every member taking turns that still needs to be heard (a member some other member has not heard within ``Rules/refresh``), newcomers and the
/// members a newcomer has not heard first, and ends with ``Rules/openGap`` of free band in which devices the
/// service does not yet place (a newcomer) can be heard through their own listen-before-talk. Members that
/// every other member heard recently stay quiet: the room slows down once everyone has found everyone and
/// speeds up when a newcomer appears.
///
/// Every member of a planned room receives a ``Schedule``: its slots (possibly none) and how long it should
/// follow the service's schedule instead of its own sender's rules. A session that stops receiving
/// schedules (a lost connection, a service restart) goes back to its own rules when the last one ends.
///
/// A value type with no clock: the host feeds it hearings and ticks with the service's time (s).
public struct BroadcastCoordinator: Sendable {
    /// How the coordinator plans.
    public struct Rules: Sendable, Hashable, Codable {
        /// What a slot adds to the member's frame airtime (s): a guard for the delivery of the schedule and the
        /// clocks' disagreement, the sound's flight across the room, device buffers and the room's reverberation.
        public var slotGuard: Double
        /// The earliest a round starts after it is planned (s): time for the schedule to reach every device.
        public var lead: Double
        /// Free band at the end of every round (s), in which devices not yet coordinated can be heard.
        public var openGap: Double
        /// A member heard by every other member within this long needs no slot (s): below the exchange's lost
        /// timeout, so that pairs stay found.
        public var refresh: Double
        /// How long a hearing joins two sessions in one room (s).
        public var memory: Double
        /// How long after its room's planned rounds end a member keeps following the service (s).
        public var hold: Double
        /// Rounds are planned at most once per slot of this length of the service's time (s), however often it
        /// ticks (a service ticks on every log entry).
        public static let planInterval = 0.1

        /// - Parameters:
        ///   - slotGuard: what a slot adds to the member's frame airtime (s).
        ///   - lead: the earliest a round starts after it is planned (s).
        ///   - openGap: free band at the end of every round (s).
        ///   - refresh: how long a hearing by every other member spares a member its slot (s).
        ///   - memory: how long a hearing joins two sessions in one room (s).
        ///   - hold: how long members keep following after the planned rounds end (s).
        public init(slotGuard: Double = 0.08, lead: Double = 0.3, openGap: Double = 0.5, refresh: Double = 5,
                    memory: Double = 10, hold: Double = 2) {
            self.slotGuard = slotGuard
            self.lead = lead
            self.openGap = openGap
            self.refresh = refresh
            self.memory = memory
            self.hold = hold
        }
    }

    /// What one member of a room is told: when to broadcast, and until when to follow the service's schedule
    /// rather than its own sender's rules (service time, s).
    public struct Schedule: Sendable, Hashable {
        public var session: SessionID
        /// Starts of this member's slots, in order (service time, s); empty for a member that need not send.
        public var slots: [Double]
        /// Until when the member follows the service (service time, s).
        public var until: Double
    }

    public let rules: Rules
    /// `heard[speaker][listener]`: when `listener` last heard `speaker` (service time, s).
    var heard: [SessionID: [SessionID: Double]] = [:]
    /// The frame airtime of each member that takes turns (s).
    var airtimes: [SessionID: Double] = [:]
    /// When the last slot planned for each member's room ends (service time, s); the open gap follows it.
    var slotsEnd: [SessionID: Double] = [:]
    /// The start of each member's last planned slot (service time, s).
    var lastSlot: [SessionID: Double] = [:]
    /// The plan slot (``Rules/planInterval``) in which rounds were last planned.
    var lastPlan: Double?
    /// Until when each member's room was planned to stay quiet (service time, s): a newcomer ends it early.
    var quietUntil: [SessionID: Double] = [:]

    /// - Parameter rules: how the coordinator plans.
    public init(rules: Rules) { self.rules = rules }

    /// `listener`'s session decoded `speaker`'s token at `now` (service time, s).
    /// Only hearings with a session that takes turns at one end or the other are kept (nothing at all while no
    /// session takes turns): a hearing between two others places no slot (two turn-takers a chain of listen-only
    /// devices would join have not heard each other).
    public mutating func heard(speaker: SessionID, by listener: SessionID, at now: Double) {
        guard speaker != listener, airtimes[speaker] != nil || airtimes[listener] != nil else { return }
        heard[speaker, default: [:]][listener] = now
    }

    /// `session` broadcasts frames of `frameAirtime` (s) and follows the turns it is given.
    public mutating func join(_ session: SessionID, frameAirtime: Double) {
        airtimes[session] = frameAirtime
    }

    /// `session` no longer takes turns (it still joins rooms by hearing and being heard).
    public mutating func leave(_ session: SessionID) {
        airtimes[session] = nil
    }

    /// Whether `session` takes turns.
    public func takesTurns(_ session: SessionID) -> Bool { airtimes[session] != nil }

    /// `session` ended: it takes no more slots and joins no room.
    public mutating func remove(_ session: SessionID) {
        airtimes[session] = nil
        heard[session] = nil
        for speaker in Array(heard.keys) {
            heard[speaker]?[session] = nil
            if heard[speaker]?.isEmpty == true { heard[speaker] = nil }
        }
        slotsEnd[session] = nil
        lastSlot[session] = nil
        quietUntil[session] = nil
    }

    /// The rooms as they stand at `now`: sets of sessions joined by hearings within ``Rules/memory``, two
    /// members at least, each sorted by session.
    public func rooms(at now: Double) -> [[SessionID]] {
        var parent: [SessionID: SessionID] = [:]
        // Union-find whose root is the smallest member (so the result does not depend on dictionary order), with
        // path halving.
        func root(_ s: SessionID) -> SessionID {
            var r = s
            while let p = parent[r], p != r {
                let grand = parent[p] ?? p
                parent[r] = grand
                r = grand
            }
            return r
        }
        for (speaker, listeners) in heard {
            for (listener, time) in listeners where now - time <= rules.memory {
                if parent[speaker] == nil { parent[speaker] = speaker }
                if parent[listener] == nil { parent[listener] = listener }
                let a = root(speaker), b = root(listener)
                if a != b { if a.value < b.value { parent[b] = a } else { parent[a] = b } }
            }
        }
        var rooms: [SessionID: [SessionID]] = [:]
        for s in parent.keys { rooms[root(s), default: []].append(s) }
        return rooms.values.map { $0.sorted { $0.value < $1.value } }.filter { $0.count >= 2 }.sorted { $0[0].value < $1[0].value }
    }

    /// Plans the rounds due at `now` (service time, s): for every room whose planned round ends within
    /// ``Rules/lead``, the next round; for a room a newcomer joined, slots appended to the round under way.
    /// Returns the schedules to send, one per member taking turns of every room planned.
    /// Plans at most once per ``Rules/planInterval``, and not at all while no session takes turns.
    public mutating func tick(now: Double) -> [Schedule] {
        let plan = ((now + 1e-9) / Rules.planInterval).rounded(.down)
        guard plan != lastPlan else { return [] }
        lastPlan = plan
        guard !airtimes.isEmpty else {
            heard = [:]; slotsEnd = [:]; lastSlot = [:]; quietUntil = [:]
            return []
        }
        // Hearings older than the memory no longer join anyone (`rooms` skips them); they are dropped once a second.
        if Int(plan) % 10 == 0 {
            for speaker in Array(heard.keys) {
                heard[speaker] = heard[speaker]?.filter { now - $0.value <= rules.memory }
                if heard[speaker]?.isEmpty == true { heard[speaker] = nil }
            }
        }
        var schedules: [Schedule] = []
        let rooms = rooms(at: now)
        // A session in no room (it left, or was never heard) is a newcomer when it next joins one.
        let inRooms = Set(rooms.joined())
        for session in Set(slotsEnd.keys).union(quietUntil.keys).union(lastSlot.keys) where !inRooms.contains(session) {
            slotsEnd[session] = nil; quietUntil[session] = nil; lastSlot[session] = nil
        }
        for room in rooms {
            let planned = room.compactMap { slotsEnd[$0] }.max()
            let roundEnd = planned.map { $0 + rules.openGap } ?? now
            let quiet = room.compactMap { quietUntil[$0] }.max() ?? now
            let newcomer = room.contains { airtimes[$0] != nil && slotsEnd[$0] == nil && quietUntil[$0] == nil }
            let due = roundEnd - now <= rules.lead && quiet - now <= rules.lead
            guard due || newcomer else { continue }
            // A newcomer's slots follow the last one planned, before the open gap: it need not wait a round.
            let start = due ? max(roundEnd, now + rules.lead) : max(planned ?? now, now + rules.lead)
            // Who still needs to be heard, and by how many members; a member whose slot is still to come is
            // heard then.
            let needs: [(session: SessionID, unheard: Int, stale: Int, oldest: Double)] = room.compactMap { speaker in
                guard airtimes[speaker] != nil else { return nil }
                if let slot = lastSlot[speaker], slot > now { return nil }
                let listeners = heard[speaker] ?? [:]
                var unheard = 0, stale = 0
                var oldest = Double.infinity
                for listener in room where listener != speaker {
                    guard let time = listeners[listener] else { unheard += 1; oldest = -.infinity; continue }
                    if start - time >= rules.refresh { stale += 1 }
                    oldest = min(oldest, time)
                }
                return unheard + stale > 0 ? (speaker, unheard, stale, oldest) : nil
            }
            if needs.isEmpty {
                // Everyone heard everyone lately (or will in the slots planned): the room stays quiet until the
                // first hearing grows stale.
                // Over the members that take turns only (the others' hearings would end it at once, and again on
                // every plan).
                var next = Double.infinity
                for speaker in room where airtimes[speaker] != nil {
                    for listener in room where listener != speaker { next = min(next, (heard[speaker]?[listener] ?? now) + rules.refresh) }
                }
                if !next.isFinite { next = now + rules.refresh }
                let quietEnd = max(next, start, roundEnd)
                for member in room where airtimes[member] != nil {
                    quietUntil[member] = quietEnd
                    schedules.append(Schedule(session: member, slots: [], until: quietEnd + rules.hold))
                }
                continue
            }
            // Newcomers' needs first (members most never heard), then the longest unheard.
            let order = needs.sorted {
                if $0.unheard != $1.unheard { return $0.unheard > $1.unheard }
                if $0.oldest != $1.oldest { return $0.oldest < $1.oldest }
                return $0.session.value < $1.session.value
            }
            var slots: [SessionID: [Double]] = [:]
            var end = start
            for need in order {
                slots[need.session] = [end]
                lastSlot[need.session] = end
                end += (airtimes[need.session] ?? 0) + rules.slotGuard
            }
            for member in room where airtimes[member] != nil {
                slotsEnd[member] = end
                quietUntil[member] = nil
                schedules.append(Schedule(session: member, slots: slots[member] ?? [], until: end + rules.openGap + rules.hold))
            }
        }
        return schedules
    }
}
