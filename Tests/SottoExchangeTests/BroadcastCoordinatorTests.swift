import SottoExchange
import Testing

/// The matcher's turns for sessions that hear each other: rooms from hearings, rounds that give the unheard
/// a slot first, quiet once everyone heard everyone, faster again when a newcomer appears.
@Suite struct BroadcastCoordinatorTests {
    let rules = BroadcastCoordinator.Rules(slot: 0.6, lead: 0.3, openGap: 0.5, refresh: 5, memory: 10, hold: 2)
    func s(_ i: Int) -> SessionID { SessionID("s\(i)") }

    @Test func sessionsJoinedByHearingsFormRoomsAndHearingsAreForgotten() {
        var coordinator = BroadcastCoordinator(rules: rules)
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
        var coordinator = BroadcastCoordinator(rules: rules)
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
        var coordinator = BroadcastCoordinator(rules: rules)
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

    /// A minute of random hearings among twelve sessions kept in one room: its slots never overlap, within a
    /// round or across rounds.
    @Test func slotsOfOneRoomNeverOverlap() {
        var coordinator = BroadcastCoordinator(rules: rules)
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
}
