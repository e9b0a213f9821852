import Foundation
import GRPCCore
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// Resumption edge cases, signal changes, audio bytes and beacons through the service.
@Suite(.timeLimit(.minutes(1))) struct ServiceSourcesTests {
    func helloFrame(key: String, resume: Sotto_Exchange_V1_Welcome? = nil) -> ClientFrame {
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = key
        hello.broadcasts = true
        if let resume {
            hello.resumeSessionID = resume.sessionID
            hello.resumeSecret = resume.resumeSecret
        }
        var frame = ClientFrame()
        frame.kind = .hello(hello)
        return frame
    }

    func welcome(_ session: RawSession) async -> Sotto_Exchange_V1_Welcome? {
        let frame = await session.frame { if case .welcome = $0.kind { return true } else { return false } }
        if case .welcome(let body)? = frame?.kind { return body }
        return nil
    }

    @Test func resumingAnAttachedSessionReplacesItsStream() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let first = RawSession(client)
        guard let original = await first.hello(key: service.apiKey) else { Issue.record("no welcome"); return }
        first.send(Frames.publish(1, content: [1]))
        #expect(await first.status(1)?.state == .active)

        // Another project's key never resumes it, even with the right secret.
        let other = RawSession(client)
        other.send(helloFrame(key: try await service.otherProjectKey(), resume: original))
        let otherWelcome = await welcome(other)
        #expect(otherWelcome?.resumed == false)
        #expect(otherWelcome?.sessionID != original.sessionID)
        #expect(first.ended == nil)

        let second = RawSession(client)
        second.send(helloFrame(key: service.apiKey, resume: original))
        let resumed = await welcome(second)
        #expect(resumed?.resumed == true)
        #expect(resumed?.sessionID == original.sessionID)
        let end = await first.end()
        guard case .some(.some(let error)) = end else { Issue.record("the replaced stream did not end with an error"); return }
        #expect((error as? RPCError)?.code == .aborted)
        // The operation moved with the session.
        second.send(Frames.unpublish(1))
        second.send(Frames.unpublish(1))
        // The first unpublish ended the resumed operation (STATE_ENDED), the second finds nothing to end.
        #expect(await second.frame { if case .opStatus(let s) = $0.kind { return s.opID == 1 && s.state == .ended } else { return false } } != nil)
        #expect(await second.frame { if case .opStatus(let s) = $0.kind { return s.opID == 1 && s.error == .unknownOperation } else { return false } } != nil,
                "the first unpublish ended the resumed operation")
        other.cancel()
        second.cancel()
    }

    @Test func signalChangesAreReported() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let a = RawSession(client), b = RawSession(client)
        #expect(await a.hello(key: service.apiKey) != nil)
        #expect(await b.hello(key: service.apiKey) != nil)
        a.send(Frames.publish(1, content: exhibit.content))
        #expect(await a.status(1)?.state == .active)
        guard let token = await a.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { Issue.record("no token"); return }
        b.send(Frames.subscribe(1, lostTimeoutMs: 10_000))
        #expect(await b.status(1)?.state == .active)
        b.send(Frames.observe(token: token))  // 20 dB
        #expect(await b.frame { $0.isFound } != nil)
        var louder = Frames.observe(token: token)
        if case .observe(var body) = louder.kind {
            body.sightings[0].snrDb = 60
            body.sightings[0].levelDbfs = -10
            louder.kind = .observe(body)
        }
        b.send(louder)  // smoothed by the matcher: 0.7 × 20 + 0.3 × 60 = 32 dB, a change of 12 dB
        let changed = await b.frame { if case .signalChanged = $0.kind { return true } else { return false } }
        if case .signalChanged(let body)? = changed?.kind {
            #expect(abs(body.snrDb - 32) < 0.01 && abs(body.levelDbfs + 24) < 0.01 && body.opID == 1)
            #expect(Array(body.message.content) == exhibit.content)
        } else { Issue.record("no signal change for +12 dB") }
        a.cancel()
        b.cancel()
    }

    @Test
    func foundCarriesTheSignalOfTheSighting() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let a = RawSession(client), b = RawSession(client)
        #expect(await a.hello(key: service.apiKey) != nil)
        #expect(await b.hello(key: service.apiKey) != nil)
        a.send(Frames.publish(1, content: exhibit.content))
        guard let token = await a.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { Issue.record("no token"); return }
        b.send(Frames.subscribe(1, lostTimeoutMs: 10_000))
        #expect(await b.status(1)?.state == .active)
        b.send(Frames.observe(token: token))  // 20 dB, -30 dBFS
        let found = await b.frame { $0.isFound }
        guard case .found(let body)? = found?.kind else { Issue.record("not found"); return }
        #expect(body.snrDb == 20)
        #expect(body.levelDbfs == -30)
        a.cancel()
        b.cancel()
    }

    @Test func audioBytesAreFoundAndLost() async throws {
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let b = RawSession(client)
        #expect(await b.hello(key: service.apiKey, broadcasts: false) != nil)
        var include = Sotto_Exchange_V1_FilterInclude()
        include.kind = .audioBytes
        include.length = 3
        b.send(Frames.subscribe(1, includes: [include], lostTimeoutMs: 1_000))
        #expect(await b.status(1)?.state == .active)
        var sighting = Sotto_Exchange_V1_Sighting()
        sighting.frame = Data(Payload.audioBytes([1, 2, 3]).frameBytes)
        sighting.snrDb = 15
        var observe = Sotto_Exchange_V1_Observe()
        observe.sightings = [sighting]
        var frame = ClientFrame()
        frame.kind = .observe(observe)
        b.send(frame)
        let found = await b.frame { $0.isFound }
        if case .found(let body)? = found?.kind {
            #expect(Array(body.message.content) == [1, 2, 3])
            #expect(body.message.namespace == ExchangeLimits.reservedNamespace && body.message.type == ExchangeLimits.audioBytesType)
        } else { Issue.record("audio bytes not found") }
        #expect(await b.frame(3) { $0.isLost } != nil, "lost after the 1 s lost timeout")
        b.cancel()
    }

    @Test func beaconsFromTheStoreAndRegistryReload() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.registryPollInterval = 0.2
        let seed = try await TestServer()
        await seed.stop()
        let attachment = try BeaconAttachment.message(namespace: "museum", type: "exhibit", data: Array("gallery 3".utf8))
        try await seed.store.registerBeacon(BeaconRecord(id: [9, 9, 9], projectID: seed.project.id, isPublic: false, rotation: nil,
                                                          attachments: [attachment]))
        let service = try await TestServer(configuration: configuration, reuse: seed)
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let own = RawSession(client), foreign = RawSession(client)
        #expect(await own.hello(key: service.apiKey, broadcasts: false) != nil)
        #expect(await foreign.hello(key: try await service.otherProjectKey(), broadcasts: false) != nil)
        for session in [own, foreign] {
            session.send(Frames.subscribe(1, lostTimeoutMs: 10_000))
            #expect(await session.status(1)?.state == .active)
        }
        func beacon(_ id: [UInt8]) -> ClientFrame {
            var sighting = Sotto_Exchange_V1_Sighting()
            sighting.frame = Data(Payload.beacon(id).frameBytes)
            sighting.snrDb = 12
            var observe = Sotto_Exchange_V1_Observe()
            observe.sightings = [sighting]
            var frame = ClientFrame()
            frame.kind = .observe(observe)
            return frame
        }
        own.send(beacon([9, 9, 9]))
        foreign.send(beacon([9, 9, 9]))
        let found = await own.frame { $0.isFound }
        if case .found(let body)? = found?.kind { #expect(Array(body.message.content) == Array("gallery 3".utf8)) }
        else { Issue.record("the registered beacon's attachment was not found") }
        #expect(await foreign.settled())
        let foreignFound = foreign.frames.contains { $0.isFound }
        #expect(!foreignFound, "a private beacon's attachment stays in its project")

        // Registered while the service runs: picked up by the registry poll, public for every project.
        let publicAttachment = try BeaconAttachment.message(namespace: "museum", type: "exhibit", data: Array("lobby".utf8))
        try await service.store.registerBeacon(BeaconRecord(id: [7, 7], projectID: service.project.id, isPublic: true, rotation: nil,
                                                             attachments: [publicAttachment]))
        try await Task.sleep(for: .milliseconds(600))
        foreign.send(beacon([7, 7]))
        let lobby = await foreign.frame(3) { $0.isFound }
        if case .found(let body)? = lobby?.kind { #expect(Array(body.message.content) == Array("lobby".utf8)) }
        else { Issue.record("a public beacon registered at run time was not found by another project") }
        own.cancel()
        foreign.cancel()
    }
}
