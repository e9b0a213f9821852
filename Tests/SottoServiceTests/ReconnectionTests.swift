import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// The service restarts on the same Unix socket: managers reconnect by themselves to new sessions, send
/// their operations again, and keep found and lost alternating.
@Suite(.timeLimit(.minutes(1))) struct ReconnectionTests {
    /// A running pair: A publishes the exhibit, B subscribed and found it through A's first token.
    struct Pair {
        let first: TestServer
        let socket: String
        let a: MessageManager, b: MessageManager
        let logA: ConnectionLog, logB: ConnectionLog
        let recorder: EventRecorder
        let publication: PublicationHandle
        let subscription: SubscriptionHandle
        let firstToken: [UInt8]
    }

    func foundPair(lostTimeout: Double) async throws -> Pair {
        let socket = try temporaryDirectory() + "/matcher.sock"
        let first = try await TestServer(endpoint: .unix(path: socket))
        #expect(first.address == .unix(path: socket))
        let logA = ConnectionLog(), logB = ConnectionLog()
        let a = try await first.manager(lostTimeout: lostTimeout, connections: logA)
        let b = try await first.manager(lostTimeout: lostTimeout, connections: logB)
        let publication = try await a.publish(exhibit, now: 0)
        let recorder = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        let firstToken = try await token(of: a)
        await heard(b, token: firstToken)
        #expect(await recorder.waitFound())
        return Pair(first: first, socket: socket, a: a, b: b, logA: logA, logB: logB, recorder: recorder,
                    publication: publication, subscription: subscription, firstToken: firstToken)
    }

    /// Waits until `log` shows a disconnection followed by `connected(resumed: false)`.
    func reconnectedToNewSession(_ log: ConnectionLog) async -> Bool {
        await eventually(8) {
            let all = log.all
            guard let down = all.firstIndex(where: { if case .disconnected = $0 { return true } else { return false } }) else { return false }
            return all[down...].contains(.connected(resumed: false))
        }
    }

    @Test func restartKeepsOneFoundWhenHeardAgainInTime() async throws {
        let pair = try await foundPair(lostTimeout: 3)
        await pair.first.stop()
        let second = try await TestServer(endpoint: .unix(path: pair.socket), reuse: pair.first)
        defer { Task { await second.stop() } }
        #expect(await reconnectedToNewSession(pair.logA), "A reconnected by itself: \(pair.logA.all)")
        #expect(await reconnectedToNewSession(pair.logB), "B reconnected by itself: \(pair.logB.all)")
        // A new session has a new token.
        let renewed = await eventually(5) { await pair.a.token.map { $0 != pair.firstToken } ?? false }
        #expect(renewed)
        guard let newToken = await pair.a.token, renewed else { return }
        // B hears the new token, and keeps hearing it beyond its lost timeout (3 s).
        let hearing = Task {
            while !Task.isCancelled {
                await heard(pair.b, token: newToken)
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
        #expect(await eventually(3) { second.metric("sotto_found_total") == 1 }, "the operations were re-established on the new service")
        try await Task.sleep(for: .seconds(3.5))
        hearing.cancel()
        #expect(pair.recorder.pattern == "F", "exactly one found and no lost across the restart: \(pair.recorder.all)")
        #expect(await pair.subscription.status() == .active)
        #expect(await pair.publication.status() == .active)
        keep(pair.publication, pair.subscription)
        await pair.a.close(now: 0)
        await pair.b.close(now: 0)
    }

    @Test func restartWithoutHearingAgainLosesOnce() async throws {
        let pair = try await foundPair(lostTimeout: 2)
        // C subscribed too but never found anything: it must never get a lost.
        let c = try await pair.first.manager(lostTimeout: 2)
        let recorderC = EventRecorder()
        let subscriptionC = try await c.subscribe(filter: exhibitFilter, now: 0, handler: recorderC.handler)
        await pair.first.stop()
        let second = try await TestServer(endpoint: .unix(path: pair.socket), reuse: pair.first)
        defer { Task { await second.stop() } }
        #expect(await reconnectedToNewSession(pair.logB))
        #expect(await pair.recorder.waitLost(1, 6), "B lost the exhibit after its lost timeout")
        try await Task.sleep(for: .seconds(1))
        #expect(pair.recorder.pattern == "FL", "exactly one lost: \(pair.recorder.all)")
        #expect(pair.recorder.lost == [exhibit])
        #expect(recorderC.all.isEmpty, "never a lost without a found")
        keep(pair.publication, pair.subscription, subscriptionC)
        for m in [pair.a, pair.b, c] { await m.close(now: 0) }
    }
}
