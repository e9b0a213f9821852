import Testing
@testable import SottoExchange
@testable import SottoExchangeCore

/// Link adaptation's rules with plain numbers (times in s, in-band SNRs in dB), then as the matcher core applies them.
@Suite struct LinkAdaptationTests {
    let speaker = SessionID("speaker"), listener = SessionID("listener"), other = SessionID("other")

    /// `listener`, listen-only (it cannot go unheard), hears `speaker` at `snr` at each of `times`; the changes, in order.
    func hear(_ adaptation: inout LinkAdaptation, snr: Double, at times: [Double]) -> [LinkAdaptation.Change] {
        times.flatMap { adaptation.heard(speaker, by: listener, observerBroadcasts: false, snr: snr, now: $0) }
    }

    @Test func aSessionHeardWeaklyMovesToRobust() {
        var adaptation = LinkAdaptation()
        // One weak hearing is no median yet.
        #expect(hear(&adaptation, snr: -2, at: [0]).isEmpty)
        #expect(adaptation.profile(of: speaker) == .standard)
        // The second one is: a median of -1.5 dB, below 1 dB.
        #expect(hear(&adaptation, snr: -1, at: [2]) == [LinkAdaptation.Change(session: speaker, profile: .robust)])
        #expect(adaptation.profile(of: speaker) == .robust)
    }

    @Test func theMedianDecidesNotTheWeakestHearing() {
        var adaptation = LinkAdaptation()
        // 12, 0.5, 9: median 9 dB. Nothing moves (and a median between 1 and 7 dB would not move it either).
        #expect(hear(&adaptation, snr: 12, at: [0]).isEmpty)
        #expect(hear(&adaptation, snr: 0.5, at: [1]).isEmpty)  // median of two: 6.25 dB
        #expect(hear(&adaptation, snr: 9, at: [2]).isEmpty)
        #expect(adaptation.profile(of: speaker) == .standard)
        // Hearings older than the window (10 s) no longer count: two weak ones now make the median.
        #expect(hear(&adaptation, snr: 0, at: [13, 14]) == [LinkAdaptation.Change(session: speaker, profile: .robust)])
    }

    @Test func aSingleStrongHearingDoesNotMoveItBack() {
        var adaptation = LinkAdaptation()
        _ = hear(&adaptation, snr: -3, at: [0, 1])
        #expect(adaptation.profile(of: speaker) == .robust)
        #expect(hear(&adaptation, snr: 25, at: [3]).isEmpty)
        #expect(adaptation.tick(now: 30).isEmpty)
        #expect(adaptation.profile(of: speaker) == .robust)
        // Strong hearings for less than 15 s do not either; a weak one among them restarts the 15 s.
        #expect(hear(&adaptation, snr: 20, at: [40, 42, 44, 46, 48, 50, 52]).isEmpty)
        #expect(hear(&adaptation, snr: 2, at: [53, 54, 55, 56, 57]).isEmpty)  // median of the window drops to 2 dB
        #expect(adaptation.tick(now: 58).isEmpty)
        #expect(adaptation.profile(of: speaker) == .robust)
    }

    @Test func fifteenSecondsAboveSevenDBMoveItBack() {
        var adaptation = LinkAdaptation()
        _ = hear(&adaptation, snr: -3, at: [0, 1])
        // Heard at 9 dB every 2 s from 10 s: the median is above 7 dB from the second hearing (12 s), so the
        // session goes back at 27 s, at a hearing or at the tick due then.
        #expect(hear(&adaptation, snr: 9, at: [10, 12, 14, 16, 18, 20, 22, 24, 26]).isEmpty)
        #expect(adaptation.tick(now: 26.9).isEmpty)
        #expect(adaptation.tick(now: 27) == [LinkAdaptation.Change(session: speaker, profile: .standard)])
        #expect(adaptation.profile(of: speaker) == .standard)
        // And the hearings start afresh in the default profile: one weak hearing is not enough to move it again.
        #expect(hear(&adaptation, snr: 0, at: [28]).isEmpty)
    }

    @Test func aSessionThatHearsOthersButIsNotHeardByThemMoves() {
        var adaptation = LinkAdaptation()
        // `listener` hears `speaker` every 2 s; `speaker` never hears `listener`: after 10 s `listener` moves.
        var changes: [LinkAdaptation.Change] = []
        for t in stride(from: 0.0, through: 8, by: 2) {
            changes += adaptation.heard(speaker, by: listener, observerBroadcasts: true, snr: 15, now: t)
        }
        #expect(changes.isEmpty)
        #expect(adaptation.tick(now: 9.9).isEmpty)
        #expect(adaptation.tick(now: 10) == [LinkAdaptation.Change(session: listener, profile: .robust)])
        // The speaker, heard well, stays in the default profile.
        #expect(adaptation.profile(of: speaker) == .standard)
    }

    @Test func beingHeardBackKeepsASessionInTheDefaultProfile() {
        var adaptation = LinkAdaptation()
        for t in stride(from: 0.0, through: 20, by: 2) {
            #expect(adaptation.heard(speaker, by: listener, observerBroadcasts: true, snr: 15, now: t).isEmpty)
            #expect(adaptation.heard(listener, by: speaker, observerBroadcasts: true, snr: 15, now: t + 1).isEmpty)
            #expect(adaptation.tick(now: t + 1.5).isEmpty)
        }
        #expect(adaptation.profile(of: speaker) == .standard && adaptation.profile(of: listener) == .standard)
    }

