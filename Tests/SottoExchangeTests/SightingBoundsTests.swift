import SottoCodes
import SottoExchange
import SottoExchangeCore
import Testing

/// A session's sightings are bounded in number and aged out, whatever IDs it reports; an edge that goes
/// is reconciled like one that timed out.
@Suite struct SightingBoundsTests {
    static let filter = try! MessageFilter([.beaconIDs])

    /// A core with subscriber S of every beacon ID.
    static func core() throws -> MatcherCore {
        var core = MatcherCore(generator: SplitMix64(seed: 7))
        _ = core.handle(.openSession(SessionID("S"), appID: "app", broadcasts: false), now: 0)
        _ = core.handle(.subscribe(SessionID("S"), OperationID(1), filter, try Strategy(ttl: .infinite), lostTimeout: 60), now: 0)
        return core
    }

    static func id(_ n: Int) -> [UInt8] { [0xB0, UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] }

    @Test func distinctIDsBeyondTheBoundEvictTheStalest() throws {
        var core = try Self.core()
        let limit = MatcherCore.maxSourcesPerSession
        for n in 0..<(4 * limit) {
            _ = core.handle(.observe(SessionID("S"), .beacon(Self.id(n)), snr: 10, level: -30), now: Double(n) * 0.01)
        }
        #expect(core.sightingCount(of: SessionID("S")) == limit)
        #expect(core.totalSightingCount == limit)
        // The found set follows: the evicted beacons were lost, the last `limit` are found.
        #expect(core.visibleMessages(session: SessionID("S"), operation: OperationID(1)).count == limit)
        // One more new ID evicts exactly the stalest (the oldest still held), reported lost.
        let events = core.handle(.observe(SessionID("S"), .beacon(Self.id(99_999)), snr: 10, level: -30), now: 11)
        let lost = events.compactMap { event -> [UInt8]? in if case .lost(_, _, let m) = event { return m.content } else { return nil } }
        #expect(lost == [Self.id(3 * limit)], "\(events)")
        #expect(core.sightingCount(of: SessionID("S")) == limit)
    }

    @Test func sightingsAgeOutAndTheirFindsAreLost() throws {
        var core = try Self.core()
        for n in 0..<100 { _ = core.handle(.observe(SessionID("S"), .beacon(Self.id(n)), snr: 10, level: -30), now: 1) }
        #expect(core.sightingCount(of: SessionID("S")) == 100)
        // No input at all for a long while (a pause of the whole service), then one tick: the lost timeout
        // (60 s) and the memory (120 s) both passed; everything is lost and forgotten.
        let events = core.handle(.tick, now: 1 + MatcherCore.sightingMemory + 10)
        #expect(events.filter { if case .lost = $0 { return true } else { return false } }.count == 100)
        #expect(core.totalSightingCount == 0)
        #expect(core.visibleMessages(session: SessionID("S"), operation: OperationID(1)).isEmpty)
    }

    @Test func recentSightingsStay() throws {
        var core = try Self.core()
        _ = core.handle(.observe(SessionID("S"), .beacon(Self.id(1)), snr: 10, level: -30), now: 0)
        var t = 0.0
        while t < 300 {
            t += 5
            _ = core.handle(.observe(SessionID("S"), .beacon(Self.id(1)), snr: 10, level: -30), now: t)
            _ = core.handle(.tick, now: t + 0.1)
        }
        #expect(core.sightingCount(of: SessionID("S")) == 1)
        #expect(core.visibleMessages(session: SessionID("S"), operation: OperationID(1)).count == 1)
    }
}
