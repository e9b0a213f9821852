import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeWire
import Testing

/// ``RemoteMatcher``'s connection lifecycle on its own: the pure state machine, without sockets or tasks.
@Suite struct RemoteMatcherStateMachineTests {
    typealias Machine = RemoteMatcher.StateMachine

    static let message = try! Message(namespace: "museum", type: "exhibit", content: [1, 2, 3])
    static let publish = MatcherRequest.publish(OperationID(1), message, .default)
    static let subscribe = MatcherRequest.subscribe(OperationID(2), MessageFilter.allMyTypes, .default, lostTimeout: 10)

    /// The frames written so far to an attempt's outbound stream (the stream is finished first).
    func written(_ open: Machine.Open) async -> [ClientFrame] {
        open.attempt.writer.finish()
        var frames: [ClientFrame] = []
        for await frame in open.outbound { frames.append(frame) }
        return frames
    }

    func welcome(_ machine: inout Machine, _ open: Machine.Open, resumed: Bool = false) -> [MatcherRequest] {
        guard case .connected(let wasResumed, let replay, _) = machine.welcomed(attempt: open.attempt.id, sessionID: "s1",
                                                                               secret: [9, 9], resumed: resumed) else {
            Issue.record("not welcomed")
            return []
        }
        #expect(wasResumed == resumed)
        return replay
    }

    @Test func operationsWaitForTheWelcomeThenGoOutInOrder() async throws {
        var machine = Machine(endpoints: 1, backoff: 0.2...5)
        let openOpened = machine.connect()
        let open = try #require(openOpened)
        #expect(open.resumeID.isEmpty && open.resumeSecret.isEmpty)
        let r1 = machine.connect()
        #expect(r1 == nil, "one stream at a time")
        // Before the Welcome: operations are kept, sightings dropped, nothing written.
        let r2 = machine.send(Self.publish)
        #expect(r2 == nil)
        let r3 = machine.send(.observe([]))
        #expect(r3 == nil)
        let r4 = machine.send(.takeTurns(frameAirtime: 0.5, aliasAirtime: nil))
        #expect(r4 == nil)
        let r5 = machine.send(Self.subscribe)
        #expect(r5 == nil)
        let replay = welcome(&machine, open)
        #expect(replay == [Self.publish, Self.subscribe, .takeTurns(frameAirtime: 0.5, aliasAirtime: nil)])
        // Connected: a request goes out at once.
        let sent = machine.send(.unpublish(OperationID(1)))
        let writer = try #require(sent)
        writer.yield(ClientFrame(.unpublish(OperationID(1))))
        #expect(machine.session.operations.map(\.id) == [OperationID(2)])
        #expect(machine.session.endedWhileDown.isEmpty, "ended while connected: the service knows")
        #expect(await written(open) == [ClientFrame(.unpublish(OperationID(1)))])
    }

