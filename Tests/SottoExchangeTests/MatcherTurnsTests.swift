import SottoCodes
import SottoExchange
import SottoExchangeCore
import Testing

/// The matcher core's turns (`MatcherCore.turns`): hearings it resolves put sessions in rooms, and ticks give
/// the sessions that take turns their slots, as offsets from the tick that planned them.
@Suite struct MatcherTurnsTests {
    func s(_ i: Int) -> SessionID { SessionID("d\(i)") }

    /// A core with turns, three broadcasting sessions and one that only listens, each with its token.
    func room() -> (core: MatcherCore, tokens: [SessionID: [UInt8]]) {
        var core = MatcherCore()
        core.turns = BroadcastCoordinator(rules: .init())
        var tokens: [SessionID: [UInt8]] = [:]
        for i in 1...4 {
            for event in core.handle(.openSession(s(i), appID: "app", broadcasts: i != 4), now: 0) {
                if case .broadcastToken(let id, let token) = event { tokens[id] = token }
            }
        }
        return (core, tokens)
    }

    func turns(_ events: [MatcherEvent]) -> [SessionID: (offsets: [Double], follow: Double)] {
        var result: [SessionID: (offsets: [Double], follow: Double)] = [:]
        for case .broadcastTurns(let id, let offsets, let follow, _) in events { result[id] = (offsets, follow) }
        return result
    }

    @Test func sessionsThatHearEachOtherGetSlotsThatDoNotOverlap() {
        var (core, tokens) = room()
        for i in 1...3 { _ = core.handle(.takeTurns(s(i), frameAirtime: 0.5, aliasAirtime: nil), now: 0.1) }
        _ = core.handle(.takeTurns(s(4), frameAirtime: 0.5, aliasAirtime: nil), now: 0.1)  // listens only: ignored
        // d4 hears d1 and d2; d1 hears d3: one room of four.
        for (observer, speaker) in [(4, 1), (4, 2), (1, 3)] {
            _ = core.handle(.observe(s(observer), .token(tokens[s(speaker)]!), snr: 20, level: -30), now: 1)
        }
        let planned = turns(core.handle(.tick, now: 1.2))
        #expect(Set(planned.keys) == [s(1), s(2), s(3)], "only the broadcasting sessions that take turns")
        // Every member was unheard by some other one: a slot each, from the lead on, airtime + guard apart; the
        // first plan holds the two that fit its horizon (1 s beyond the lead), ...
        var slots = planned.values.flatMap(\.offsets).map { 1.2 + $0 }.sorted()
        #expect(slots.count == 2)
        #expect(slots.first.map { abs($0 - 1.5) < 1e-9 } == true)
        #expect(planned.values.allSatisfy { 1.2 + $0.follow > slots.last! })
        // ... nothing more until the planned slots near their end, then the third right after them.
        #expect(turns(core.handle(.tick, now: 1.3)).isEmpty)
        let next = turns(core.handle(.tick, now: 1.4))
        slots += next.values.flatMap(\.offsets).map { 1.4 + $0 }
        #expect(slots.count == 3)
        #expect(zip(slots.dropFirst(), slots).allSatisfy { abs($0 - $1 - 0.58) < 1e-9 }, "\(slots)")
    }

    @Test func aCoreWithoutTurnsOrSessionsThatDoNotTakeThemGetNone() {
        var (core, tokens) = room()
        _ = core.handle(.observe(s(1), .token(tokens[s(2)]!), snr: 20, level: -30), now: 1)
        _ = core.handle(.observe(s(2), .token(tokens[s(1)]!), snr: 20, level: -30), now: 1)
        #expect(turns(core.handle(.tick, now: 1.1)).isEmpty, "nobody said it takes turns")
        var plain = MatcherCore()
        var plainTokens: [SessionID: [UInt8]] = [:]
        for i in 1...2 {
            for case .broadcastToken(let id, let token) in plain.handle(.openSession(s(i), appID: "app", broadcasts: true), now: 0) {
                plainTokens[id] = token
            }
            _ = plain.handle(.takeTurns(s(i), frameAirtime: 0.5, aliasAirtime: nil), now: 0)
        }
        _ = plain.handle(.observe(s(1), .token(plainTokens[s(2)]!), snr: 20, level: -30), now: 1)
        #expect(turns(plain.handle(.tick, now: 1.1)).isEmpty, "a core that plans no turns")
    }

    @Test func aClosedSessionOrOneThatStopsTakingTurnsGetsNoMoreSlots() {
        var (core, tokens) = room()
        for i in 1...3 { _ = core.handle(.takeTurns(s(i), frameAirtime: 0.5, aliasAirtime: nil), now: 0) }
        for (observer, speaker) in [(1, 2), (2, 3), (3, 1)] {
            _ = core.handle(.observe(s(observer), .token(tokens[s(speaker)]!), snr: 20, level: -30), now: 1)
        }
        _ = core.handle(.closeSession(s(2)), now: 1.05)
        _ = core.handle(.takeTurns(s(3), frameAirtime: 0, aliasAirtime: nil), now: 1.05)
        let planned = turns(core.handle(.tick, now: 1.1))
        #expect(Set(planned.keys) == [s(1)], "\(planned.keys)")
    }

