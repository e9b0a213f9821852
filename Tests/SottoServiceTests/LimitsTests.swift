import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import SwiftProtobuf
import Testing

/// The service enforces the exchange's limits itself: a raw gRPC client that skips the library's checks is
/// refused with typed errors.
@Suite(.timeLimit(.minutes(1))) struct ServiceLimitTests {
    func rejected(_ session: RawSession, _ op: UInt32) async -> Sotto_Exchange_V1_OperationStatus? {
        guard let status = await session.status(op) else { return nil }
        #expect(status.state == .rejected, "operation \(op) is rejected")
        return status
    }

    @Test func everyLimitIsCheckedByTheService() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let service = greeted.service
        let session = greeted.session

        session.send(Frames.publish(1, content: [UInt8](repeating: 7, count: 102_401)))
        let content = await rejected(session, 1)
        #expect(content?.error == .contentTooLarge)
        #expect(content?.limit == 102_400 && content?.value == 102_401)

        session.send(Frames.publish(2, type: String(repeating: "é", count: 33), content: [1]))
        let type = await rejected(session, 2)
        #expect(type?.error == .typeTooLong)
        #expect(type?.limit == 32 && type?.value == 33)

        session.send(Frames.publish(3, content: [1], ttl: 86_401))
        let ttl = await rejected(session, 3)
        #expect(ttl?.error == .invalidTtl)
        #expect(ttl?.limit == 86_400 && ttl?.value == 86_401)

        session.send(Frames.subscribe(4, includes: []))
        #expect(await rejected(session, 4)?.error == .emptyFilter)

        session.send(Frames.subscribe(5, lostTimeoutMs: 61_000))
        let lost = await rejected(session, 5)
        #expect(lost?.error == .invalidLostTimeout)
        #expect(lost?.limit == 60_000 && lost?.value == 61_000)

        // Operation id 0 is not an id.
        session.send(Frames.publish(0, content: [1]))
        let zero = await session.frame { frame in
            if case .opStatus(let s) = frame.kind { return s.opID == 0 } else { return false }
        }
        if case .opStatus(let status)? = zero?.kind {
            #expect(status.state == .rejected)
            #expect(status.error == .protocol)
        } else {
            Issue.record("no answer to operation id 0")
        }

        // An id reused by an operation of the other kind.
        session.send(Frames.publish(6, content: [1]))
        #expect(await session.status(6)?.state == .active)
        session.send(Frames.subscribe(6))
        let duplicate = await session.frame { frame in
            if case .opStatus(let s) = frame.kind { return s.opID == 6 && s.state == .rejected } else { return false }
        }
        if case .opStatus(let status)? = duplicate?.kind { #expect(status.error == .duplicateOperation) }
        else { Issue.record("a reused operation id of the other kind was not rejected") }

        // Nothing rejected became active, and the session is still usable.
        session.send(Frames.publish(7, content: [2]))
        #expect(await session.status(7)?.state == .active)
        #expect((service.metric("sotto_rejected_total") ?? 0) >= 7)
        #expect(session.ended == nil, "rejections do not end the stream")
        session.cancel()
    }

    @Test func firstFrameMustBeHello() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let session = RawSession(client, heartbeats: false)
        session.send(Frames.publish(1, content: [1]))
        let end = await session.end()
        guard case .some(.some(let error)) = end else { Issue.record("the stream did not end with an error: \(String(describing: end))"); return }
        #expect((error as? RPCError)?.code == .failedPrecondition)
        #expect(session.frames.isEmpty)
    }

    @Test func oversizedFrameEndsOnlyItsStream() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let big = RawSession(client)
        #expect(await big.hello(key: service.apiKey) != nil)
        let other = RawSession(client)
        #expect(await other.hello(key: service.apiKey) != nil)

        big.send(Frames.publish(1, content: [UInt8](repeating: 9, count: 140_000)))
        let end = await big.end()
        guard case .some(.some(let error)) = end else { Issue.record("a frame over 128 KiB did not end the stream: \(String(describing: end))"); return }
        if let rpc = error as? RPCError {
            #expect(rpc.code == .resourceExhausted, "ended with \(rpc.code)")
        }
        #expect(big.frames.allSatisfy { if case .opStatus(let s) = $0.kind { return s.state != .active } else { return true } })

        // The server keeps serving: the other stream and a new connection work.
        other.send(Frames.publish(2, content: [1]))
        #expect(await other.status(2)?.state == .active)
        let fresh = try RawClient(service.address)
        defer { Task { await fresh.close() } }
        let again = RawSession(fresh)
        #expect(await again.hello(key: service.apiKey) != nil)
        again.send(Frames.publish(1, content: [3]))
        #expect(await again.status(1)?.state == .active)
        other.cancel()
        again.cancel()
    }

    @Test func unknownFieldsAreAccepted() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let session = greeted.session

        // Field 99 (varint 1) appended inside the Publish and at the top level of the frame.
        let unknown: [UInt8] = [0x98, 0x06, 0x01]
        guard case .publish(let publish) = Frames.publish(1, content: [5, 6, 7]).kind else { Issue.record(); return }
        let publishBytes: [UInt8] = try publish.serializedBytes()
        let extended = try Sotto_Exchange_V1_Publish(serializedBytes: publishBytes + unknown)
        #expect(!extended.unknownFields.data.isEmpty)
        var frame = ClientFrame()
        frame.kind = .publish(extended)
        let frameBytes: [UInt8] = try frame.serializedBytes()
        let wire = try ClientFrame(serializedBytes: frameBytes + unknown)
        #expect(!wire.unknownFields.data.isEmpty)
        let sent: [UInt8] = try wire.serializedBytes()
        #expect(sent.count == frameBytes.count + unknown.count, "both unknown fields go on the wire")
        session.send(wire)
        let status = await session.status(1)
        #expect(status?.state == .active)
        #expect(session.ended == nil)
        session.cancel()
    }

    @Test func rateLimitRejectsAndIsCounted() async throws {
        let service = try await TestServer(rate: 1, burst: 2)
        defer { Task { await service.stop() } }
        let manager = try await service.manager()
        let first = try await manager.publish(try Message(namespace: "museum", type: "exhibit", content: [1]), now: 0)
        let second = try await manager.publish(try Message(namespace: "museum", type: "exhibit", content: [2]), now: 0)
        await #expect(throws: ExchangeError.rateLimited(1)) {
            _ = try await manager.publish(try Message(namespace: "museum", type: "exhibit", content: [3]), now: 0)
        }
        #expect(service.metric("sotto_rate_limited_total") == 1)
        #expect(await first.status() == .active)
        #expect(await second.status() == .active)
        // The bucket refills at 1 per second.
        try await Task.sleep(for: .milliseconds(1_100))
        let fourth = try await manager.publish(try Message(namespace: "museum", type: "exhibit", content: [4]), now: 0)
        #expect(await fourth.status() == .active)
        #expect(service.metric("sotto_rate_limited_total") == 1)
        keep(first, second, fourth)
        await manager.close(now: 0)
    }
}
