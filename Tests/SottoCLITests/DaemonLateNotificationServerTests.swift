import Foundation
import SottoDaemon
@testable import SottoNotify
import Testing

extension DaemonNotificationTests {
    /// At login the daemon may start before the desktop's notification server: it warns, and once a server
    /// answers, the next find is shown (with its group) without restarting the daemon.
    @Test func aNotificationServerThatComesAfterTheDaemonIsUsed() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        var rig = try DaemonRig()
        defer { rig.remove() }
        rig.extraEnvironment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        #expect(await daemon.saidOnStandardError("warning: no desktop notification server"), "\(daemon.standardError)")
        #expect(daemon.standardError.contains("until a notification server answers"), "\(daemon.standardError)")

        let server = try RecordingNotificationServer(address: bus.address)
        defer { server.stop() }
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let shown = await server.wait(timeout: 20) { $0.notifies.contains { $0.body.contains("hi") } }
        #expect(shown, "\(server.notifies) \(daemon.standardError)")
        let notify = server.notifies.first { $0.body.contains("hi") }
        #expect(notify?.hints["x-dunst-stack-tag"] == .string("sotto-door"), "\(String(describing: notify?.hints))")
        #expect(await daemon.saidOnStandardError("desktop notifications on"), "\(daemon.standardError)")
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
    }
}