    /// The turns are replicated state: a core restored from a snapshot mid-round plans what the original plans.
    @Test func aRestoredCorePlansTheSameTurnsAsTheOriginal() throws {
        var (core, tokens) = room()
        for i in 1...3 { _ = core.handle(.takeTurns(s(i), frameAirtime: 0.4, aliasAirtime: nil), now: 0) }
        for (observer, speaker) in [(1, 2), (2, 3)] {
            _ = core.handle(.observe(s(observer), .token(tokens[s(speaker)]!), snr: 20, level: -30), now: 1)
        }
        #expect(!turns(core.handle(.tick, now: 1.1)).isEmpty)
        var restored = try MatcherCore(snapshot: core.snapshot(), generator: SystemRandomNumberGenerator())
        #expect(restored.turns?.rules == core.turns?.rules && restored.turns?.takesTurns(s(2)) == true)
        var now = 1.1
        for step in 0..<60 {
            now += 0.1
            var input = MatcherInput.tick
            if step % 7 == 3 {  // more hearings, in every direction over time
                let observer = 1 + step % 3, speaker = 1 + (step / 3) % 3
                if observer != speaker { input = .observe(s(observer), .token(tokens[s(speaker)]!), snr: 20, level: -30) }
            }
            let a = core.handle(input, now: now), b = restored.handle(input, now: now)
            #expect(a == b, "at \(now)")
        }
    }

    /// A crowded room's members get room aliases with their turns; an alias heard by a member of the room resolves
    /// to its holder (its message is found), heard by a session outside the room it resolves to nothing (no found,
    /// no invalid token); a restored core resolves and plans as the original.
    @Test func roomAliasesResolveInTheRoomOnly() throws {
        var core = MatcherCore(generator: SplitMix64(seed: 5))
        core.turns = BroadcastCoordinator(rules: .init())
        var tokens: [SessionID: [UInt8]] = [:]
        for i in 1...6 {
            for case .broadcastToken(let id, let token) in core.handle(.openSession(s(i), appID: "app", broadcasts: true), now: 0) {
                tokens[id] = token
            }
            let message = try Message(type: "device", content: Array("device \(i)".utf8))
            _ = core.handle(.publish(s(i), OperationID(1), message, .default), now: 0)
            _ = core.handle(.subscribe(s(i), OperationID(2), .allMyTypes, .default, lostTimeout: 10), now: 0)
            if i <= 5 { _ = core.handle(.takeTurns(s(i), frameAirtime: 0.54, aliasAirtime: 0.29), now: 0) }
        }
        // d1 is heard by d2...d5: one room of five; d6 is in none.
        for i in 2...5 { _ = core.handle(.observe(s(i), .token(tokens[s(1)]!), snr: 20, level: -30), now: 1) }
        var aliases: [SessionID: UInt16] = [:]
        var tokenSlots = 0
        for now in [1.1, 1.4, 1.7] {
            for case .broadcastTurns(let id, let offsets, _, let alias) in core.handle(.tick, now: now) where !offsets.isEmpty {
                if let alias { aliases[id] = alias } else { tokenSlots += 1 }
            }
        }
        #expect(aliases.count == 3 && tokenSlots == 1, "four members need a slot, one of them plays its token: \(aliases)")
        let (speaker, alias) = aliases.min { $0.key.value < $1.key.value }!
        let listener = [s(2), s(3), s(4), s(5)].first { $0 != speaker }!
        var restored = try MatcherCore(snapshot: core.snapshot(), generator: SplitMix64(seed: 9))
        core.useGenerator(SplitMix64(seed: 9))
        let events = core.handle(.observe(listener, .roomAlias(alias), snr: 20, level: -30), now: 1.8)
        #expect(events.contains { if case .found(listener, OperationID(2), let m) = $0 { m.content == Array("device \(speaker.value.dropFirst())".utf8) } else { false } },
                "\(events)")
        #expect(restored.handle(.observe(listener, .roomAlias(alias), snr: 20, level: -30), now: 1.8) == events)
        // Outside the room: nothing, not even an invalid token.
        #expect(core.handle(.observe(s(6), .roomAlias(alias), snr: 20, level: -30), now: 1.85).isEmpty)
        _ = restored.handle(.observe(s(6), .roomAlias(alias), snr: 20, level: -30), now: 1.85)
        for step in 0..<40 {
            let now = 1.9 + Double(step) * 0.1
            #expect(core.handle(.tick, now: now) == restored.handle(.tick, now: now), "at \(now)")
        }
    }
}
