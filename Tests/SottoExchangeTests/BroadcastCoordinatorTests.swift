import SottoExchange
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
        // s1 was heard by s2 and s3; s2 and s3 by nobody yet.
        coordinator.heard(speaker: s(1), by: s(2), at: 1)
        coordinator.heard(speaker: s(1), by: s(3), at: 1)
        let first = coordinator.tick(now: 1.1)
        #expect(Set(first.map(\.session)) == [s(1), s(2), s(3)])
        let slots = Dictionary(uniqueKeysWithValues: first.map { ($0.session, $0.slots) })
        #expect(slots[s(1)] == [])
        #expect(slots[s(2)]?.count == 1 && slots[s(3)]?.count == 1)
        let starts = [slots[s(2)]![0], slots[s(3)]![0]].sorted()
        #expect(abs(starts[0] - 1.4) < 1e-9 && abs(starts[1] - 2.0) < 1e-9)  // lead, then one slot apart
        let end = 1.4 + 2 * 0.6 + 0.5
        #expect(first.allSatisfy { abs($0.until - (end + 2)) < 1e-9 })
        // Nothing new is planned while the round is far from its end.
        #expect(coordinator.tick(now: 1.5).isEmpty)
        // Both were heard by everyone: the next plan is a quiet one, until the first hearing grows stale.
        coordinator.heard(speaker: s(2), by: s(1), at: 1.9); coordinator.heard(speaker: s(2), by: s(3), at: 1.9)
        coordinator.heard(speaker: s(3), by: s(1), at: 2.5); coordinator.heard(speaker: s(3), by: s(2), at: 2.5)
        let quiet = coordinator.tick(now: end - 0.2)
        #expect(quiet.count == 3 && quiet.allSatisfy { $0.slots.isEmpty && abs($0.until - (1 + 5 + 2)) < 1e-9 })
        // When s1's hearings are 5 s old, s1 alone gets a slot.
        let refresh = coordinator.tick(now: 5.8)
        #expect(refresh.filter { !$0.slots.isEmpty }.map(\.session) == [s(1)])
        #expect(refresh.first { $0.session == s(1) }!.slots.allSatisfy { $0 >= 6 - 1e-9 })
    }

    @Test func aNewcomerBringsEveryoneBackWithItselfFirst() {
        var coordinator = joined()
        for a in 1...3 { for b in 1...3 where a != b { coordinator.heard(speaker: s(a), by: s(b), at: 1) } }
        #expect(coordinator.tick(now: 1.1).allSatisfy { $0.slots.isEmpty })
        // s4 heard s1 only: the room is planned again at once, not when it was to stop being quiet (6 s).
        coordinator.heard(speaker: s(1), by: s(4), at: 2)
        let round = coordinator.tick(now: 2.1)
        #expect(round.flatMap(\.slots).min().map { abs($0 - 2.4) < 1e-9 } == true)
        let order = round.filter { !$0.slots.isEmpty }.sorted { $0.slots[0] < $1.slots[0] }.map(\.session)
        // s4 is unheard by three members, s2 and s3 by one (s4); s1 was heard by everyone lately: no slot.
        #expect(order == [s(4), s(2), s(3)] || order == [s(4), s(3), s(2)])
    }

    @Test func aNewcomerDuringARoundIsAppendedToItAndMembersStillToComeAreNotRepeated() {
        var coordinator = joined()
        for i in 2...5 { coordinator.heard(speaker: s(1), by: s(i), at: 1) }
        let round = coordinator.tick(now: 1)  // s2...s5 unheard: slots at 1.3, 1.9, 2.5, 3.1
        let planned = round.flatMap(\.slots).sorted()
        #expect(planned.count == 4 && abs(planned[0] - 1.3) < 1e-9)
        // s2's frame (1.3) was heard by everyone. At 1.85 a newcomer s6 heard s2: its slot follows the last
        // planned (3.7), and of the members only s1 is repeated for it: s3...s5 have their slots still to come.
        for i in [1, 3, 4, 5] { coordinator.heard(speaker: s(2), by: s(i), at: 1.8) }
        coordinator.heard(speaker: s(2), by: s(6), at: 1.85)
        let appended = coordinator.tick(now: 1.85)
        let slots = appended.filter { !$0.slots.isEmpty }.sorted { $0.slots[0] < $1.slots[0] }
        #expect(slots.map(\.session) == [s(6), s(1)])
        #expect(slots.first.map { abs($0.slots[0] - 3.7) < 1e-9 } == true)
        #expect(Set(appended.map(\.session)) == Set((1...6).map(s)))
    }

    /// A minute of random hearings among twelve sessions kept in one room: its slots never overlap, within a
    /// round or across rounds.
    @Test func slotsOfOneRoomNeverOverlap() {
        var coordinator = joined()
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
            for schedule in coordinator.tick(now: now) { slots += schedule.slots }
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
        coordinator.join(s(1), frameAirtime: 0.32)
        coordinator.join(s(2), frameAirtime: 0.72)
        // s3 listens only (or is an older client): it hears s1 and s2, and s1 hears s3's token.
        coordinator.heard(speaker: s(1), by: s(3), at: 1)
        coordinator.heard(speaker: s(2), by: s(3), at: 1)
        coordinator.heard(speaker: s(3), by: s(1), at: 1)
        #expect(coordinator.rooms(at: 1) == [[s(1), s(2), s(3)]])
        let round = coordinator.tick(now: 1)
        #expect(Set(round.map(\.session)) == [s(1), s(2)])
        let starts = round.flatMap { schedule in schedule.slots.map { (schedule.session, $0) } }.sorted { $0.1 < $1.1 }
        #expect(starts.map(\.0) == [s(1), s(2)] || starts.map(\.0) == [s(2), s(1)])
        // The second slot starts one airtime of the first plus the guard later.
        let firstAirtime = starts[0].0 == s(1) ? 0.32 : 0.72
        #expect(abs(starts[1].1 - starts[0].1 - (firstAirtime + 0.08)) < 1e-9)
        // s2 stops taking turns: it no longer gets slots, s1 still does.
        coordinator.leave(s(2))
        #expect(!coordinator.takesTurns(s(2)) && coordinator.takesTurns(s(1)))
        let later = coordinator.tick(now: 6.5)
        #expect(!later.contains { $0.session == s(2) })
    }
}
