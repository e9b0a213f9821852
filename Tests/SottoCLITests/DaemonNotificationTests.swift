import Foundation
import SottoDaemon
import SottoDaemonNotify
import SottoExchange
import SottoExchangeCore
@testable import SottoNotify
import Testing

/// `sotto daemon` notifications: its subscriptions' events as grouped desktop notifications on a session bus
/// the test starts (dbus-daemon and the recording notification server of the SottoNotify tests, shared through
/// NotifyTestBus.swift), and as `--exec` runs; no bus or no server is a warning and the daemon keeps running.
@Suite(.serialized) struct DaemonNotificationTests {
    /// The adapter: subscription events become notification events with the operation's group and the time
    /// the daemon heard them; other events none.
    @Test func daemonEventsBecomeNotificationEventsWithTheirGroup() throws {
        let message = try Message(namespace: "ns", type: "t", content: Array("hi".utf8))
        let date = Date(timeIntervalSince1970: 1_800_000_000)
        let found = try #require(NotificationEvent(daemonEvent: DaemonEvent(kind: .subscription(.found(message), time: 3),
                                                                            operation: "0123456789ab", group: "door", date: date)))
        #expect(found == NotificationEvent(kind: .found, groupKey: "door", subscriptionID: "0123456789ab", namespace: "ns", type: "t",
                                           content: Array("hi".utf8), foundAt: date))
        let lost = NotificationEvent(daemonEvent: DaemonEvent(kind: .subscription(.lost(message), time: 5), operation: "0123456789ab", group: "door"))
        #expect(lost?.kind == .lost && lost?.groupKey == "door" && lost?.content == Array("hi".utf8))
        let expired = NotificationEvent(daemonEvent: DaemonEvent(kind: .subscription(.expired, time: 9), operation: "0123456789ab", group: "g"))
        #expect(expired?.kind == .expired && expired?.groupKey == "g" && expired?.content == [])
        #expect(NotificationEvent(daemonEvent: DaemonEvent(kind: .subscription(.signalChanged(message, snr: 20, level: -30), time: 4),
                                                           operation: "0123456789ab", group: "door")) == nil)
        #expect(NotificationEvent(daemonEvent: DaemonEvent(kind: .operation(status: "started", detail: nil), operation: "0123456789ab", group: "door")) == nil)
        #expect(NotificationEvent(daemonEvent: DaemonEvent(kind: .permission(granted: false))) == nil)
        #expect(NotificationEvent(daemonEvent: DaemonEvent(kind: .device(fault: "gone"))) == nil)
    }

    /// A message heard on the paced capture PCM is notified on the bus with its group (dunst's stack tag), and
    /// withdrawn (--lost withdraw) when it is lost.
    @Test func aFoundMessageIsNotifiedWithItsGroupAndWithdrawnWhenLost() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        var rig = try DaemonRig()
        defer { rig.remove() }
        rig.extraEnvironment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let daemon = try await rig.startDaemon(["--lost", "withdraw"])
        defer { daemon.process.terminate() }
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door", "--lost-timeout", "2"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let shown = await server.wait(timeout: 20) { $0.notifies.contains { $0.body.contains("hi") } }
        #expect(shown, "\(server.notifies) \(daemon.standardError)")
        let notify = try #require(server.notifies.first { $0.body.contains("hi") })
        #expect(notify.hints["x-dunst-stack-tag"] == .string("sotto-door"), "\(notify.hints)")
        #expect(notify.summary.hasPrefix("Sotto"), "\(notify.summary)")
        let withdrawn = await server.wait(timeout: 15) { $0.closes.contains(notify.assignedID) }
        #expect(withdrawn, "\(server.closes) \(daemon.standardError)")
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
        #expect(!daemon.standardError.contains("warning: no"), "\(daemon.standardError)")
    }

    /// No session bus, or a bus without a notification server: a warning, and the daemon runs its operations.
    @Test func noBusOrNoServerIsAWarningAndTheDaemonKeepsRunning() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        for address in ["", bus.address] {
            var rig = try DaemonRig()
            defer { rig.remove() }
            rig.extraEnvironment["DBUS_SESSION_BUS_ADDRESS"] = address
            let daemon = try await rig.startDaemon()
            defer { daemon.process.terminate() }
            let warning = address.isEmpty ? "warning: no session bus" : "warning: no desktop notification server"
            #expect(await daemon.saidOnStandardError(warning), "\(daemon.standardError)")
            #expect(daemon.standardError.contains("without desktop notifications"), "\(daemon.standardError)")
            #expect(try rig.run(["subscribe", "--daemon"]).status == 0)
            #expect(try rig.operations().count == 1)
            #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
        }
        // --notify none: not even a warning.
        let rig = try DaemonRig()
        defer { rig.remove() }
        let quiet = try await rig.startDaemon(["--notify", "none"])
        defer { quiet.process.terminate() }
        #expect(await quiet.terminate() == 0)
        #expect(!quiet.standardError.contains("warning: no"), "\(quiet.standardError)")
        // Bad options are usage errors.
        for bad in [["--exec", "/no/such/program"], ["--exec", ""], ["--exec-arg", "x"], ["--notify", "loud"], ["--lost", "forget"]] {
            let result = try rig.run(["daemon"] + bad, timeout: 10)
            #expect(result.status == 64, "\(bad): \(result.status) \(result.stderr)")
        }
    }

    /// --exec on a headless machine: one run per event, its fields in the environment (no shell string built
    /// from them): the program writes them to a file.
    @Test func execWritesEachEventFromTheEnvironment() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        let out = rig.directory.appendingPathComponent("events.txt")
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let script = #"printf '%s|%s|%s|%s|%s\n' "$SOTTO_EVENT" "$SOTTO_GROUP" "$SOTTO_SUBSCRIPTION" "$SOTTO_CONTENT" "$(cat)" >> "$1""#
        let daemon = try await rig.startDaemon(["--notify", "none", "--exec", "/bin/sh", "--exec-arg", "-c", "--exec-arg", script,
                                                "--exec-arg", "sh", "--exec-arg", out.path])
        defer { daemon.process.terminate() }
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door \"quoted\" $HOME", "--lost-timeout", "2"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let id = subscribe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        func lines() -> [String] { ((try? String(contentsOf: out, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
        let deadline = Date(timeIntervalSinceNow: 20)
        while lines().count < 2 && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(lines() == ["found|door \"quoted\" $HOME|\(id)|hi|hi", "lost|door \"quoted\" $HOME|\(id)|hi|hi"], "\(lines()) \(daemon.standardError)")
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
    }

    /// A failing --exec program is a warning per event; the daemon keeps running and hearing.
    @Test func aFailingExecIsAWarningAndTheDaemonKeepsRunning() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let daemon = try await rig.startDaemon(["--notify", "none", "--exec", "false"])
        defer { daemon.process.terminate() }
        #expect(try rig.run(["subscribe", "--daemon", "--lost-timeout", "2"]).status == 0)
        #expect(await daemon.saidOnStandardError("--exec false exited with status 1 for a found event", timeout: 20), "\(daemon.standardError)")
        #expect(daemon.process.isRunning)
        #expect(try rig.operations().count == 1)
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
    }
}
