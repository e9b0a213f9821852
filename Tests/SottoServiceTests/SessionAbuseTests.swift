import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import SwiftProtobuf
import Testing

/// What one authenticated session can make the service hold or do (issue 35, part B): namespaces and types
/// are limited, the outbox counts every byte it queues, sightings are bounded, operations that end are
/// acknowledged.
@Suite(.timeLimit(.minutes(1))) struct SessionAbuseTests {
    static func include(namespace: String, type: String) -> Sotto_Exchange_V1_FilterInclude {
        var include = Sotto_Exchange_V1_FilterInclude()
        include.kind = .namespacedType
        include.namespace = namespace
        include.type = type
        return include
    }

    @Test func namespacesAndFilterTypesAreLimited() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let client = greeted.client
        let session = greeted.session

        session.send(Frames.publish(1, namespace: String(repeating: "n", count: 120_000), content: [1]))
        let long = await session.status(1)
        #expect(long?.state == .rejected && long?.error == .invalidNamespace)
        #expect(long?.limit == 100 && long?.value == 120_000)
        #expect((long?.message.utf8.count ?? .max) < 200, "the error does not echo the namespace")

        session.send(Frames.subscribe(2, includes: [Self.include(namespace: String(repeating: "é", count: 101), type: "t")]))
        let filterNamespace = await session.status(2)
        #expect(filterNamespace?.state == .rejected && filterNamespace?.error == .invalidNamespace)
        #expect(filterNamespace?.limit == 100 && filterNamespace?.value == 101)

        session.send(Frames.subscribe(3, includes: [Self.include(namespace: "museum", type: String(repeating: "t", count: 101))]))
        let filterType = await session.status(3)
        #expect(filterType?.state == .rejected && filterType?.error == .typeTooLong)
        #expect(filterType?.limit == 100 && filterType?.value == 101)

        // At the limits: accepted (a filter may name a 100-character attachment type).
        session.send(Frames.publish(4, namespace: String(repeating: "n", count: 100), type: String(repeating: "t", count: 32), content: [1]))
        #expect(await session.status(4)?.state == .active)
        session.send(Frames.subscribe(5, includes: [Self.include(namespace: String(repeating: "n", count: 100), type: String(repeating: "t", count: 100))]))
        #expect(await session.status(5)?.state == .active)
        #expect(session.ended == nil)
        session.cancel()
    }

    /// The outbox's count is at least the bytes the frames take on the wire, whatever carries them, so a
    /// client that does not read is cut off at the documented bound.
    @Test func outboxCountsEveryByteItQueues() throws {
        let namespace = String(repeating: "n", count: 100), type = String(repeating: "t", count: 32)
        var message = WireMessage()
        message.namespace = namespace
        message.type = type
        message.content = Data([1])
        var found = Sotto_Exchange_V1_Found()
        found.opID = 1
        found.message = message
        var foundFrame = ServerFrame()
        foundFrame.kind = .found(found)
        let visible = Sotto_Exchange_V1_OperationStatus.accepted(2, visible: Array(repeating: try Message(namespace: namespace, type: type, content: [2, 3]), count: 20))
        let frames: [ServerFrame] = [foundFrame, .status(visible), .status(.rejected(3, .namespaceTooLong(120_000))),
                                     .error(.protocolViolation(String(repeating: "x", count: 500))), ServerFrame(.token([1, 2, 3, 4, 5, 6, 7, 8]))]
        for frame in frames {
            let outbox = Outbox(limits: .init(frames: 10, bytes: 1 << 20))
            #expect(outbox.push(frame))
            let wire = try frame.serializedBytes() as [UInt8]
            // gRPC adds a 5-byte prefix; HTTP/2 a 9-byte frame header.
            #expect(outbox.queuedBytes >= wire.count + 5 + 9, "\(frame.kind.debugDescription): counted \(outbox.queuedBytes), wire \(wire.count)")
        }
        // A non-reading stream of long-namespace messages stops at the byte bound.
        let bound = 64 * 1024
        let outbox = Outbox(limits: .init(frames: 100_000, bytes: bound))
        var queuedWire = 0
        while outbox.push(foundFrame) { queuedWire += (try foundFrame.serializedBytes() as [UInt8]).count }
        #expect(queuedWire <= bound && outbox.queuedBytes <= bound)
        #expect(queuedWire > bound / 2, "the bound is not wildly pessimistic either (\(queuedWire) bytes)")
    }

    @Test func unpublishAndUnsubscribeAreAcknowledged() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let session = greeted.session
        session.send(Frames.publish(1, content: [1]))
        #expect(await session.status(1)?.state == .active)
        session.send(Frames.subscribe(2))
        #expect(await session.status(2)?.state == .active)
        func ended(_ op: UInt32) async -> Bool {
            await session.frame { frame in
                if case .opStatus(let s) = frame.kind { return s.opID == op && s.state == .ended } else { return false }
            } != nil
        }
        session.send(Frames.unpublish(1))
        #expect(await ended(1), "STATE_ENDED for the unpublish")
        var unsubscribe = ClientFrame()
        var body = Sotto_Exchange_V1_Unsubscribe()
        body.opID = 2
        unsubscribe.kind = .unsubscribe(body)
        session.send(unsubscribe)
        #expect(await ended(2), "STATE_ENDED for the unsubscribe")
        // Ending what is not there is still refused.
        session.send(Frames.unpublish(9))
        let unknown = await session.status(9)
        #expect(unknown?.state == .rejected && unknown?.error == .unknownOperation)
        session.cancel()
    }

    @Test func sightingsOfOneSessionAreBounded() async throws {
        let greeted = try await GreetedSession.start()
        defer { greeted.stopLater() }
        let service = greeted.service
        let session = greeted.session
        // A subscription that none of the IDs matches (each eviction would otherwise be a lost and a found).
        session.send(Frames.subscribe(1))
        #expect(await session.status(1)?.state == .active)
        // 64 distinct beacon IDs per report, 20 reports: 1 280 IDs, five times the bound.
        var next: UInt32 = 0
        for _ in 0..<20 {
            var body = Sotto_Exchange_V1_Observe()
            for _ in 0..<64 {
                next += 1
                var sighting = Sotto_Exchange_V1_Sighting()
                sighting.frame = Data(Payload.beacon([0xB0, UInt8(next >> 16 & 0xFF), UInt8(next >> 8 & 0xFF), UInt8(next & 0xFF)]).frameBytes)
                sighting.snrDb = 10
                body.sightings.append(sighting)
            }
            var frame = ClientFrame()
            frame.kind = .observe(body)
            session.send(frame)
        }
        #expect(await eventually(5) { service.metric("sotto_sightings_total") ?? 0 >= 1_280 })
        let held = await service.server.host.sightingsHeld
        #expect(held == MatcherCore.maxSourcesPerSession, "held \(held) sightings after 1 280 distinct IDs")
        #expect(session.ended == nil)
        session.cancel()
    }

    @Test func plaintextKeysStayOnThisMachine() throws {
        func refused(_ endpoints: [String], tls: Bool = false, insecure: Bool = false) throws -> Bool {
            var options = RemoteMatcher.Options(endpoints: try endpoints.map { try MatcherAddress(parsing: $0) }, apiKey: "k",
                                                tls: tls ? .init() : nil)
            options.insecure = insecure
            do { try options.checkKeyTransport(); return false } catch { return true }
        }
        #expect(try !refused(["127.0.0.1:7457", "localhost:1", "[::1]:2", "unix:/tmp/s.sock", "/tmp/t.sock"]))
        #expect(try refused(["192.0.2.1:7457"]))
        #expect(try refused(["127.0.0.1:7457", "matcher.example:443"]), "one remote node is enough to refuse")
        #expect(try !refused(["matcher.example:443"], tls: true))
        #expect(try !refused(["matcher.example:443"], insecure: true))
        #expect(throws: RemoteMatcher.PlaintextKeyRefused.self) {
            _ = try RemoteMatcher(options: .init(endpoint: try MatcherAddress(parsing: "192.0.2.1:7457"), apiKey: "k"))
        }
    }
}
