import Foundation
import SottoAudio
import SottoDaemon
import SottoExchange
import SottoExchangeCore
import SottoSupport
import SottoTools
import Testing

// In a file of its own: swift-testing's --filter matches a test's source file too, and scripts/test runs this
// suite alone (its in-process daemon starves beside the other daemon suites), which a file named DaemonTests
// would defeat.

/// The seam for notifications: a ``DaemonEventSink`` and every stream of `events()` receive each event,
/// with the group key of its operation (in-process, no audio device: an unknown PCM is a device fault).
@Suite struct DaemonEventSeamTests {
    final class Recorder: DaemonEventSink, @unchecked Sendable {
        private let lock = NSLock()
        private var received: [DaemonEvent] = []
        func receive(_ event: DaemonEvent) { lock.withLock { received.append(event) } }
        var events: [DaemonEvent] { lock.withLock { received } }
        func wait(timeout: Double = 10, until condition: ([DaemonEvent]) -> Bool) async -> Bool {
            let deadline = Date(timeIntervalSinceNow: timeout)
            while !condition(events) && Date() < deadline { try? await Task.sleep(for: .milliseconds(20)) }
            return condition(events)
        }
    }

    @Test func sinksAndStreamsReceiveEveryEventWithItsGroup() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let paths = DaemonPaths(environment: ["XDG_RUNTIME_DIR": dir.appendingPathComponent("run").path,
                                              "XDG_STATE_HOME": dir.appendingPathComponent("state").path, "HOME": dir.path])
        let consent = Consent(directory: dir.appendingPathComponent("config"))
        try consent.set(granted: true)
        let configuration = DaemonConfiguration(paths: paths, consent: consent, capture: PCMConfiguration(device: "sotto_no_such_pcm"),
                                                playback: PCMConfiguration(device: "sotto_no_such_pcm"), retryInterval: 0.2, environment: [:])
        let daemon = Daemon(configuration: configuration) { _ in }
        let sink = Recorder()
        await daemon.add(sink: sink)
        let stream = await daemon.events()
        let streamed = Recorder()
        let reader = Task { for await event in stream { streamed.receive(event) } }
        let stop = StopFlag()
        let running = Task { try await daemon.run(until: stop) }
        let deadline = Date(timeIntervalSinceNow: 10)
        var client: ControlClient?
        while client == nil && Date() < deadline {
            client = try? ControlClient(path: paths.socket)
            if client == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let reply = try #require(client).call(.start(OperationSpec(kind: .subscribe, group: "door")))
        let id = try #require(reply.operation?.id)
        #expect(await sink.wait { $0.contains { $0.operation == id && $0.group == "door" && $0.kind == .operation(status: "started", detail: nil) } })
        #expect(await sink.wait { $0.contains { if case .device(let fault?) = $0.kind { fault.contains("sotto_no_such_pcm") } else { false } } },
                "\(sink.events)")
        try consent.set(granted: false)
        #expect(await sink.wait { $0.contains { $0.kind == .permission(granted: false) } })
        #expect(await sink.wait { $0.contains { $0.operation == id && $0.group == "door" && $0.kind == .operation(status: "ended", detail: "consent revoked") } })
        stop.set()
        try await running.value
        await reader.value
        #expect(streamed.events == sink.events)
    }
}
