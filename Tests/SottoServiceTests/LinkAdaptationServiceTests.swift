import Foundation
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import Testing

/// Link adaptation over the service (issue 37): a session whose token another session hears weakly is sent a
/// `BroadcastProfile` frame (robust), and again when it resumes its session on a new connection; with
/// `--no-link-adaptation` (the configuration's `linkAdaptation` nil) none is sent.
@Suite(.timeLimit(.minutes(1))) struct LinkAdaptationServiceTests {
    /// An Observe frame of `token` heard with in-band SNR `snr` (dB).
    static func observe(_ token: [UInt8], snr: Double) -> ClientFrame {
        var frame = Frames.observe(token: token)
        if case .observe(var body) = frame.kind {
            body.sightings[0].snrDb = snr
            frame.kind = .observe(body)
        }
        return frame
    }

    /// A speaker session on its own connection, its Welcome and token, and a listener session that heard the
    /// speaker's token twice at -2 dB in-band.
    static func weaklyHeard(_ service: TestServer) async throws
        -> (client: RawClient, speaker: RawSession, welcome: Sotto_Exchange_V1_Welcome, listener: RawSession, listenerClient: RawClient) {
        let client = try RawClient(service.address)
        let speaker = RawSession(client)
        let welcome = try #require(await speaker.hello(key: service.apiKey))
        let token = try #require(await speaker.frame(where: { $0.tokenDirective != nil })?.tokenDirective)
        let listenerClient = try RawClient(service.address)
        let listener = RawSession(listenerClient)
        #expect(await listener.hello(key: service.apiKey) != nil)
        listener.send(observe(token, snr: -2))
        listener.send(observe(token, snr: -2))
        return (client, speaker, welcome, listener, listenerClient)
    }

    @Test func aWeaklyHeardSessionIsToldRobustAndToldAgainWhenItResumes() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.sessionGrace = 10
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let (client, speaker, welcome, listener, listenerClient) = try await Self.weaklyHeard(service)
        defer { Task { await listenerClient.close() } }
        let told = await speaker.frame { $0.profileDirective != nil }
        #expect(told?.profileDirective == .robust)
        #expect(told?.notice == .profile(.robust))
        // The connection drops (the session waits in its grace period) and the session is resumed on another.
        client.kill()
        try await Task.sleep(for: .milliseconds(300))
        let resumedClient = try RawClient(service.address)
        defer { Task { await resumedClient.close() } }
        let resumed = RawSession(resumedClient)
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = service.apiKey
        hello.resumeSessionID = welcome.sessionID
        hello.resumeSecret = welcome.resumeSecret
        var frame = ClientFrame()
        frame.kind = .hello(hello)
        resumed.send(frame)
        let again = await resumed.frame { $0.profileDirective != nil }
        #expect(again?.profileDirective == .robust)
        if case .welcome(let body)? = resumed.frames.first?.kind { #expect(body.resumed) } else { Issue.record("no welcome first: \(resumed.frames)") }
        resumed.cancel()
        listener.cancel()
    }

    @Test func withoutLinkAdaptationNoProfileIsSent() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.linkAdaptation = nil
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let (client, speaker, _, listener, listenerClient) = try await Self.weaklyHeard(service)
        defer { Task { await client.close(); await listenerClient.close() } }
        #expect(await speaker.frame(1.5) { $0.profileDirective != nil } == nil)
        speaker.cancel()
        listener.cancel()
    }
}

extension ServerFrame {
    /// The profile of a BroadcastProfile frame.
    var profileDirective: BroadcastProfile? {
        guard case .profile(let body) = kind else { return nil }
        return body.profile == .robust ? .robust : .standard
    }
}