    @Test func backOffDoublesToItsLimitMovesOnAndResetsOnceWelcomed() throws {
        var machine = Machine(endpoints: 3, backoff: 0.2...1)
        var waits: [Double] = [], endpoints: [Int] = []
        for _ in 0..<5 {
            let openOpened = machine.connect()
        let open = try #require(openOpened)
            endpoints.append(open.attempt.endpoint)
            guard case .backOff(_, let wait, let failed, let next) = machine.streamEnded(attempt: open.attempt.id, .ended("refused"), jitter: 1) else {
                Issue.record("no back-off")
                return
            }
            #expect(failed == open.attempt.endpoint && next == (failed + 1) % 3)
            waits.append(wait)
        }
        #expect(endpoints == [0, 1, 2, 0, 1])
        #expect(waits == [0.2, 0.4, 0.8, 1, 1])
        // A stream that was welcomed starts the back-off afresh.
        let openOpened = machine.connect()
        let open = try #require(openOpened)
        _ = welcome(&machine, open)
        let r6 = machine.streamEnded(attempt: open.attempt.id, .ended("cut"), jitter: 1.25)
        #expect(r6
                == .backOff(reason: "cut", wait: 0.25, failed: 2, next: 0))
    }

    @Test func aResumedSessionGetsWhatEndedWhileDownANewOneDoesNot() throws {
        for resumed in [true, false] {
            var machine = Machine(endpoints: 1, backoff: 0.2...5)
            let firstOpened = machine.connect()
        let first = try #require(firstOpened)
            _ = machine.send(Self.publish)
            _ = machine.send(Self.subscribe)
            _ = welcome(&machine, first)
            _ = machine.streamEnded(attempt: first.attempt.id, .ended("cut"), jitter: 1)
            // Down: the publication ends; a sighting is dropped.
            let r7 = machine.send(.unpublish(OperationID(1)))
            #expect(r7 == nil)
            let r8 = machine.send(.unsubscribe(OperationID(7)))
            #expect(r8 == nil)
            #expect(machine.session.endedWhileDown == [.unpublish(OperationID(1))], "only live operations")
            let secondOpened = machine.connect()
        let second = try #require(secondOpened)
            #expect(second.resumeID == "s1" && second.resumeSecret == [9, 9])
            let replay = welcome(&machine, second, resumed: resumed)
            #expect(replay == (resumed ? [.unpublish(OperationID(1)), Self.subscribe] : [Self.subscribe]))
            #expect(machine.session.endedWhileDown.isEmpty)
        }
    }

    @Test func aRefusalIsFinalAndStaleInputsChangeNothing() throws {
        var machine = Machine(endpoints: 2, backoff: 0.2...5)
        let firstOpened = machine.connect()
        let first = try #require(firstOpened)
        _ = machine.streamEnded(attempt: first.attempt.id, .ended("refused"), jitter: 1)
        // Inputs of the stream that ended are stale.
        let r9 = machine.streamEnded(attempt: first.attempt.id, .ended("again"), jitter: 1)
        #expect(r9 == .none)
        let secondOpened = machine.connect()
        let second = try #require(secondOpened)
        guard case .none = machine.welcomed(attempt: first.attempt.id, sessionID: "old", secret: [], resumed: false) else {
            Issue.record("a stale Welcome was taken")
            return
        }
        let r10 = machine.heartbeatTick(attempt: first.attempt.id)
        #expect(r10 == nil)
        let r11 = machine.streamEnded(attempt: second.attempt.id, .refused(.sessionQuotaExceeded(3)), jitter: 1)
        #expect(r11
                == .fail(.sessionQuotaExceeded(3)))
        guard case .shutDown = machine.state else { Issue.record("not shut down: \(machine.state)"); return }
        let r12 = machine.connect()
        #expect(r12 == nil)
        let r13 = machine.send(Self.publish)
        #expect(r13 == nil)
        guard case .none = machine.close() else { Issue.record("closed twice"); return }
    }

    @Test func heartbeatsFillSilencesOnly() throws {
        var machine = Machine(endpoints: 1, backoff: 0.2...5)
        let openOpened = machine.connect()
        let open = try #require(openOpened)
        let r14 = machine.heartbeatTick(attempt: open.attempt.id)
        #expect(r14 == nil, "not before the Welcome")
        _ = welcome(&machine, open)
        var beats: [Bool] = []
        for tick in 0..<6 {
            if tick == 3 { _ = machine.send(.observe([])) }
            let beat = machine.heartbeatTick(attempt: open.attempt.id)
            beats.append(beat != nil)
        }
        // Ticks at half the interval: a beat after two silent ticks; a frame sent restarts the count.
        #expect(beats == [false, true, false, false, true, false])
    }

    @Test func closingGoesAwayWhenWelcomedAndStopsAtOnceOtherwise() throws {
        var idle = Machine(endpoints: 1, backoff: 0.2...5)
        guard case .finish(nil) = idle.close() else { Issue.record("not finished"); return }

        var connecting = Machine(endpoints: 1, backoff: 0.2...5)
        let openOpened = connecting.connect()
        let open = try #require(openOpened)
        guard case .finish(.some) = connecting.close() else { Issue.record("connecting: not finished with its writer"); return }

        var connected = Machine(endpoints: 1, backoff: 0.2...5)
        let streamOpened = connected.connect()
        let stream = try #require(streamOpened)
        _ = welcome(&connected, stream)
        guard case .goAway(_, let attempt) = connected.close(), attempt == stream.attempt.id else { Issue.record("no go-away"); return }
        let r15 = connected.send(Self.publish)
        #expect(r15 == nil, "nothing more is sent")
        let early = connected.goAwayTimedOut(attempt: attempt + 1)
        #expect(!early)
        let r16 = connected.streamEnded(attempt: attempt, .ended("done"), jitter: 1)
        #expect(r16 == .finish)
        let late = connected.goAwayTimedOut(attempt: attempt)
        #expect(!late, "already shut down")

        var slow = Machine(endpoints: 1, backoff: 0.2...5)
        let slowStreamOpened = slow.connect()
        let slowStream = try #require(slowStreamOpened)
        _ = welcome(&slow, slowStream)
        _ = slow.close()
        let r17 = slow.goAwayTimedOut(attempt: slowStream.attempt.id)
        #expect(r17)
        _ = open
    }
}
