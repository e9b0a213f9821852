@testable import SottoExchange
@testable import SottoExchangeCore
import SottoSupport
import Testing

/// ``ManagerBook``, the value behind `MessageManager`: found and lost across reconnections, without a link,
/// a matcher or a clock.
@Suite struct ManagerBookTests {
    static let op = OperationID(1)
    static let a = try! Message(namespace: "museum", type: "exhibit", content: [1])
    static let b = try! Message(namespace: "museum", type: "exhibit", content: [2])

    /// A book with one live subscription (lost timeout 10 s).
    func subscribed() -> ManagerBook {
        var book = ManagerBook()
        let (_, events) = AsyncStream.makeStream(of: SubscriptionEvent.self)
        let subscription = SubscriptionRecord(continuation: events, handler: nil, cancelled: StopFlag(), lostTimeout: 10)
        book.operations[Self.op] = OperationRecord(status: .active, mode: .both, subscription: subscription)
        return book
    }

    /// The subscription events among `actions`, in order ("F" found, "L" lost, "E" expired, with the content).
    func events(_ actions: [ManagerBook.Action]) -> [String] {
        actions.compactMap { action in
            guard case .deliver(let event, _) = action else { return nil }
            switch event {
            case .found(let m): return "F\(m.content[0])"
            case .lost(let m): return "L\(m.content[0])"
            case .signalChanged(let m, _, _): return "S\(m.content[0])"
            case .expired: return "E"
            }
        }
    }

    /// Link adaptation: the profile the matcher names is the one the radio reads; a new session starts in the
    /// default profile again (a resumed one is told its profile again by the matcher).
    @Test func theMatchersProfileIsKeptUntilANewSession() {
        var book = ManagerBook()
        #expect(book.broadcastProfile == .standard)
        _ = book.receive(.profile(.robust), now: 0)
        #expect(book.broadcastProfile == .robust)
        _ = book.receive(.disconnected(reason: "test"), now: 1)
        _ = book.receive(.connected(resumed: true), now: 2)
        #expect(book.broadcastProfile == .robust)
        _ = book.receive(.connected(resumed: false), now: 3)
        #expect(book.broadcastProfile == .standard)
    }

    @Test func foundAndLostAlternate() {
        var book = subscribed()
        #expect(events(book.receive(.found(Self.op, Self.a), now: 0)) == ["F1"])
        #expect(events(book.receive(.found(Self.op, Self.a), now: 1)).isEmpty, "found once")
        #expect(events(book.receive(.signalChanged(Self.op, Self.b, snr: 9, level: -30), now: 1)).isEmpty, "not found: no change")
        #expect(events(book.receive(.lost(Self.op, Self.a), now: 2)) == ["L1"])
        #expect(events(book.receive(.lost(Self.op, Self.a), now: 3)).isEmpty, "lost once")
    }

    @Test func aNewSessionHasTheLostTimeoutToFindAgainWhatWasFound() {
        var book = subscribed()
        _ = book.receive(.found(Self.op, Self.a), now: 0)
        _ = book.receive(.found(Self.op, Self.b), now: 0)
        _ = book.receive(.disconnected(reason: "cut"), now: 5)
        let connected = book.receive(.connected(resumed: false), now: 6)
        #expect(connected.contains { if case .connectionChanged(.connected(resumed: false)) = $0 { true } else { false } })
        // The new session finds b again (no event: it was reported); a is not confirmed.
        #expect(events(book.receive(.accepted(Self.op, visible: [Self.b]), now: 7)).isEmpty)
        #expect(events(book.expireUnconfirmed(now: 15.9)).isEmpty, "within the lost timeout")
        #expect(events(book.expireUnconfirmed(now: 16)) == ["L1"])
        #expect(events(book.expireUnconfirmed(now: 30)).isEmpty)
    }

    @Test func aResumedSessionLosesWhatIsGoneAtOnce() {
        var book = subscribed()
        _ = book.receive(.found(Self.op, Self.a), now: 0)
        _ = book.receive(.connected(resumed: true), now: 1)
        #expect(events(book.receive(.accepted(Self.op, visible: [Self.b]), now: 1)) == ["L1", "F2"])
    }

    @Test func expiryLosesWhatWasFoundThenEnds() {
        var book = subscribed()
        _ = book.receive(.found(Self.op, Self.a), now: 0)
        let actions = book.receive(.expired(Self.op), now: 1)
        #expect(events(actions) == ["L1", "E"])
        guard case .finish? = actions.last else { Issue.record("the events were not finished last"); return }
        #expect(book.operations[Self.op]?.status == .expired)
        #expect(events(book.receive(.found(Self.op, Self.a), now: 2)).isEmpty, "nothing after the end")
    }

    @Test func closingLosesEverythingAndFindsNothingMore() {
        var book = subscribed()
        _ = book.receive(.found(Self.op, Self.a), now: 0)
        #expect(events(book.closeLink()) == ["L1"])
        #expect(events(book.receive(.found(Self.op, Self.b), now: 1)).isEmpty)
        let down = book.receive(.disconnected(reason: "closed"), now: 1)
        #expect(!down.contains { if case .connectionChanged = $0 { true } else { false } }, "a closed link's end is no news")
    }

    @Test func anAnswerDuringTheSendIsKeptForTheSender() {
        var book = subscribed()
        book.operations[Self.op]?.answer = .sending
        #expect(book.resolveAccept(Self.op, with: .quotaExceeded(3)).isEmpty)
        guard case .answeredWhileSending(.quotaExceeded(3))? = book.operations[Self.op]?.answer else {
            Issue.record("the answer was dropped")
            return
        }
        #expect(book.resolveAccept(OperationID(9), with: nil).isEmpty, "an unknown operation")
    }
}
