import Foundation
import Testing
@testable import SottoNotify

/// The pure grouping machine: one notification per group, in-place updates, coalescing, lost, actions.
@Suite struct NotificationGrouperTests {
    static let zone = TimeZone(identifier: "UTC")!
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)  // 2027-01-15 08:00:00 UTC

    func found(_ text: String, group: String? = nil, subscription: String = "sub-1", at offset: Double = 0) -> NotificationGrouper.Input {
        .event(NotificationEvent(kind: .found, groupKey: group, subscriptionID: subscription, title: "Sotto",
                                 namespace: "ns", type: "t", content: Array(text.utf8), foundAt: Self.t0 + offset),
               media: nil)
    }

    func lost(_ text: String, group: String? = nil) -> NotificationGrouper.Input {
        .event(NotificationEvent(kind: .lost, groupKey: group, subscriptionID: "sub-1", content: Array(text.utf8), foundAt: Self.t0),
               media: nil)
    }

    func posts(_ actions: [NotificationGrouper.Action]) -> [NotificationRequest] {
        actions.compactMap { if case .post(let r) = $0 { r } else { nil } }
    }

    @Test func firstFindPostsANewNotificationWithHintsAndTheFindTime() {
        var machine = NotificationGrouper(policy: .init(timeZone: Self.zone))
        let actions = machine.step(found("hello", at: 5), now: 100)
        let request = try! #require(posts(actions).first)
        #expect(actions.count == 1)
        #expect(request.replacesID == 0)
        #expect(request.summary == "Sotto: ns/t")
        #expect(request.body == "hello\nfound at 08:00:05")
        #expect(request.actions.map(\.key) == ["default"])
        #expect(request.actions.first?.label == "Copy")
        #expect(request.urgency == 1 && request.category == "im.received")
    }

    @Test func aRepeatedFindAfterTheWindowReplacesInPlaceWithACount() {
        var machine = NotificationGrouper(policy: .init(coalesceWindow: 2, timeZone: Self.zone))
        _ = machine.step(found("one"), now: 0)
        _ = machine.step(.posted(groupKey: "sub-1", notificationID: 7), now: 0.01)
        let request = try! #require(posts(machine.step(found("two", at: 3), now: 3)).first)
        #expect(request.replacesID == 7)
        #expect(request.summary == "Sotto: ns/t (2)")
        #expect(request.body.hasPrefix("two\n"))
    }

    @Test func findsWithinTheWindowCoalesceIntoOneSummaryAtTheWindowsEnd() {
        var machine = NotificationGrouper(policy: .init(coalesceWindow: 2, timeZone: Self.zone))
        _ = machine.step(found("a"), now: 10)
        _ = machine.step(.posted(groupKey: "sub-1", notificationID: 3), now: 10)
        #expect(machine.step(found("b"), now: 10.5) == [.wake(at: 12)])
        #expect(machine.step(found("c"), now: 11) == [])
        #expect(machine.step(found("d"), now: 11.5) == [])
        #expect(machine.step(.tick, now: 11.9) == [])
        let request = try! #require(posts(machine.step(.tick, now: 12)).first)
        #expect(request.replacesID == 3)
        #expect(request.summary.hasSuffix("(4)"))
        #expect(request.body.hasPrefix("3 new messages; latest:\nd\n"))
        #expect(machine.step(.tick, now: 13) == [])
    }

    @Test func groupsAreIndependentAndAGroupKeyOverridesTheSubscription() {
        var machine = NotificationGrouper()
        let a = posts(machine.step(found("x", subscription: "s1"), now: 0))
        let b = posts(machine.step(found("y", subscription: "s2"), now: 0))
        let c = posts(machine.step(found("z", group: "shared", subscription: "s1"), now: 0))
        let d = posts(machine.step(found("w", group: "shared", subscription: "s2"), now: 0))
        #expect(a.map(\.groupKey) == ["s1"] && b.map(\.groupKey) == ["s2"] && c.map(\.groupKey) == ["shared"])
        #expect(d.isEmpty)  // same group within the window: held for the summary
    }

    @Test func lostWithdrawsWhenConfiguredOnlyOnceEveryMessageIsLost() {
        var machine = NotificationGrouper(policy: .init(coalesceWindow: 0.5, lost: .withdraw))
        _ = machine.step(found("a"), now: 0)
        _ = machine.step(.posted(groupKey: "sub-1", notificationID: 9), now: 0)
        _ = machine.step(found("b"), now: 1)
        #expect(machine.step(lost("a"), now: 2) == [])
        #expect(machine.step(lost("b"), now: 3) == [.close(notificationID: 9)])
        #expect(machine.notificationID(ofGroup: "sub-1") == nil)
        // A later find starts a new notification.
        #expect(posts(machine.step(found("c"), now: 4)).first?.replacesID == 0)
    }

    @Test func lostMarksByDefaultAndTheNextFindUpdatesAgain() {
        var machine = NotificationGrouper()
        _ = machine.step(found("a"), now: 0)
        _ = machine.step(.posted(groupKey: "sub-1", notificationID: 4), now: 0)
        let mark = try! #require(posts(machine.step(lost("a"), now: 1)).first)
        #expect(mark.replacesID == 4 && mark.summary.hasSuffix("(no longer heard)") && mark.urgency == 0)
        let again = try! #require(posts(machine.step(found("a"), now: 1.2)).first)
        #expect(again.replacesID == 4 && again.urgency == 1)
    }

    @Test func expiredEndsEveryGroupOfTheSubscription() {
        var machine = NotificationGrouper(policy: .init(lost: .withdraw))
        _ = machine.step(found("a", group: "g1"), now: 0)
        _ = machine.step(.posted(groupKey: "g1", notificationID: 1), now: 0)
        _ = machine.step(found("b", group: "g2"), now: 0)
        _ = machine.step(.posted(groupKey: "g2", notificationID: 2), now: 0)
        _ = machine.step(found("c", group: "g3", subscription: "other"), now: 0)
        let expired = NotificationEvent(kind: .expired, subscriptionID: "sub-1", content: [], foundAt: Self.t0)
        #expect(machine.step(.event(expired, media: nil), now: 1) == [.close(notificationID: 1), .close(notificationID: 2)])
        #expect(machine.notificationID(ofGroup: "g3") == 0)
    }

    @Test func theDefaultActionOpensAWebURLAndCopiesAnythingElse() {
        var machine = NotificationGrouper()
        _ = machine.step(found("https://example.com/a?b=c", group: "u"), now: 0)
        _ = machine.step(.posted(groupKey: "u", notificationID: 1), now: 0)
        _ = machine.step(found("file:///etc/passwd", group: "f"), now: 0)
        _ = machine.step(.posted(groupKey: "f", notificationID: 2), now: 0)
        #expect(machine.step(.actionInvoked(notificationID: 1, actionKey: "default"), now: 1) == [.open("https://example.com/a?b=c")])
        #expect(machine.step(.actionInvoked(notificationID: 2, actionKey: "default"), now: 1) == [.copy(Array("file:///etc/passwd".utf8))])
        #expect(machine.step(.actionInvoked(notificationID: 99, actionKey: "default"), now: 1) == [])
        #expect(machine.step(.actionInvoked(notificationID: 1, actionKey: "unknown"), now: 1) == [])
    }

    @Test func aClosedNotificationForgetsItsGroup() {
        var machine = NotificationGrouper()
        _ = machine.step(found("a"), now: 0)
        _ = machine.step(.posted(groupKey: "sub-1", notificationID: 5), now: 0)
        #expect(machine.step(.closed(notificationID: 5, reason: 2), now: 1) == [])
        let next = try! #require(posts(machine.step(found("b"), now: 1.5)).first)
        #expect(next.replacesID == 0 && !next.summary.contains("("))
    }

    @Test func mediaShowsAsImageOrVideoLinkAndPlayAction() {
        var machine = NotificationGrouper()
        let event = NotificationEvent(kind: .found, subscriptionID: "s", content: Array("see http://h/v.mp4".utf8), foundAt: Self.t0)
        let video = try! #require(posts(machine.step(.event(event, media: .video(path: "/c/v.mp4", url: "http://h/v.mp4")), now: 0)).first)
        #expect(video.actions.map(\.key) == ["default", "open-media"] && video.imagePath == nil)
        _ = machine.step(.posted(groupKey: "s", notificationID: 8), now: 0)
        #expect(machine.step(.actionInvoked(notificationID: 8, actionKey: "open-media"), now: 1) == [.open("/c/v.mp4")])
        var other = NotificationGrouper()
        let image = try! #require(posts(other.step(.event(event, media: .image(path: "/c/i.png")), now: 0)).first)
        #expect(image.imagePath == "/c/i.png")
    }

    @Test func binaryContentIsShownInHexadecimal() {
        let event = NotificationEvent(kind: .found, subscriptionID: "s", content: [0, 1, 0xff], foundAt: Self.t0)
        #expect(NotificationGrouper.preview(event) == "3 bytes: 0001ff")
        #expect(event.text == nil && event.webURL == nil && event.carriedURL == nil)
    }
}
