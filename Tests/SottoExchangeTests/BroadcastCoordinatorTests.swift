import SottoCodes
import SottoExchange
import SottoExchangeCore
import Testing

/// The matcher's turns for sessions that hear each other: rooms from hearings, rounds that give the unheard
/// a slot first, quiet once everyone heard everyone, faster again when a newcomer appears.
@Suite struct BroadcastCoordinatorTests {
    let rules = BroadcastCoordinator.Rules(slotGuard: 0.08, lead: 0.3, openGap: 0.5, refresh: 5, memory: 10, hold: 2)
    func s(_ i: Int) -> SessionID { SessionID("s\(i)") }
    /// A coordinator whose sessions s0...s12 take turns with frames of 0.52 s (slots of 0.6 s).
    func joined() -> BroadcastCoordinator {
        var coordinator = BroadcastCoordinator(rules: rules)
        for i in 0...12 { coordinator.join(s(i), frameAirtime: 0.52) }
        return coordinator
    }

    @Test func sessionsJoinedByHearingsFormRoomsAndHearingsAreForgotten() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        coordinator.heard(speaker: s(1), by: s(2), at: 0)
        coordinator.heard(speaker: s(3), by: s(2), at: 1)
        coordinator.heard(speaker: s(4), by: s(5), at: 2)
        coordinator.heard(speaker: s(6), by: s(6), at: 2)  // itself: no room
        #expect(coordinator.rooms(at: 3) == [[s(1), s(2), s(3)], [s(4), s(5)]])
        // After the memory, s1-s2 no longer join anyone; s3-s2 a little longer.
        #expect(coordinator.rooms(at: 10.5) == [[s(2), s(3)], [s(4), s(5)]])
        coordinator.remove(s(5))
        #expect(coordinator.rooms(at: 10.5) == [[s(2), s(3)]])
        #expect(coordinator.rooms(at: 12.5).isEmpty)
    }

    @Test func aRoundGivesTheUnheardTheirSlotsFirstEachOnceAndThenQuietensTheRoom() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        // s1 was heard by s2 and s3; s2 and s3 by nobody yet.
        coordinator.heard(speaker: s(1), by: s(2), at: 1)
        coordinator.heard(speaker: s(1), by: s(3), at: 1)
        let first = coordinator.tick(now: 1.1, using: &random)
        #expect(Set(first.map(\.session)) == [s(1), s(2), s(3)])
        let slots = Dictionary(uniqueKeysWithValues: first.map { ($0.session, $0.slots) })
        #expect(slots[s(1)] == [])
        #expect(slots[s(2)]?.count == 1 && slots[s(3)]?.count == 1)
        let starts = [slots[s(2)]![0], slots[s(3)]![0]].sorted()
        #expect(abs(starts[0] - 1.4) < 1e-9 && abs(starts[1] - 2.0) < 1e-9)  // lead, then one slot apart
        let end = 1.4 + 2 * 0.6 + 0.5
        #expect(first.allSatisfy { abs($0.until - (end + 2)) < 1e-9 })
        // Nothing new is planned while the round is far from its end.
        #expect(coordinator.tick(now: 1.5, using: &random).isEmpty)
        // Both were heard by everyone: the next plan is a quiet one, until the first hearing grows stale.
        coordinator.heard(speaker: s(2), by: s(1), at: 1.9); coordinator.heard(speaker: s(2), by: s(3), at: 1.9)
        coordinator.heard(speaker: s(3), by: s(1), at: 2.5); coordinator.heard(speaker: s(3), by: s(2), at: 2.5)
        let quiet = coordinator.tick(now: end - 0.15, using: &random)
        #expect(quiet.count == 3 && quiet.allSatisfy { $0.slots.isEmpty && abs($0.until - (1 + 5 + 2)) < 1e-9 })
        // When s1's hearings are 5 s old, s1 alone gets a slot.
        let refresh = coordinator.tick(now: 5.8, using: &random)
        #expect(refresh.filter { !$0.slots.isEmpty }.map(\.session) == [s(1)])
        #expect(refresh.first { $0.session == s(1) }!.slots.allSatisfy { $0 >= 6 - 1e-9 })
    }

    @Test func aNewcomerBringsEveryoneBackWithItselfFirst() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        for a in 1...3 { for b in 1...3 where a != b { coordinator.heard(speaker: s(a), by: s(b), at: 1) } }
        #expect(coordinator.tick(now: 1.1, using: &random).allSatisfy { $0.slots.isEmpty })
        // s4 heard s1 only: the room is planned again at once, not when it was to stop being quiet (6 s).
        coordinator.heard(speaker: s(1), by: s(4), at: 2)
        let round = coordinator.tick(now: 2.1, using: &random)
        #expect(round.flatMap(\.slots).min().map { abs($0 - 2.4) < 1e-9 } == true)
        // s4 is unheard by three members, s2 and s3 by one (s4); s1 was heard by everyone lately: no slot. The
        // horizon (1 s beyond the lead) holds two slots: s4's and one of the others'.
        let order = round.filter { !$0.slots.isEmpty }.sorted { $0.slots[0] < $1.slots[0] }.map(\.session)
        #expect(order == [s(4), s(2)] || order == [s(4), s(3)])
        // The next plan, as the first slots near, gives the last one its slot after them.
        let next = coordinator.tick(now: 3.0, using: &random).filter { !$0.slots.isEmpty }
        #expect(next.map(\.session) == [order[1] == s(2) ? s(3) : s(2)])
        #expect(next.first.map { abs($0.slots[0] - 3.6) < 1e-9 } == true)
    }

    @Test func aNewcomerIsPlacedWithinTheHorizonAndMembersStillToComeAreNotRepeated() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        for i in 2...5 { coordinator.heard(speaker: s(1), by: s(i), at: 1) }
        // s2...s5 unheard: the horizon holds two slots, 1.3 and 1.9 (s2, s3: the same needs, by name).
        let first = coordinator.tick(now: 1, using: &random).filter { !$0.slots.isEmpty }.sorted { $0.slots[0] < $1.slots[0] }
        #expect(first.map(\.session) == [s(2), s(3)] && abs(first[0].slots[0] - 1.3) < 1e-9)
        // s2's frame was heard by everyone, and s1 heard s4 and s5. At 1.85 a newcomer s6 heard s2: unheard by
        // every member, it gets the next slot (2.5), ahead of s4 and s5 (unheard by four); s3, whose slot is
        // still to come, and s2, whose hearings just came, are not repeated.
        for i in [1, 3, 4, 5] { coordinator.heard(speaker: s(2), by: s(i), at: 1.8) }
        for i in [4, 5] { coordinator.heard(speaker: s(i), by: s(1), at: 1.8) }  // (earlier frames of theirs, heard by s1)
        coordinator.heard(speaker: s(2), by: s(6), at: 1.85)
        let appended = coordinator.tick(now: 1.85, using: &random)
        let slots = appended.filter { !$0.slots.isEmpty }.sorted { $0.slots[0] < $1.slots[0] }
        #expect(slots.first?.session == s(6) && slots.first.map { abs($0.slots[0] - 2.5) < 1e-9 } == true)
        #expect(!slots.contains { $0.session == s(3) || $0.session == s(2) })
        #expect(appended.contains { $0.session == s(6) })
    }

    /// Two rooms planned apart, one gone quiet and one taking turns, that a hearing joins: the merged room is planned
    /// at once, after the slots already given, not when the quiet room's spell was to end (the band stood idle for
    /// almost 2 s in one twenty-device room of the crowd sweep while the two halves waited).
    @Test func roomsThatMergeArePlannedAtOnceWhateverQuietOneOfThemWasGiven() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        // s1 and s2 heard each other: a room with nothing to do, quiet until their hearings are 5 s old.
        coordinator.heard(speaker: s(1), by: s(2), at: 1)
        coordinator.heard(speaker: s(2), by: s(1), at: 1)
        // s4 heard s3: s4 still has to be heard, and gets a slot at 1.4 (until 2.0).
        coordinator.heard(speaker: s(3), by: s(4), at: 1)
        let first = coordinator.tick(now: 1.1, using: &random)
        #expect(first.filter { [s(1), s(2)].contains($0.session) }.allSatisfy { $0.slots.isEmpty && $0.until > 6 })
        #expect(first.first { $0.session == s(4) }?.slots.count == 1)
        // s1 hears s3: one room of four, whose members of the two halves have not heard each other.
        coordinator.heard(speaker: s(3), by: s(1), at: 1.5)
        let merged = coordinator.tick(now: 1.6, using: &random).flatMap { schedule in schedule.slots.map { (schedule.session, $0) } }
        // Planned at once: slots right after s4's (2.0), for s1 and s2 (unheard by s3 and s4) first.
        #expect(!merged.isEmpty)
        #expect(merged.allSatisfy { $0.1 >= 2.0 - 1e-9 })
        #expect(merged.map(\.1).min().map { abs($0 - 2.0) < 1e-9 } == true)
        #expect(Set(merged.map(\.0)).isSubset(of: [s(1), s(2), s(3)]) && merged.contains { $0.0 == s(1) || $0.0 == s(2) })
    }

    /// A minute of random hearings among twelve sessions kept in one room: its slots never overlap, within a
    /// round or across rounds.
    @Test func slotsOfOneRoomNeverOverlap() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        var slots: [Double] = []
        var generator = SystemRandomNumberGenerator()
        var now = 0.0
        while now < 60 {
            // A chain of hearings every few seconds keeps the twelve in one room.
            if Int(now * 10) % 30 == 0 { for i in 0..<11 { coordinator.heard(speaker: s(i), by: s(i + 1), at: now) } }
            #expect(coordinator.rooms(at: now).count == 1)
            for _ in 0..<3 {
                let a = Int.random(in: 0..<12, using: &generator), b = Int.random(in: 0..<12, using: &generator)
                coordinator.heard(speaker: s(a), by: s(b), at: now)
            }
            for schedule in coordinator.tick(now: now, using: &random) { slots += schedule.slots }
            now += 0.1
        }
        slots.sort()
        #expect(slots.count > 20)
        #expect(zip(slots.dropFirst(), slots).allSatisfy { $0 - $1 >= 0.6 - 1e-9 })
    }

    /// Only sessions that take turns get slots and schedules; the others still join rooms (a listen-only device
    /// that hears two broadcasters puts them in one room), and slots follow each member's own airtime.
    @Test func onlySessionsTakingTurnsGetSlotsEachAsLongAsItsFrame() {
        var coordinator = BroadcastCoordinator(rules: rules)
        var random = SplitMix64(seed: 1)
        coordinator.join(s(1), frameAirtime: 0.32)
        coordinator.join(s(2), frameAirtime: 0.72)
        // s3 listens only (or is an older client): it hears s1 and s2, and s1 hears s3's token.
        coordinator.heard(speaker: s(1), by: s(3), at: 1)
        coordinator.heard(speaker: s(2), by: s(3), at: 1)
        coordinator.heard(speaker: s(3), by: s(1), at: 1)
        #expect(coordinator.rooms(at: 1) == [[s(1), s(2), s(3)]])
        let round = coordinator.tick(now: 1, using: &random)
        #expect(Set(round.map(\.session)) == [s(1), s(2)])
        let starts = round.flatMap { schedule in schedule.slots.map { (schedule.session, $0) } }.sorted { $0.1 < $1.1 }
        #expect(starts.map(\.0) == [s(1), s(2)] || starts.map(\.0) == [s(2), s(1)])
        // The second slot starts one airtime of the first plus the guard later.
        let firstAirtime = starts[0].0 == s(1) ? 0.32 : 0.72
        #expect(abs(starts[1].1 - starts[0].1 - (firstAirtime + 0.08)) < 1e-9)
        // s2 stops taking turns: it no longer gets slots, s1 still does.
        coordinator.leave(s(2))
        #expect(!coordinator.takesTurns(s(2)) && coordinator.takesTurns(s(1)))
        let later = coordinator.tick(now: 6.5, using: &random)
        #expect(!later.contains { $0.session == s(2) })
    }

    /// A crowded room (four members taking turns or more): every member that can play one gets a room alias,
    /// unique in the room; alias slots are as long as the alias frame, a token is on the air at least every
    /// `fullTokenEvery` (3 s; of a plan's members, the one whose token was least lately), and members that cannot
    /// play an alias play their token.
    @Test func aCrowdedRoomPlaysRoomAliasesWithATokenEveryFewSeconds() {
        var coordinator = BroadcastCoordinator(rules: rules)
        var random = SplitMix64(seed: 7)
        for i in 1...6 { coordinator.join(s(i), frameAirtime: 0.54, aliasAirtime: 0.29) }
        coordinator.join(s(7), frameAirtime: 0.54)  // an older client: tokens only
        for i in 2...7 { coordinator.heard(speaker: s(1), by: s(i), at: 1) }
        // Every slot is heard by everyone as it ends; plans every 0.1 s for 12 s.
        var played: [(session: SessionID, start: Double, alias: UInt16?, plan: Int)] = []
        var now = 1.0
        var plan = 0
        while now < 13 {
            for (session, start, _, _) in played where start + 0.54 <= now && start + 0.64 > now {
                for listener in 1...7 where s(listener) != session { coordinator.heard(speaker: session, by: s(listener), at: now) }
            }
            for schedule in coordinator.tick(now: now, using: &random) {
                for start in schedule.slots { played.append((schedule.session, start, schedule.alias, plan)) }
            }
            now += 0.1
            plan += 1
        }
        let aliases = (1...6).compactMap { coordinator.alias(of: s($0)) }
        #expect(aliases.count == 6 && Set(aliases).count == 6 && coordinator.alias(of: s(7)) == nil)
        #expect(played.allSatisfy { $0.alias == nil || $0.alias == coordinator.alias(of: $0.session) })
        #expect(played.allSatisfy { $0.session != s(7) || $0.alias == nil })
        // First, s2...s7 once each (s1 was heard by all); later, when hearings grow stale, everyone again.
        let firstRound = played.filter { $0.start < 5 }
        #expect(Set(firstRound.map(\.session)) == Set((2...7).map(s)) && firstRound.count == 6)
        // Within a plan each slot is its frame plus the guard after the one before it; no two overlap.
        let sorted = played.sorted { $0.start < $1.start }
        for (a, b) in zip(sorted, sorted.dropFirst()) {
            #expect(b.start - a.start >= (a.alias == nil ? 0.54 : 0.29) + 0.08 - 1e-9)
        }
        for (a, b) in zip(sorted, sorted.dropFirst()) where a.plan == b.plan {
            #expect(abs(b.start - a.start - ((a.alias == nil ? 0.54 : 0.29) + 0.08)) < 1e-9)
        }
        // Tokens of members that could play aliases: at least 3 s apart (s7's count too: any token will do for a
        // device not yet placed).
        let tokens = sorted.filter { $0.alias == nil && $0.session != s(7) }
        #expect(tokens.count >= 2)
        #expect(zip(tokens, tokens.dropFirst()).allSatisfy { $1.start - $0.start >= 3 - 1e-9 })
    }

    /// An alias names a member only for listeners of its room: heard by a session of another room or of none, it
    /// names nobody; a member that leaves every room loses its alias.
    @Test func aRoomAliasResolvesOnlyInItsRoom() {
        var coordinator = BroadcastCoordinator(rules: rules)
        var random = SplitMix64(seed: 3)
        for i in 1...10 { coordinator.join(s(i), frameAirtime: 0.54, aliasAirtime: 0.29) }
        for i in 2...5 { coordinator.heard(speaker: s(1), by: s(i), at: 1) }  // room A: s1...s5
        for i in 7...10 { coordinator.heard(speaker: s(6), by: s(i), at: 1) }  // room B: s6...s10
        _ = coordinator.tick(now: 1, using: &random)
        let alias3 = coordinator.alias(of: s(3))!
        #expect(coordinator.session(withAlias: alias3, heardBy: s(2)) == s(3))
        #expect(coordinator.session(withAlias: alias3, heardBy: s(3)) == nil)  // its own
        #expect(coordinator.session(withAlias: alias3, heardBy: s(7)) == nil)  // another room
        #expect(coordinator.session(withAlias: alias3, heardBy: s(11)) == nil)  // no room
        // Few aliases are held: they are unique across rooms too, so a merge redraws none.
        let all = (1...10).compactMap { coordinator.alias(of: s($0)) }
        #expect(Set(all).count == 10)
        // Everything is forgotten after the memory: no room, no alias.
        _ = coordinator.tick(now: 12, using: &random)
        #expect(coordinator.alias(of: s(3)) == nil && coordinator.session(withAlias: alias3, heardBy: s(2)) == nil)
    }

    /// Two rooms of two planned apart, the second formed after the first's first slot: their slots overlap. When
    /// overlapping frames go unheard (they collided: the rooms share the air), the rooms are planned on one
    /// timeline and their slots no longer overlap; when the frames are heard (the rooms are far apart), the rooms
    /// keep their own timelines. The join is forgotten after the memory.
    @Test func roomsWhoseOverlappingSlotsGoUnheardShareTheAirAndTakeTurnsOnOneTimeline() {
        func run(collide: Bool) -> (coordinator: BroadcastCoordinator, slots: [(session: SessionID, start: Double)], random: SplitMix64) {
            var coordinator = joined()
            var random = SplitMix64(seed: 1)
            var slots: [(session: SessionID, start: Double)] = []
            let partner = [s(1): s(2), s(2): s(1), s(3): s(4), s(4): s(3)]
            coordinator.heard(speaker: s(3), by: s(4), at: 0)  // room B: s4 still to be heard
            var now = 0.0
            while now < 4 {
                if abs(now - 1) < 1e-9 { coordinator.heard(speaker: s(1), by: s(2), at: 1) }  // room A: s2 still to be heard
                // Frames that just ended are heard by the other member, unless they collided (s4's first is lost to
                // noise).
                for slot in slots where slot.start + 0.52 <= now && slot.start + 0.62 > now && slot.start > 0.5 {
                    let overlapped = slots.contains { $0.session != slot.session && abs($0.start - slot.start) < 0.52 }
                    if !(collide && overlapped) { coordinator.heard(speaker: slot.session, by: partner[slot.session]!, at: now) }
                }
                for schedule in coordinator.tick(now: now, using: &random) { slots += schedule.slots.map { (schedule.session, $0) } }
                now += 0.1
            }
            return (coordinator, slots.sorted { $0.start < $1.start }, random)
        }
        var collided = run(collide: true)
        // s4's second slot (its first went unheard; B is no longer new) overlaps s2's first; both go unheard.
        let first = collided.slots.filter { $0.start < 2 }
        #expect(first.count == 3 && abs(first[1].start - first[2].start) < 0.52)
        #expect(collided.coordinator.sharesAir(s(2), s(4), at: 4) && !collided.coordinator.sharesAir(s(1), s(3), at: 4))
        // Learnt when s2's slot was judged (its end and the settle); then s2 and s4 again, one after the other.
        let learnt = first[1].start + 0.52 + 0.3
        let after = collided.slots.filter { $0.start > learnt }
        #expect(Set(after.map(\.session)) == [s(2), s(4)])
        #expect(zip(after, after.dropFirst()).allSatisfy { $1.start - $0.start >= 0.6 - 1e-9 })
        // Forgotten 10 s after it was learnt (at the first plan after the judgement).
        #expect(collided.coordinator.sharesAir(s(2), s(4), at: learnt + 9.5))
        _ = collided.coordinator.tick(now: learnt + 10.3, using: &collided.random)
        #expect(!collided.coordinator.sharesAir(s(2), s(4), at: learnt + 10.3))

        let apart = run(collide: false)
        #expect(apart.slots.filter { $0.start < 2 }.count == 3)
        #expect(!apart.coordinator.sharesAir(s(2), s(4), at: 4))
    }

    /// A client reports a payload it still hears at most every 2 s, so a listener that reported a speaker just
    /// before its slot says nothing of the slot: its silence is not counted as a miss. Room A (s1, s2, s6, s7):
    /// everyone reported everyone at 1 s but s7 s2; s2's slot (1.3-1.82 s) overlaps s4's of room B.
    /// Heard by the only member that could report it, the slot joins nothing; missed by it, it does.
    @Test func aListenerThatCouldNotReportTheSlotAgainIsNotCountedAsAMiss() {
        func run(s7Hears: Bool) -> BroadcastCoordinator {
            var coordinator = joined()
            var random = SplitMix64(seed: 1)
            var slots: [(session: SessionID, start: Double)] = []
            coordinator.heard(speaker: s(3), by: s(4), at: 0)  // room B: s4 still to be heard
            var now = 0.0
            while now < 3 {
                if abs(now - 1) < 1e-9 {
                    // Everyone in A heard everyone but s7 s2.
                    for a in [1, 2, 6, 7] { for b in [1, 2, 6, 7] where a != b && !(a == 2 && b == 7) { coordinator.heard(speaker: s(a), by: s(b), at: 1) } }
                }
                for slot in slots where slot.start + 0.52 <= now && slot.start + 0.62 > now && slot.start > 0.5 {
                    if slot.session == s(4) { coordinator.heard(speaker: s(4), by: s(3), at: now) }
                    if slot.session == s(2) && s7Hears { coordinator.heard(speaker: s(2), by: s(7), at: now) }
                }
                for schedule in coordinator.tick(now: now, using: &random) { slots += schedule.slots.map { (schedule.session, $0) } }
                now += 0.1
            }
            let s2 = slots.first { $0.session == s(2) }, s4 = slots.last { $0.session == s(4) && $0.start < 2 }
            #expect(s2 != nil && s4 != nil && abs(s2!.start - s4!.start) < 0.52)
            return coordinator
        }
        #expect(!run(s7Hears: true).sharesAir(s(2), s(4), at: 3))
        #expect(run(s7Hears: false).sharesAir(s(2), s(4), at: 3))
    }

    /// Rooms that form in one plan, none of whose slots were judged yet, are planned one after the other as long as
    /// the new rooms' slots end within two horizons beyond the lead; the others in parallel.
    @Test func newRoomsFormedTogetherArePlannedOneAfterTheOtherWithinTwoHorizons() {
        var coordinator = joined()
        var random = SplitMix64(seed: 1)
        for i in stride(from: 1, through: 11, by: 2) { coordinator.heard(speaker: s(i), by: s(i + 1), at: 1) }
        let starts = coordinator.tick(now: 1, using: &random).flatMap(\.slots).sorted()
        // Six rooms of two, one slot of 0.6 s each, from 1.3: four follow each other (the fourth's starts at 3.1, the
        // chain then ends at 3.7, beyond 1 + 0.3 + 2), the fifth and the sixth start in parallel.
        #expect(starts.count == 6)
        #expect(zip(starts, [1.3, 1.3, 1.3, 1.9, 2.5, 3.1]).allSatisfy { abs($0 - $1) < 1e-9 })
    }

    /// Frames heard alone on the air by all twelve sessions of one physical room (none while another overlaps it),
    /// and the slots the coordinator gives.
    struct OnePhysicalRoom {
        var coordinator: BroadcastCoordinator
        var random: SplitMix64
        var played: [(session: Int, start: Double)] = []
        var heardPairs = Set<[Int]>()
        /// When sessions start listening (before it they hear nothing; s1...s12).
        var starts: [Int: Double]

        mutating func step(_ now: Double) {
            for (speaker, start) in played where start + 0.52 <= now && start + 0.62 > now {
                guard !played.contains(where: { $0.session != speaker && $0.start < start + 0.52 && $0.start + 0.52 > start }) else { continue }
                for listener in 1...12 where listener != speaker && starts[listener]! <= start {
                    coordinator.heard(speaker: SessionID("s\(speaker)"), by: SessionID("s\(listener)"), at: now)
                    heardPairs.insert([speaker, listener])
                }
            }
            for schedule in coordinator.tick(now: now, using: &random) {
                let speaker = Int(schedule.session.value.dropFirst())!
                for start in schedule.slots { played.append((speaker, start)) }
            }
        }

        func overlapping() -> Bool {
            played.contains { a in played.contains { b in b.session != a.session && abs(b.start - a.start) < 0.52 } }
        }
    }

    /// Three groups of one physical room that each first heard a different frame (devices started together and
    /// collided) form together: planned one after the other, no slot of one overlaps a slot of another, the first
    /// group's first slot is heard by all, and they become one room in which everyone hears everyone.
    @Test func groupsOfOneRoomThatFormTogetherNeverOverlapAndMerge() {
        var room = OnePhysicalRoom(coordinator: joined(), random: SplitMix64(seed: 5),
                                   starts: Dictionary(uniqueKeysWithValues: (1...12).map { ($0, 0.0) }))
        let groups = [Array(1...4), Array(5...8), Array(9...12)]
        for group in groups { for (i, a) in group.enumerated() { room.coordinator.heard(speaker: s(a), by: s(group[(i + 1) % 4]), at: 0) } }
        var now = 0.0
        var mergedAt: Double?
        while now < 20 {
            room.step(now)
            if mergedAt == nil, room.coordinator.rooms(at: now).count == 1 { mergedAt = now }
            now += 0.1
        }
        let overlapping = room.overlapping()
        #expect(!overlapping)
        #expect(mergedAt.map { $0 < 1.5 } == true)
        #expect(room.heardPairs.count == 12 * 11)
        #expect(room.coordinator.rooms(at: now).count == 1)
    }

    /// Two groups of six in one physical room planned apart: the second started listening 3 s after the first, when
    /// the first's slots were judged (it is no longer new), and formed on a frame of its own. Their slots
    /// overlap and collide. Once the coordinator learns that they share the air, their slots follow each other, the
    /// groups hear each other and become one room, and every member is heard by every other; after that no two
    /// slots overlap.
    @Test func groupsOfOneRoomPlannedApartEndUpHearingEachOther() {
        var room = OnePhysicalRoom(coordinator: joined(), random: SplitMix64(seed: 5),
                                   starts: Dictionary(uniqueKeysWithValues: (1...12).map { ($0, $0 <= 6 ? 0.0 : 3.0) }))
        let groups = [Array(1...6), Array(7...12)]
        var now = 0.0
        var joinedAt: Double?
        while now < 30 {
            for group in groups where abs(now - room.starts[group[0]]!) < 1e-9 {
                for (i, a) in group.enumerated() { room.coordinator.heard(speaker: s(a), by: s(group[(i + 1) % 6]), at: now) }
            }
            room.step(now)
            if joinedAt == nil, (1...6).contains(where: { a in (7...12).contains { room.coordinator.sharesAir(s(a), s($0), at: now) } }) {
                joinedAt = now
            }
            now += 0.1
        }
        let played = room.played, overlapping = room.overlapping()
        #expect(overlapping)
        #expect(joinedAt.map { $0 < 5 } == true)
        #expect(room.heardPairs.count == 12 * 11)
        #expect(room.coordinator.rooms(at: now).count == 1)
        let later = played.filter { $0.start > joinedAt! + 1.5 }.sorted { $0.start < $1.start }
        #expect(later.count >= 12)
        #expect(zip(later, later.dropFirst()).allSatisfy { $1.start - $0.start >= 0.52 - 1e-9 })
    }

    /// In a crowded room, a member whose alias one member missed plays its token in its next slot; one whose
    /// alias most members missed (a collision, say) plays its alias again. Here s6 never hears s3's alias frame
    /// but hears its token, and s4's first alias frame is heard by nobody.
    @Test func aMemberWhoseAliasAFewMissedPlaysItsTokenNext() {
        var coordinator = BroadcastCoordinator(rules: rules)
        var random = SplitMix64(seed: 11)
        for i in 1...6 { coordinator.join(s(i), frameAirtime: 0.54, aliasAirtime: 0.29) }
        for i in 2...6 { coordinator.heard(speaker: s(1), by: s(i), at: 1) }
        var played: [(session: SessionID, start: Double, alias: UInt16?)] = []
        var now = 1.0
        while now < 6 {
            for (session, start, alias) in played {
                let airtime = alias == nil ? 0.54 : 0.29
                guard start + airtime <= now, start + airtime + 0.1 > now else { continue }
                if session == s(4) && !played.contains(where: { $0.session == s(4) && $0.start < start }) { continue }
                for listener in (1...6).map(s) where listener != session && !(session == s(3) && listener == s(6) && alias != nil) {
                    coordinator.heard(speaker: session, by: listener, at: now)
                }
            }
            for schedule in coordinator.tick(now: now, using: &random) {
                for start in schedule.slots { played.append((schedule.session, start, schedule.alias)) }
            }
            now += 0.1
        }
        let s3 = played.filter { $0.session == s(3) }
        let s4 = played.filter { $0.session == s(4) }
        // s3: its alias, missed by s6 alone, then its token (heard by s6): nothing more is needed of it.
        #expect(s3.count == 2 && s3[0].alias != nil && s3[1].alias == nil)
        // s4: its alias heard by nobody, then its alias again.
        #expect(s4.count == 2 && s4[0].alias != nil && s4[1].alias != nil)
    }
}