    @Test func aSessionNobodyHearsIsNotMoved() {
        var adaptation = LinkAdaptation()
        // `other` hears nobody and nobody hears it: nothing is known of it, at any time.
        #expect(adaptation.tick(now: 100).isEmpty)
        #expect(adaptation.profile(of: other) == .standard && !adaptation.knows(other))
        // A listen-only observer hearing a speaker well moves nobody.
        for t in stride(from: 0.0, through: 30, by: 2) {
            #expect(adaptation.heard(speaker, by: other, observerBroadcasts: false, snr: 12, now: t).isEmpty)
            #expect(adaptation.tick(now: t + 1).isEmpty)
        }
        #expect(adaptation.profile(of: other) == .standard && adaptation.profile(of: speaker) == .standard)
    }

    @Test func aRemovedSessionIsForgotten() {
        var adaptation = LinkAdaptation()
        _ = hear(&adaptation, snr: -3, at: [0, 1])
        #expect(adaptation.heard(speaker, by: other, observerBroadcasts: true, snr: -3, now: 2).isEmpty)
        #expect(adaptation.links[other]?.hears[speaker] == 2)
        adaptation.remove(speaker)
        #expect(adaptation.profile(of: speaker) == .standard && !adaptation.knows(speaker))
        #expect(adaptation.links[other]?.hears[speaker] == nil)
    }

    // MARK: In the matcher core

    /// A core with link adaptation, two sessions of one app with their tokens.
    func core(adaptation: Bool = true) -> (MatcherCore, a: SessionID, b: SessionID, tokenA: [UInt8], tokenB: [UInt8]) {
        var core = MatcherCore(generator: CountingGenerator(state: 3))
        if adaptation { core.linkAdaptation = LinkAdaptation() }
        let a = SessionID("a"), b = SessionID("b")
        _ = core.handle(.openSession(a, appID: "app", broadcasts: true), now: 0)
        _ = core.handle(.openSession(b, appID: "app", broadcasts: true), now: 0)
        return (core, a, b, core.token(of: a)!, core.token(of: b)!)
    }

    @Test func theCoreTellsASessionHeardWeaklyToPlayRobustAndBack() throws {
        var (core, a, b, tokenA, tokenB) = core()
        #expect(core.broadcastProfile(of: a) == .standard)
        // b hears a weakly, a hears b well: a moves.
        var events: [MatcherEvent] = []
        for t in [1.0, 3.0] {
            events += core.handle(.observe(b, .token(tokenA), snr: -1, level: -50), now: t)
            events += core.handle(.observe(a, .token(tokenB), snr: 15, level: -30), now: t + 0.5)
            events += core.handle(.tick, now: t + 1)
        }
        #expect(events.filter { if case .broadcastProfile = $0 { true } else { false } } == [.broadcastProfile(a, .robust)])
        #expect(MatcherEvent.broadcastProfile(a, .robust).notice == (a, .profile(.robust)))
        #expect(core.broadcastProfile(of: a) == .robust)
        // The state is in the snapshot (format 6): a restored core goes on alike.
        let snapshot = core.snapshot()
        #expect(Array(snapshot[4..<8]) == [6, 0, 0, 0])
        var restored = try MatcherCore(snapshot: snapshot, generator: CountingGenerator(state: 3))
        #expect(restored.broadcastProfile(of: a) == .robust)
        #expect(restored.linkAdaptation?.links == core.linkAdaptation?.links && restored.linkAdaptation?.rules == core.linkAdaptation?.rules)
        // Heard well for 15 s: back to the default profile, in both.
        func heardWell(_ core: inout MatcherCore) -> [MatcherEvent] {
            var events: [MatcherEvent] = []
            for t in stride(from: 10.0, through: 30, by: 2) {
                events += core.handle(.observe(b, .token(tokenA), snr: 12, level: -30), now: t)
                events += core.handle(.observe(a, .token(tokenB), snr: 15, level: -30), now: t + 0.5)
                events += core.handle(.tick, now: t + 1)
            }
            return events.filter { if case .broadcastProfile = $0 { true } else { false } }
        }
        #expect(heardWell(&core) == [.broadcastProfile(a, .standard)])
        #expect(heardWell(&restored) == [.broadcastProfile(a, .standard)])
    }

    @Test func withoutLinkAdaptationNothingIsSaid() {
        var (core, a, b, tokenA, _) = core(adaptation: false)
        var events: [MatcherEvent] = []
        for t in stride(from: 1.0, through: 30, by: 1) {
            events += core.handle(.observe(b, .token(tokenA), snr: -5, level: -50), now: t)
            events += core.handle(.tick, now: t + 0.5)
        }
        #expect(!events.contains { if case .broadcastProfile = $0 { true } else { false } })
        #expect(core.broadcastProfile(of: a) == nil)
    }

    @Test func aClosedSessionIsForgottenByTheAdaptation() {
        var (core, a, b, tokenA, _) = core()
        _ = core.handle(.observe(b, .token(tokenA), snr: -1, level: -50), now: 1)
        _ = core.handle(.observe(b, .token(tokenA), snr: -1, level: -50), now: 3)
        #expect(core.broadcastProfile(of: a) == .robust)
        _ = core.handle(.closeSession(a), now: 4)
        #expect(core.broadcastProfile(of: a) == nil && core.linkAdaptation?.knows(a) == false)
    }
}
