import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// A session that never reads its stream is cut off; the others go on.
@Suite(.timeLimit(.minutes(1))) struct SlowReaderTests {
    @Test func slowReaderIsCutOffOthersKeepReceiving() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.outbox = Outbox.Limits(frames: 4, bytes: 300_000)
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let big = try Message(namespace: "museum", type: "exhibit", content: [UInt8](repeating: 0x5A, count: 102_400))

        // The publisher: a raw session that toggles a 100 KiB publication.
        let publisherClient = try RawClient(service.address)
        defer { Task { await publisherClient.close() } }
        let publisher = RawSession(publisherClient)
        #expect(await publisher.hello(key: service.apiKey) != nil)
        guard let token = await publisher.frame(where: { $0.tokenDirective != nil })?.tokenDirective else {
            Issue.record("no token"); return
        }
        publisher.send(Frames.publish(1, content: big.content))
        #expect(await publisher.status(1)?.state == .active)

        // A reader that keeps up.
        let reader = try await service.manager(lostTimeout: 30)
        let recorder = EventRecorder()
        let subscription = try await reader.subscribe(filter: exhibitFilter, lostTimeout: 30, now: 0, handler: recorder.handler)
        await heard(reader, token: token)
        #expect(await recorder.waitFound())

        // The slow one: its own connection with a small window, never reads what comes back.
        let slowClient = try RawClient(service.address, windowSize: 65_535)
        defer { Task { await slowClient.close() } }
        let slow = RawSession(slowClient, reads: false)
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = service.apiKey
        var helloFrame = ClientFrame()
        helloFrame.kind = .hello(hello)
        slow.send(helloFrame)
        slow.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
        slow.send(Frames.observe(token: token))
        #expect(await eventually(3) { service.metric("sotto_sightings_total") ?? 0 >= 2 })

        // Lost and found, 100 KiB each, paced by the reader that keeps up.
        var steps = 0
        while service.metric("sotto_cut_off_total") ?? 0 < 1 && steps < 200 {
            let before = recorder.all.count
            publisher.send(steps % 2 == 0 ? Frames.unpublish(1) : Frames.publish(1, content: big.content))
            steps += 1
            guard await recorder.wait(5, until: { $0.count > before }) else { Issue.record("the reader stopped receiving at step \(steps)"); break }
        }
        #expect(service.metric("sotto_cut_off_total") ?? 0 >= 1, "the slow reader was cut off after \(steps) events")

        // The reader keeps receiving after the cut-off.
        for _ in 0..<4 {
            let before = recorder.all.count
            publisher.send(steps % 2 == 0 ? Frames.unpublish(1) : Frames.publish(1, content: big.content))
            steps += 1
            #expect(await recorder.wait(5, until: { $0.count > before }))
        }
        let pattern = recorder.pattern
        #expect(!pattern.contains("FF") && !pattern.contains("LL") && pattern.hasPrefix("F"), "found and lost alternate: \(pattern)")
        #expect(recorder.found.allSatisfy { $0 == big })
        #expect(service.metric("sotto_cut_off_total") == 1, "only the slow reader was cut off")
        slow.cancel()
        publisher.cancel()
        keep(subscription)
        await reader.close(now: 0)
    }
}
