import Foundation
import Testing
@testable import SottoNotify

/// Desktop notifications through a real dbus-daemon started by each test and a recording
/// org.freedesktop.Notifications service registered on it over the same libdbus binding.
@Suite(.serialized, .timeLimit(.minutes(1))) struct DesktopNotifierTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)  // 08:00:00 UTC

    func event(_ kind: NotificationEvent.Kind, _ text: String, group: String? = nil, subscription: String = "sub-1",
               at offset: Double = 0) -> NotificationEvent {
        NotificationEvent(kind: kind, groupKey: group, subscriptionID: subscription, title: "Sotto", namespace: "ns", type: "t",
                          content: Array(text.utf8), foundAt: Self.t0 + offset)
    }

    func configuration(window: Double = 0.3, lost: NotificationPolicy.LostBehaviour = .mark,
                       open: [String] = ["/bin/false"], copy: [String] = ["/bin/false"]) -> DesktopNotifier.Configuration {
        .init(policy: .init(coalesceWindow: window, lost: lost, timeZone: TimeZone(identifier: "UTC")!), openCommand: open, copyCommand: copy)
    }

    @Test func aFindIsShownWithTheGroupingHintsAndARepeatReplacesIt() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration())
        #expect(notifier.serverName == "sotto-test sotto")
        #expect(notifier.capabilities.contains("actions"))

        await notifier.deliver(event(.found, "hello", at: 1))
        #expect(await server.wait { $0.notifies.count == 1 })
        let first = try #require(server.notifies.first)
        #expect(first.appName == "Sotto" && first.replacesID == 0 && first.summary == "Sotto: ns/t")
        #expect(first.body == "hello\nfound at 08:00:01")
        #expect(first.actions == ["default", "Copy"])
        #expect(first.hints["urgency"] == .byte(1))
        #expect(first.hints["category"] == .string("im.received"))
        #expect(first.hints["desktop-entry"] == .string("sotto"))
        #expect(first.hints["x-dunst-stack-tag"] == .string("sotto-sub-1"))
        #expect(first.expireTimeout == -1)

        try await Task.sleep(for: .milliseconds(400))  // past the coalescing window
        await notifier.deliver(event(.found, "again", at: 2))
        #expect(await server.wait { $0.notifies.count == 2 })
        let second = server.notifies[1]
        #expect(second.replacesID == first.assignedID)
        #expect(second.summary == "Sotto: ns/t (2)" && second.body.hasPrefix("again\n"))

        await notifier.deliver(event(.found, "other", subscription: "sub-2"))
        #expect(await server.wait { $0.notifies.count == 3 })
        #expect(server.notifies[2].replacesID == 0 && server.notifies[2].assignedID != first.assignedID)
        await notifier.close()
    }

    @Test func aBurstOfFindsIsCoalescedIntoOneSummary() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration(window: 2))
        for i in 0..<5 { await notifier.deliver(event(.found, "m\(i)")) }
        // The last notification counts all five and shows the latest.
        #expect(await server.wait(timeout: 15) { $0.notifies.last?.summary.hasSuffix("(5)") == true })
        try await Task.sleep(for: .milliseconds(700))
        let notifies = server.notifies
        // The first at once, then summaries that replace it in place: with the five within one 2 s window, one
        // summary for the other four. (On a machine so loaded that the deliveries themselves spread over more
        // than a window, more summaries; never one notification per find.)
        #expect(notifies.count >= 2 && notifies.count < 5, "\(notifies.map(\.summary))")
        #expect(notifies.dropFirst().allSatisfy { $0.replacesID == notifies[0].assignedID })
        #expect(notifies.last?.body.contains("latest:\nm4\n") == true)
        if notifies.count == 2 { #expect(notifies[1].body.hasPrefix("4 new messages; latest:\nm4\n")) }
        await notifier.close()
    }

    @Test func lostWithdrawsTheNotificationWhenConfigured() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration(lost: .withdraw))
        await notifier.deliver(event(.found, "here"))
        #expect(await server.wait { $0.notifies.count == 1 })
        await notifier.deliver(event(.lost, "here"))
        #expect(await server.wait { $0.closes == [$0.notifies[0].assignedID] })
        await notifier.close()
    }

    @Test func lostMarksTheNotificationByDefault() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration())
        await notifier.deliver(event(.found, "here"))
        #expect(await server.wait { $0.notifies.count == 1 })
        await notifier.deliver(event(.lost, "here"))
        #expect(await server.wait { $0.notifies.count == 2 })
        let mark = server.notifies[1]
        #expect(mark.replacesID == server.notifies[0].assignedID && mark.summary.hasSuffix("(no longer heard)"))
        #expect(mark.hints["urgency"] == .byte(0) && server.closes.isEmpty)
        await notifier.close()
    }

    @Test func theDefaultActionOpensAURLWithTheConfiguredCommandAndNoShell() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let output = bus.directory.appendingPathComponent("opened")
        let opener = bus.directory.appendingPathComponent("opener")
        try "#!/bin/sh\nprintf '%s' \"$1\" > \"$(dirname \"$0\")/opened\"\n".write(to: opener, atomically: true, encoding: .utf8)
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration(open: ["/bin/sh", opener.path]))
        let url = "https://example.com/a?x=$(touch%20pwned)&y='b';c"
        await notifier.deliver(event(.found, url))
        #expect(await server.wait { $0.notifies.count == 1 })
        #expect(server.notifies[0].actions == ["default", "Open"])
        try server.emit("ActionInvoked", [.uint32(server.notifies[0].assignedID), .string("default")])
        #expect(await eventually { (try? String(contentsOf: output, encoding: .utf8)) == url })
        #expect(!FileManager.default.fileExists(atPath: bus.directory.appendingPathComponent("pwned").path))
        await notifier.close()
    }

    @Test func theDefaultActionCopiesOtherContentThroughStandardInput() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let output = bus.directory.appendingPathComponent("copied")
        let notifier = try DesktopNotifier(busAddress: bus.address,
                                           configuration: configuration(copy: ["/usr/bin/tee", output.path]))
        await notifier.deliver(event(.found, "secret token $HOME `id`"))
        #expect(await server.wait { $0.notifies.count == 1 })
        try server.emit("ActionInvoked", [.uint32(server.notifies[0].assignedID), .string("default")])
        #expect(await eventually { (try? String(contentsOf: output, encoding: .utf8)) == "secret token $HOME `id`" })
        await notifier.close()
    }

    @Test func aNotificationTheUserDismissedIsNotReplacedButShownAnew() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration(window: 0.1))
        await notifier.deliver(event(.found, "one"))
        #expect(await server.wait { $0.notifies.count == 1 })
        try server.emit("NotificationClosed", [.uint32(server.notifies[0].assignedID), .uint32(2)])
        try await Task.sleep(for: .milliseconds(300))
        await notifier.deliver(event(.found, "two"))
        #expect(await server.wait { $0.notifies.count == 2 })
        #expect(server.notifies[1].replacesID == 0 && !server.notifies[1].summary.contains("("))
        await notifier.close()
    }

    @Test func bodyMarkupIsEscapedForServersThatTakeIt() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address, capabilities: ["body", "body-markup"])
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration())
        await notifier.deliver(event(.found, "<b>x</b> & y"))
        #expect(await server.wait { $0.notifies.count == 1 })
        #expect(server.notifies[0].body.hasPrefix("&lt;b&gt;x&lt;/b&gt; &amp; y\n"))
        #expect(server.notifies[0].actions.isEmpty)  // the server has no "actions" capability
        await notifier.close()
    }

    @Test func noNotificationServerOrNoBusIsAClearError() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        do {
            _ = try DesktopNotifier(busAddress: bus.address, configuration: configuration())
            Issue.record("expected no notification server")
        } catch {
            #expect(error.description.contains("no desktop notification server"))
            guard case .noNotificationServer = error else { Issue.record("wrong error \(error)"); return }
        }
        do {
            _ = try DesktopNotifier(busAddress: "unix:path=\(bus.directory.path)/absent", configuration: configuration())
            Issue.record("expected no bus")
        } catch {
            guard case .busUnavailable = error else { Issue.record("wrong error \(error)"); return }
        }
        #expect(DBusConnection.sessionBusAddress(environment: [:]) == nil)
        #expect(DBusConnection.sessionBusAddress(environment: ["XDG_RUNTIME_DIR": bus.directory.path]) == bus.address)
        #expect(NotifyError.noSessionBus.description.contains("--exec"))
    }

    @Test func aServerThatGoesAwayIsLoggedNotFatal() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration(window: 0))
        await notifier.deliver(event(.found, "one"))
        #expect(await server.wait { $0.notifies.count == 1 })
        server.stop()
        await notifier.deliver(event(.found, "two"))
        try await Task.sleep(for: .milliseconds(300))
        let again = try RecordingNotificationServer(address: bus.address)
        defer { again.stop() }
        await notifier.deliver(event(.found, "three"))
        #expect(await again.wait { $0.notifies.count == 1 })
        await notifier.close()
    }

    /// Measures find → Notify recorded by the server (the daemon's added latency), 20 updates in place.
    @Test func aFindReachesTheServerWithinMilliseconds() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        let notifier = try DesktopNotifier(busAddress: bus.address, configuration: configuration(window: 0))
        var latencies: [Duration] = []
        for i in 0..<20 {
            let started = ContinuousClock.now
            await notifier.deliver(event(.found, "m\(i)"))
            #expect(await server.wait { $0.notifies.count == i + 1 })
            latencies.append(ContinuousClock.now - started)
        }
        latencies.sort()
        print("find to Notify recorded: median \(latencies[10]), worst \(latencies[19]) (20 updates in place)")
        #expect(latencies[10] < .milliseconds(200))
        #expect(Set(server.notifies.dropFirst().map(\.replacesID)) == [server.notifies[0].assignedID])
        await notifier.close()
    }
}
