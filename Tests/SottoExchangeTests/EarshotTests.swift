import Foundation
import Testing
@testable import SottoExchange
@testable import SottoExchangeCore

/// Earshot (Nearby's DistanceType.EARSHOT) in the matcher core: a sighting counts for an earshot
/// subscription, or carries an earshot publication, only at an SNR of at least `earshotSNR`.
@Suite struct EarshotTests {
    let a = SessionID("A"), b = SessionID("B"), op = OperationID(1)

    /// A publishes `message` with `publication`, B subscribes with `subscription`; returns the core and A's token.
    func pair(publication: Strategy.DistanceType, subscription: Strategy.DistanceType, message: Message) throws -> (MatcherCore, [UInt8]) {
        var core = MatcherCore(generator: CountingGenerator(state: 3))
        guard case .broadcastToken(_, let tokenA) = core.handle(.openSession(a, appID: "app", broadcasts: true), now: 0)[0] else {
            throw CancellationError()
        }
        _ = core.handle(.openSession(b, appID: "app", broadcasts: true), now: 0)
        _ = core.handle(.publish(a, op, message, try Strategy(distanceType: publication)), now: 0)
        _ = core.handle(.subscribe(b, op, .allMyTypes, try Strategy(distanceType: subscription), lostTimeout: 10), now: 0)
        return (core, tokenA)
    }

    @Test func theThresholdIsStatedAndSettable() {
        var core = MatcherCore()
        #expect(core.earshotSNR == MatcherCore.defaultEarshotSNR)
        core.earshotSNR = 12
        #expect(core.earshotSNR == 12)
    }

    @Test func anEarshotSubscriptionFindsOnlyLoudSightings() throws {
        let message = try Message(type: "t", content: [1])
        var (core, tokenA) = try pair(publication: .default, subscription: .earshot, message: message)
        let threshold = core.earshotSNR
        // Heard, but below the threshold: nothing.
        #expect(core.handle(.observe(b, .token(tokenA), snr: threshold - 0.5, level: -40), now: 1).isEmpty)
        // A loud sighting: the smoothed SNR (0.7 old + 0.3 new) rises over the threshold after a few.
        var found: [MatcherEvent] = []
        for t in 2...10 where found.isEmpty { found = core.handle(.observe(b, .token(tokenA), snr: threshold + 5, level: -30), now: Double(t)) }
        #expect(found == [.found(b, op, message)])
        // Quiet sightings pull it below again: lost at once, before any lost timeout.
        var lost: [MatcherEvent] = []
        for t in 11...20 where lost.isEmpty { lost = core.handle(.observe(b, .token(tokenA), snr: threshold - 20, level: -50), now: Double(t)) }
        #expect(lost == [.lost(b, op, message)])
    }

    @Test func anEarshotPublicationReachesOnlyLoudSubscribers() throws {
        let message = try Message(type: "t", content: [2])
        var (core, tokenA) = try pair(publication: .earshot, subscription: .default, message: message)
        let threshold = core.earshotSNR
        #expect(core.handle(.observe(b, .token(tokenA), snr: threshold - 1, level: -40), now: 1).isEmpty)
        // The same publication without earshot is found over the same quiet edge.
        var (plain, plainToken) = try pair(publication: .default, subscription: .default, message: message)
        #expect(plain.handle(.observe(b, .token(plainToken), snr: threshold - 1, level: -40), now: 1) == [.found(b, op, message)])
        // Re-published with the default distance: found over the edge it already has.
        #expect(core.handle(.publish(a, op, message, .default), now: 2) == [.found(b, op, message)])
        // And back to earshot: lost again.
        #expect(core.handle(.publish(a, op, message, try Strategy(distanceType: .earshot)), now: 3) == [.lost(b, op, message)])
        _ = plainToken
    }

    @Test func theLouderDirectionCountsForEarshot() throws {
        let message = try Message(type: "t", content: [3])
        var (core, tokenA) = try pair(publication: .earshot, subscription: .earshot, message: message)
        guard let tokenB = core.token(of: b) else { Issue.record("B has no token"); return }
        let threshold = core.earshotSNR
        #expect(core.handle(.observe(b, .token(tokenA), snr: threshold - 10, level: -50), now: 1).isEmpty)
        // A hears B loudly: the edge is in earshot either way (hearing is symmetric, as in Nearby).
        #expect(core.handle(.observe(a, .token(tokenB), snr: threshold + 1, level: -30), now: 2) == [.found(b, op, message)])
    }

    @Test func audioBytesHonourAnEarshotSubscription() throws {
        var core = MatcherCore(generator: CountingGenerator(state: 4))
        _ = core.handle(.openSession(b, appID: "app", broadcasts: false), now: 0)
        _ = core.handle(.subscribe(b, op, try MessageFilter([.audioBytes(2)]), try Strategy(distanceType: .earshot), lostTimeout: 10), now: 0)
        let threshold = core.earshotSNR
        #expect(core.handle(.observe(b, .audioBytes([4, 5]), snr: threshold - 3, level: -40), now: 1).isEmpty)
        #expect(core.handle(.observe(b, .audioBytes([4, 6]), snr: threshold + 3, level: -30), now: 2) == [.found(b, op, try AudioBytes.message([4, 6]))])
    }
}
