/// The matcher's side of sharing one band: sessions that hear each other are in one room, and the service
/// gives them turns to broadcast on its clock instead of letting them contend.
///
/// The service learns who hears whom from the sightings it resolves (a listener's session reported another
/// session's token). Sessions joined by such hearings within ``Rules/memory`` form a room. Only the sessions
/// that ``join(_:frameAirtime:aliasAirtime:)`` take turns (they broadcast, and their radio can follow a schedule);
/// others (listen-only devices, older clients) still join rooms by hearing and being heard. For each room the
/// coordinator plans slots a few at a time, ``Rules/horizon`` beyond ``Rules/lead``: each slot (the member's frame
/// airtime plus ``Rules/slotGuard``) goes to a member taking turns that still needs to be heard (some other member
/// has not heard it within ``Rules/refresh``), those unheard by the most members first. Because every plan
/// chooses from the latest hearings, a member heard by everyone gets no more slots, one some member missed comes
/// round again as soon as its frame's hearings had time to arrive (``Rules/settle``), and a newcomer is placed
/// within the horizon. Once every member was heard by every other lately, the room goes quiet (after
/// ``Rules/openGap``, in which devices the service does not yet place can be heard on their own rules) until the
/// first hearing grows stale: the room slows down once everyone has found everyone and speeds up when a newcomer
/// appears. Rooms planned apart that a hearing joins are planned at once: a quiet spell one of them was given does
/// not hold for the merged room.
///
/// In a crowded room (``Rules/aliasRoomSize`` members taking turns or more) every member that can play one is given
/// a **room alias** (``Payload/roomAlias(_:)``, 12 bits drawn from the matcher's generator, unique among the
/// aliases held while few are, else within the room) and plays it instead of its token: the modem's alias frame
/// (0.236 s of the default profile) instead of a token frame of nine bytes (0.54 s), so that slots are about half as long. An alias resolves only among the sessions of the listener's
/// room (``session(withAlias:heardBy:)``): heard anywhere else it names nobody, and guessing one gains nothing a
/// session could not hear. At least every ``Rules/fullTokenEvery`` one slot (of the plan's members, the one whose
/// token was on the air least lately) carries the full token, so that a device the service has not placed yet (a
/// listen-only one, or one whose own frames were lost) joins the room by hearing it. A member whose alias only a
/// few members missed (``Rules/tokenAfterAliasMissedBy``) plays its token in its next slot: a listener that fails
/// a speaker's alias frame tends to fail it again, and usually hears the token.
///
/// **Rooms that share the air.** Two rooms planned apart are usually far apart, and their slots may overlap. But
/// the groups of one physical room that first heard different frames are planned apart too, and if their slots
/// overlap they go on not hearing each other (in the crowd sweep, most of the pairs the turns lost). The coordinator
/// learns it from its own plans: once a slot's hearings had time to arrive (``Rules/settle``), a slot that fewer than
/// half of its room's other members heard (not counting those that reported the speaker too lately to report it
/// again, `ExchangeLimits/sightingReportInterval`), while a slot of another room was on the air, joins the two speakers'
/// rooms on one timeline (``sharesAir(_:_:at:)``) for ``Rules/memory``: their slots no longer overlap, so their
/// frames can be heard and the rooms merge. A false join (a slot lost to noise while a distant room's overlapped)
/// costs airtime, not hearings: the two rooms take turns on the band until the join is forgotten. Before anything
/// can be learnt, rooms that form together are often groups of one crowd that started together: a new room (none of
/// its members' slots judged yet) is planned after the slots of the other new rooms when they end within twice
/// ``Rules/horizon`` beyond the lead, and while they end later waits for a later plan if it still has slots to come
/// (so that rooms forming in numbers elsewhere wait at most that long). The first slot of one group is then heard by
/// the others alone on the air, and the groups become one room before their slots could collide.
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
        /// The earliest a slot starts after it is planned (s): time for the schedule to reach every device.
        public var lead: Double
        /// Free band after a room's last planned slot before it goes quiet (s), in which devices not yet coordinated
        /// can be heard.
        public var openGap: Double
        /// A member heard by every other member within this long needs no slot (s): below the exchange's lost
        /// timeout, so that pairs stay found.
        public var refresh: Double
        /// How long a hearing joins two sessions in one room (s).
        public var memory: Double
        /// How long after its room's planned slots end a member keeps following the service (s).
        public var hold: Double
        /// Members taking turns from which a room is crowded: its members that can play one get room aliases.
        public var aliasRoomSize: Int
        /// How far beyond the lead slots are planned (s): a few slots at a time, each plan from the latest hearings.
        public var horizon: Double
        /// How long after a member's frame ends its hearings are awaited before it may get another slot (s):
        /// decoding and the report's way to the service.
        public var settle: Double
        /// In a crowded room, a member's token (rather than its alias) is on the air at least this often (s).
        public var fullTokenEvery: Double
        /// Rounds are planned at most once per slot of this length of the service's time (s), however often it
        /// ticks (a service ticks on every log entry).
        public static let planInterval = 0.1
        /// A member of a crowded room whose alias slot was missed by at least one and at most this many members of
        /// its room plays its token in its next slot (2: measured with the crowd sweep, in the Benchmarks record).
        public static let tokenAfterAliasMissedBy = 2

        /// - Parameters:
        ///   - slotGuard: what a slot adds to the member's frame airtime (s).
        ///   - lead: the earliest a slot starts after it is planned (s).
        ///   - openGap: free band after a room's last planned slot before it goes quiet (s).
        ///   - refresh: how long a hearing by every other member spares a member its slot (s).
        ///   - memory: how long a hearing joins two sessions in one room (s).
        ///   - hold: how long members keep following after the planned slots end (s).
        ///   - aliasRoomSize: members taking turns from which a room's members get room aliases.
        ///   - horizon: how far beyond the lead slots are planned (s).
        ///   - settle: how long after a member's frame its hearings are awaited before another slot (s).
        ///   - fullTokenEvery: how often, at least, a crowded room has a token on the air (s).
        public init(slotGuard: Double = 0.08, lead: Double = 0.3, openGap: Double = 0.5, refresh: Double = 5,
                    memory: Double = 10, hold: Double = 2, aliasRoomSize: Int = 4, horizon: Double = 1,
                    settle: Double = 0.3, fullTokenEvery: Double = 3) {
            self.slotGuard = slotGuard
            self.lead = lead
            self.openGap = openGap
            self.refresh = refresh
            self.memory = memory
            self.hold = hold
            self.aliasRoomSize = aliasRoomSize
            self.horizon = horizon
            self.settle = settle
            self.fullTokenEvery = fullTokenEvery
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
        /// The room alias to play in these slots instead of the token; nil: the token.
        public var alias: UInt16?
    }

    public let rules: Rules
    /// `heard[speaker][listener]`: when `listener` last heard `speaker` (service time, s).
    var heard: [SessionID: [SessionID: Double]] = [:]
    /// The frame airtime of each member that takes turns (s).
    var airtimes: [SessionID: Double] = [:]
    /// The airtime of a room-alias frame of each member that can play one (s).
    var aliasAirtimes: [SessionID: Double] = [:]
    /// The room alias of each member of a crowded room that was given one.
    var aliases: [SessionID: UInt16] = [:]
    /// The members holding each alias (derived from ``aliases``).
    var aliasHolders: [UInt16: Set<SessionID>] = [:]
    /// The room of every session in one at the last plan: its smallest member.
    var roomOf: [SessionID: SessionID] = [:]
    /// When each member's last full-token slot was planned (service time, s).
    var lastFullToken: [SessionID: Double] = [:]
    /// Until when each member was last told to follow (service time, s).
    var followUntil: [SessionID: Double] = [:]
    /// When the last slot planned for each member's room ends (service time, s); the open gap follows it.
    var slotsEnd: [SessionID: Double] = [:]
    /// The start of each member's last planned slot (service time, s).
    var lastSlot: [SessionID: Double] = [:]
    /// The plan slot (``Rules/planInterval``) in which slots were last planned.
    var lastPlan: Double?
    /// Until when each member's room was planned to stay quiet (service time, s): a newcomer ends it early.
    var quietUntil: [SessionID: Double] = [:]
    /// The slots planned lately, in order of their start: judged once their hearings had time to arrive, and kept
    /// while a later one may overlap them.
    var recentSlots: [PlannedSlot] = []
    /// Sessions of rooms planned apart whose slots overlapped while one of them went unheard, and when it was
    /// learnt (service time, s): their rooms share the air.
    var sharedAir: [SessionPair: Double] = [:]
    /// When the slots planned for new rooms end (service time, s); nil once past.
    var newRoomsEnd: Double?

    /// A slot as planned: whose, and when its frame is on the air (service time, s).
    struct PlannedSlot: Sendable, Hashable {
        var session: SessionID
        /// When the frame starts (s).
        var start: Double
        /// When the frame ends, without the slot's guard (s).
        var end: Double
        /// Whether its hearings were counted.
        var judged = false
    }

    /// Two sessions, the smaller first.
    struct SessionPair: Sendable, Hashable {
        let first: SessionID
        let second: SessionID
        init(_ a: SessionID, _ b: SessionID) {
            (first, second) = a.value < b.value ? (a, b) : (b, a)
        }
    }

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

    /// `session` broadcasts frames of `frameAirtime` (s) and follows the turns it is given; with an
    /// `aliasAirtime` (s), it can play a room alias (``Payload/roomAlias(_:)``) of that airtime in its slots.
    public mutating func join(_ session: SessionID, frameAirtime: Double, aliasAirtime: Double? = nil) {
        airtimes[session] = frameAirtime
        aliasAirtimes[session] = aliasAirtime
    }

    /// `session` no longer takes turns (it still joins rooms by hearing and being heard).
    public mutating func leave(_ session: SessionID) {
        airtimes[session] = nil
        aliasAirtimes[session] = nil
    }

    /// The session of `listener`'s room that holds room alias `alias` as of the last plan; nil when the listener
    /// is in no room, or no member (or more than one, for a moment after two rooms merged) holds it.
    public func session(withAlias alias: UInt16, heardBy listener: SessionID) -> SessionID? {
        guard let room = roomOf[listener], let holders = aliasHolders[alias] else { return nil }
        var found: SessionID?
        for holder in holders where holder != listener && roomOf[holder] == room {
            if found != nil { return nil }
            found = holder
        }
        return found
    }

    /// The room alias `session` holds, if any.
    public func alias(of session: SessionID) -> UInt16? { aliases[session] }

    mutating func setAlias(_ alias: UInt16?, of session: SessionID) {
        if let old = aliases[session] {
            aliasHolders[old]?.remove(session)
            if aliasHolders[old]?.isEmpty == true { aliasHolders[old] = nil }
        }
        aliases[session] = alias
        if let alias { aliasHolders[alias, default: []].insert(session) }
    }

    /// Gives every member of `room` that can play one a room alias, unique among every alias held while that is
    /// easy (fewer than a quarter of them are), else within the room; a member sharing its alias with another of
    /// the room (two rooms merged) draws a new one.
    private mutating func assignAliases(in room: [SessionID], using generator: inout some RandomNumberGenerator) {
        var inRoom = Set<UInt16>()
        let everywhere = aliasHolders.count < (Int(Payload.maxRoomAlias) + 1) / 4
        for member in room where aliasAirtimes[member] != nil {
            if let alias = aliases[member], !inRoom.contains(alias) { inRoom.insert(alias); continue }
            var alias: UInt16
            repeat {
                alias = UInt16.random(in: 0...Payload.maxRoomAlias, using: &generator)
            } while inRoom.contains(alias) || (everywhere && aliasHolders[alias] != nil)
            setAlias(alias, of: member)
            inRoom.insert(alias)
        }
    }

    /// Whether `session` takes turns.
    public func takesTurns(_ session: SessionID) -> Bool { airtimes[session] != nil }

    /// Whether the rooms of `a` and `b` were found to share the air within ``Rules/memory`` of `now`: a slot of one
    /// went unheard while a slot of the other was on the air (service time, s).
    public func sharesAir(_ a: SessionID, _ b: SessionID, at now: Double) -> Bool {
        sharedAir[SessionPair(a, b)].map { now - $0 <= rules.memory } ?? false
    }

    /// The longest a frame can be on the air (s): how far back a slot that overlaps another can start.
    static let longestFrame = Double(ExchangeLimits.maxFrameAirtimeMs) / 1000

    /// The index of the first recent slot that starts at or after `time`.
    func firstSlot(startingFrom time: Double) -> Int {
        var low = 0, high = recentSlots.count
        while low < high {
            let middle = (low + high) / 2
            if recentSlots[middle].start < time { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Whether a listener whose last reported hearing of a speaker was at `last` (service time, s) would not report
    /// hearing `slot`'s frame: a client reports a payload it still hears at most every
    /// `ExchangeLimits.sightingReportInterval`, so its silence says nothing.
    static func reportWithheld(after last: Double, for slot: PlannedSlot) -> Bool {
        last < slot.start && slot.end - last < ExchangeLimits.sightingReportInterval
    }

    /// How many of `listeners` (the speaker aside) reported hearing `slot` (service time, s), and how many missed it;
    /// those whose report would have been withheld (``reportWithheld(after:for:)``) are in neither.
    func hearings(of slot: PlannedSlot, by listeners: [SessionID]) -> (heard: Int, missed: Int) {
        let reported = heard[slot.session] ?? [:]
        var heardBy = 0, missed = 0
        for listener in listeners where listener != slot.session {
            let last = reported[listener] ?? -.infinity
            if last >= slot.start { heardBy += 1 } else if !Self.reportWithheld(after: last, for: slot) { missed += 1 }
        }
        return (heardBy, missed)
    }

    /// Keeps a planned slot, in order of start.
    mutating func remember(_ slot: PlannedSlot) {
        recentSlots.insert(slot, at: firstSlot(startingFrom: slot.start.nextUp))
    }

    /// Counts the hearings of the slots whose hearings had time to arrive: a slot fewer than half of its room's
    /// other members heard, while a slot of a session of another room was on the air, joins the two (`room`: each
    /// session's room, by its smallest member; `members`: each room's members). Then forgets slots no later one
    /// can overlap.
    mutating func judgeSlots(now: Double, room: [SessionID: SessionID], members: [SessionID: [SessionID]]) {
        for index in recentSlots.indices where !recentSlots[index].judged && recentSlots[index].end + rules.settle <= now {
            recentSlots[index].judged = true
            let slot = recentSlots[index]
            guard let home = room[slot.session], let listeners = members[home], listeners.count > 1 else { continue }
            let (heardBy, missed) = hearings(of: slot, by: listeners)
            guard heardBy < missed else { continue }
            var other = firstSlot(startingFrom: slot.start - Self.longestFrame)
            while other < recentSlots.count, recentSlots[other].start < slot.end {
                let overlapping = recentSlots[other]
                other += 1
                guard overlapping.end > slot.start, let away = room[overlapping.session], away != home else { continue }
                sharedAir[SessionPair(slot.session, overlapping.session)] = now
            }
        }
        let keep = now - rules.settle - 2 * Self.longestFrame
        recentSlots.removeAll { $0.judged && $0.end < keep }
    }

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
        aliasAirtimes[session] = nil
        setAlias(nil, of: session)
        roomOf[session] = nil
        lastFullToken[session] = nil
        followUntil[session] = nil
        recentSlots.removeAll { $0.session == session }
        sharedAir = sharedAir.filter { $0.key.first != session && $0.key.second != session }
    }

    /// The rooms as they stand at `now`: sets of sessions joined by hearings within ``Rules/memory``, two
    /// members at least, each sorted by session.
    public func rooms(at now: Double) -> [[SessionID]] {
        var joined = SessionUnion()
        for (speaker, listeners) in heard {
            for (listener, time) in listeners where now - time <= rules.memory { joined.join(speaker, listener) }
        }
        var rooms: [SessionID: [SessionID]] = [:]
        for s in joined.sessions { rooms[joined.root(s), default: []].append(s) }
        return rooms.values.map { $0.sorted { $0.value < $1.value } }.filter { $0.count >= 2 }.sorted { $0[0].value < $1[0].value }
    }

    /// Plans the slots due at `now` (service time, s): for every room whose planned slots end within ``Rules/lead``
    /// plus ``Rules/horizon`` (or that a newcomer joined), the next few slots, or a quiet spell.
    /// Returns the schedules to send, one per member taking turns of every room planned.
    /// Plans at most once per ``Rules/planInterval``, and not at all while no session takes turns.
    /// - Parameters:
    ///   - now: the service's time (s).
    ///   - generator: where room aliases are drawn from (the matcher's: every replica draws alike).
    public mutating func tick(now: Double, using generator: inout some RandomNumberGenerator) -> [Schedule] {
        let plan = ((now + 1e-9) / Rules.planInterval).rounded(.down)
        guard plan != lastPlan else { return [] }
        lastPlan = plan
        guard !airtimes.isEmpty else {
            heard = [:]; slotsEnd = [:]; lastSlot = [:]; quietUntil = [:]
            aliases = [:]; aliasHolders = [:]; roomOf = [:]; lastFullToken = [:]; followUntil = [:]
            recentSlots = []; sharedAir = [:]; newRoomsEnd = nil
            return []
        }
        // Hearings older than the memory no longer join anyone (`rooms` skips them); they are dropped once a second.
        if Int(plan) % 10 == 0 {
            for speaker in Array(heard.keys) {
                heard[speaker] = heard[speaker]?.filter { now - $0.value <= rules.memory }
                if heard[speaker]?.isEmpty == true { heard[speaker] = nil }
            }
            sharedAir = sharedAir.filter { now - $0.value <= rules.memory }
            if let end = newRoomsEnd, end < now { newRoomsEnd = nil }
        }
        var schedules: [Schedule] = []
        let rooms = rooms(at: now)
        // A session in no room (it left, or was never heard) is a newcomer when it next joins one.
        let inRooms = Set(rooms.joined())
        for session in Set(slotsEnd.keys).union(quietUntil.keys).union(lastSlot.keys).union(aliases.keys).union(lastFullToken.keys)
            .union(followUntil.keys) where !inRooms.contains(session) {
            slotsEnd[session] = nil; quietUntil[session] = nil; lastSlot[session] = nil; followUntil[session] = nil
            // Out of every room its alias names nobody; a new one is drawn when it joins one again.
            setAlias(nil, of: session); lastFullToken[session] = nil
        }
        let previousRoomOf = roomOf
        roomOf = [:]
        for room in rooms { for member in room { roomOf[member] = room[0] } }
        judgeSlots(now: now, room: roomOf, members: Dictionary(uniqueKeysWithValues: rooms.map { ($0[0], $0) }))
        // Rooms that share the air are planned on one timeline: each band's rooms by their smallest member, and
        // when the slots planned for the band end.
        var band = SessionUnion()
        for (pair, time) in sharedAir where now - time <= rules.memory {
            guard let a = roomOf[pair.first], let b = roomOf[pair.second], a != b else { continue }
            band.join(a, b)
        }
        var bandEnd: [SessionID: Double] = [:]
        for room in rooms where band.contains(room[0]) {
            guard let end = room.compactMap({ slotsEnd[$0] }).max() else { continue }
            let root = band.root(room[0])
            bandEnd[root] = max(bandEnd[root] ?? end, end)
        }
        for room in rooms {
            // Rooms planned apart that a hearing joined: the members of the two have not heard each other, so a quiet
            // spell one of them was given does not hold for the merged room (it would leave the band idle while its
            // members' planned slots run out), and the room is planned at once, as for a newcomer.
            let merged = Set(room.compactMap { previousRoomOf[$0] }).count > 1
            if merged { for member in room { quietUntil[member] = nil } }
            let planned = room.compactMap { slotsEnd[$0] }.max()
            let quiet = room.compactMap { quietUntil[$0] }.max() ?? now
            let newcomer = merged || room.contains { airtimes[$0] != nil && slotsEnd[$0] == nil && quietUntil[$0] == nil }
            // Slots are planned a little at a time, `horizon` beyond the lead, so that each plan chooses from the
            // latest hearings: a member heard by everyone gets no more, one some member missed comes round again
            // soon, and a newcomer is placed within the horizon rather than after a whole round.
            let due = (planned ?? now) - now <= rules.lead + rules.horizon && quiet - now <= rules.lead
            let crowded = room.reduce(0) { $0 + (airtimes[$1] != nil ? 1 : 0) } >= rules.aliasRoomSize
            if crowded { assignAliases(in: room, using: &generator) }
            guard due || newcomer else { continue }
            // After the slots of the rooms it shares the air with.
            let onAir = band.contains(room[0]) ? band.root(room[0]) : nil
            var start = max(planned ?? now, now + rules.lead, onAir.flatMap { bandEnd[$0] } ?? -.infinity)
            // A new room (none of its members' slots judged yet) follows the slots of the other new rooms when they
            // end within two horizons beyond the lead: rooms that form together are often groups of one crowd whose
            // first frames collided, and slots planned beside each other would collide again (in the crowd sweep, a
            // bound of one horizon let the second group's slots overlap the first's whole batch).
            let new = room.allSatisfy { member in lastSlot[member].map { $0 + (airtimes[member] ?? 0) + rules.settle > now } ?? true }
            if new, let end = newRoomsEnd, end > start {
                if end <= now + rules.lead + 2 * rules.horizon {
                    start = end
                } else if let planned, planned > now + rules.lead {
                    // Still on the air for a while: plan after the others' slots in a later plan rather than beside them.
                    continue
                }
            }
            // Who still needs to be heard, and by how many members. A member whose slot is still to come, or whose
            // frame has not had time to be heard and reported (``Rules/settle``), is left for a later plan.
            let needs: [(session: SessionID, unheard: Int, stale: Int, oldest: Double)] = room.compactMap { speaker in
                guard let airtime = airtimes[speaker] else { return nil }
                if let slot = lastSlot[speaker], slot + airtime + rules.settle > now { return nil }
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
                // Slots still to come, or frames still to be reported: plan again once they are.
                if let planned, planned + rules.settle > now { continue }
                if room.contains(where: { member in lastSlot[member].map { $0 + (airtimes[member] ?? 0) + rules.settle > now } ?? false }) { continue }
                // Everyone heard everyone lately: the room stays quiet until the first hearing grows stale.
                // Over the members that take turns only (the others' hearings would end it at once, and again on
                // every plan).
                var next = Double.infinity
                for speaker in room where airtimes[speaker] != nil {
                    for listener in room where listener != speaker { next = min(next, (heard[speaker]?[listener] ?? now) + rules.refresh) }
                }
                if !next.isFinite { next = now + rules.refresh }
                let quietEnd = max(next, start, (planned ?? now) + rules.openGap)
                for member in room where airtimes[member] != nil {
                    quietUntil[member] = quietEnd
                    followUntil[member] = quietEnd + rules.hold
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
            // This plan's slots: as many of the neediest as fit the horizon (at least one).
            // A member whose last slot played its alias, heard by all but a few (``Rules/tokenAfterAliasMissedBy``):
            // those few may not hear its alias frame at all (a listener's failures are by speaker, and the alias
            // frame is another frame through the same room), so its next slot plays its token.
            // (A listener whose report of the slot would have been withheld is not counted.)
            func missedAlias(_ member: SessionID) -> Bool {
                guard let start = lastSlot[member], lastFullToken[member] != start, let airtime = aliasAirtimes[member] else { return false }
                let missed = hearings(of: PlannedSlot(session: member, start: start, end: start + airtime), by: room).missed
                return missed >= 1 && missed <= Rules.tokenAfterAliasMissedBy
            }
            let tokenAgain = crowded ? Set(order.map(\.session).filter(missedAlias)) : []
            func canPlayAlias(_ member: SessionID) -> Bool {
                crowded && aliases[member] != nil && aliasAirtimes[member] != nil && !tokenAgain.contains(member)
            }
            var batch: [SessionID] = []
            var fill = start
            for need in order where fill == start || fill < now + rules.lead + rules.horizon {
                batch.append(need.session)
                fill += (canPlayAlias(need.session) ? aliasAirtimes[need.session]! : airtimes[need.session] ?? 0) + rules.slotGuard
            }
            // In a crowded room members with an alias play it; but a token is on the air at least every
            // ``Rules/fullTokenEvery``: of this plan's members, the one whose token was least lately plays it, so
            // that a device not yet placed (a listen-only one, or one whose own frames were lost) joins the room by
            // hearing it.
            let lastToken = room.compactMap { lastFullToken[$0] }.max() ?? -.infinity
            let fullToken = crowded && start - lastToken >= rules.fullTokenEvery
                ? batch.filter(canPlayAlias).min { (lastFullToken[$0] ?? -.infinity, $0.value) < (lastFullToken[$1] ?? -.infinity, $1.value) }
                : nil
            var slots: [SessionID: [Double]] = [:]
            var playsAlias: Set<SessionID> = []
            var end = start
            for member in batch {
                slots[member] = [end]
                lastSlot[member] = end
                let alias = canPlayAlias(member) && member != fullToken ? aliasAirtimes[member] : nil
                if alias != nil { playsAlias.insert(member) } else { lastFullToken[member] = end }
                let airtime = alias ?? airtimes[member] ?? 0
                remember(PlannedSlot(session: member, start: end, end: end + airtime))
                end += airtime + rules.slotGuard
            }
            if let onAir { bandEnd[onAir] = max(bandEnd[onAir] ?? end, end) }
            if new { newRoomsEnd = max(newRoomsEnd ?? end, end) }
            // Every member hears of its new slots; the others only when their following would end too soon.
            let until = end + rules.openGap + rules.hold
            for member in room where airtimes[member] != nil {
                slotsEnd[member] = end
                quietUntil[member] = nil
                let mine = slots[member] ?? []
                if mine.isEmpty, let following = followUntil[member], following >= end + rules.openGap + rules.hold / 2 { continue }
                followUntil[member] = until
                schedules.append(Schedule(session: member, slots: mine, until: until,
                                          alias: playsAlias.contains(member) ? aliases[member] : nil))
            }
        }
        return schedules
    }
}

/// Sessions joined pair by pair into sets, each named by its smallest member, so that the sets and their names do not
/// depend on the order of the joins (dictionary order differs between the replicas' processes): a union-find with
/// path halving.
struct SessionUnion {
    private var parent: [SessionID: SessionID] = [:]

    /// Every session joined to anything.
    var sessions: [SessionID] { Array(parent.keys) }

    /// Whether `session` was joined to anything.
    func contains(_ session: SessionID) -> Bool { parent[session] != nil }

    /// The smallest member of `session`'s set (`session` itself when it was joined to nothing).
    mutating func root(_ session: SessionID) -> SessionID {
        var node = session
        while let up = parent[node], up != node {
            let grand = parent[up] ?? up
            parent[node] = grand
            node = grand
        }
        return node
    }

    /// Puts `a` and `b` in one set.
    mutating func join(_ a: SessionID, _ b: SessionID) {
        if parent[a] == nil { parent[a] = a }
        if parent[b] == nil { parent[b] = b }
        let rootA = root(a), rootB = root(b)
        guard rootA != rootB else { return }
        if rootA.value < rootB.value { parent[rootB] = rootA } else { parent[rootA] = rootB }
    }
}
