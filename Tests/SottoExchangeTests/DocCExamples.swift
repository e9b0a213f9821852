import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoExchangeRadio
import SottoSupport
import Testing

/// The worked examples of the SottoExchangeCore, SottoExchange, SottoExchangeRadio and SottoSupport catalogs,
/// compiled (and all but the radio's run) here; `DocCExampleTests` (SottoCLITests) checks that each catalog shows its example
/// exactly as written here.
struct DocCExamples {
    /// SottoExchangeCore.md: the matcher as a pure state machine: inputs and the time in, events out.
    @Test func core() throws {
        var core = MatcherCore()
        let guide = SessionID("guide"), visitor = SessionID("visitor")
        // A session that broadcasts is given its token: what its radio plays.
        var guideToken: [UInt8] = []
        for case .broadcastToken(guide, let token) in core.handle(.openSession(guide, appID: "museum", broadcasts: true), now: 0) {
            guideToken = token
        }
        _ = core.handle(.openSession(visitor, appID: "museum", broadcasts: true), now: 0)
        let message = try Message(namespace: "museum", type: "exhibit", content: Array("The Night Watch".utf8))
        _ = core.handle(.publish(guide, OperationID(1), message, .default), now: 0)
        let filter = try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])
        _ = core.handle(.subscribe(visitor, OperationID(1), filter, .default, lostTimeout: 10), now: 0)
        // The visitor's radio decoded the guide's token (in-band SNR 20 dB) a second later: found.
        let heard = core.handle(.observe(visitor, .token(guideToken), snr: 20, level: -30), now: 1)
        print(heard)  // [found(visitor, 1, museum/exhibit)]
        // Nothing heard for the lost timeout (10 s): lost.
        let later = core.handle(.tick, now: 12)
        print(later)  // [lost(visitor, 1, museum/exhibit)]
        #expect(heard == [.found(visitor, OperationID(1), message)] && later == [.lost(visitor, OperationID(1), message)])
    }

    /// SottoExchange.md: two devices of one app through a matcher in the process; what a radio would hear is fed in.
    @Test(.timeLimit(.minutes(1))) func exchange() async throws {
        let matcher = LocalMatcher()
        let guide = MessageManager(link: await matcher.link(appID: "museum"), appID: "museum")
        let visitor = MessageManager(link: await matcher.link(appID: "museum"), appID: "museum")
        try await guide.connect()
        try await visitor.connect()
        let message = try Message(namespace: "museum", type: "exhibit", content: Array("The Night Watch".utf8))
        let publication = try await guide.publish(message, now: 0)
        let filter = try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])
        let subscription = try await visitor.subscribe(filter: filter, now: 0)
        // What each device's radio decodes from the other's speaker (SottoExchangeRadio does this on a sound card).
        if let guideToken = await guide.token, let visitorToken = await visitor.token {
            await visitor.heard(frame: Payload.token(guideToken).frameBytes, snr: 20, level: -30, now: 1)
            await guide.heard(frame: Payload.token(visitorToken).frameBytes, snr: 20, level: -30, now: 1)
        }
        var found: Message?
        for await event in subscription.events {
            if case .found(let message) = event { found = message; break }
        }
        print(found.map { String(decoding: $0.content, as: UTF8.self) } ?? "nothing")  // The Night Watch
        await subscription.cancel()
        await publication.cancel()
        await guide.close(now: 2)
        await visitor.close(now: 2)
        #expect(found == message)
    }

    /// SottoExchangeRadio.md: an exchange on a sound card (compiled; the live tests run radios on ALSA's file plugin).
    func radio(manager: MessageManager) async throws {
        let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: "default"),
                               playback: PCMConfiguration(device: "default"), interval: 1, jitter: 0.25)
        try radio.start()  // listens, reports what it hears, plays the session's token on the crowd rules
        _ = try await manager.subscribe(now: 0) { event in print(event) }
        try await Task.sleep(for: .seconds(60))
        await radio.stop()
    }

    /// SottoSupport.md: hex tokens and the stop flag every layer polls.
    @Test func support() {
        let token = Hex.decode("0123456789ABCDEF")  // either case, no prefix
        print(Hex.encode(token ?? []))  // 0123456789abcdef
        let stop = StopFlag()
        let worker = Thread { while !stop.isSet { usleep(1_000) } }
        worker.start()
        stop.set()  // from any thread; the worker ends at its next check
        #expect(token == [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef] && Hex.decode("xyz") == nil)
    }
}
