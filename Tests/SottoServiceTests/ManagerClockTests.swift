import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeWire
import Testing

/// A linked manager's own time is the clock it was given: its waits run on it, and end with what they wait
/// for (no timer outlives its wait).
@Suite(.timeLimit(.minutes(1))) struct ManagerClockTests {
    @Test func connectGivesUpOnTheInjectedClock() async throws {
        // A Unix socket nobody listens on: the link keeps trying, the manager's wait is all that ends.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-nobody-\(UUID().uuidString).sock").path
        let link = try RemoteMatcher(options: .init(endpoint: .unix(path: path), apiKey: "k"))
        let clock = ManualClock()
        let manager = MessageManager(link: link, clock: clock)
        let waiting = Task { () async -> ExchangeError? in
            do throws(ExchangeError) { try await manager.connect(timeout: 10); return nil } catch { return error }
        }
        // The link's ticker and the wait's timer sleep on the manual clock; real time does not end the wait.
        #expect(await eventually(20) { clock.sleeping == 2 })
        clock.advance(by: .seconds(10))
        #expect(await waiting.value == .unavailable("not connected after 10.0 s"))
        #expect(await eventually(20) { clock.sleeping == 1 }, "only the ticker sleeps on")
        await manager.close(now: 0)
        #expect(await eventually(20) { clock.sleeping == 0 }, "closing stops the ticker")
    }

    @Test func aConnectionCancelsTheWaitsTimer() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let clock = ManualClock()
        let manager = MessageManager(link: try RemoteMatcher(options: .init(endpoint: service.address, apiKey: service.apiKey)),
                                     clock: clock)
        try await manager.connect(timeout: 10)
        // Connected without the clock moving: the timer was cancelled, only the ticker sleeps.
        #expect(await eventually(20) { clock.sleeping == 1 })
        // An operation's wait for the matcher's answer ends with the answer, and so does its timer.
        let publication = try await manager.publish(try Message(namespace: "museum", type: "exhibit", content: [7]), now: 0)
        #expect(await publication.status() == .active)
        #expect(await eventually(20) { clock.sleeping == 1 })
        await manager.close(now: 0)
    }
}
