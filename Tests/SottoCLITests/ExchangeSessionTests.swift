import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoModem
import SottoSupport
import SottoTools
import Synchronization
import Testing

/// The library behind `sotto publish` and `sotto subscribe`: schedules of frames and sessions that end by
/// themselves.
struct ExchangeSessionTests {
    @Test func frameTimesFollowInterval() {
        #expect(Array(FrameTimes(interval: 2, offset: 0.5, count: 3)) == [0.5, 2.5, 4.5])
        // Ends before the first frame that would not end by `end`.
        #expect(Array(FrameTimes(interval: 1, end: 3.4, airtime: 0.5)) == [0, 1, 2])
        // Jitter: within 0...jitter of the grid, the same for the same seed, another for another seed.
        let jittered = Array(FrameTimes(interval: 1, jitter: 0.25, seed: 7, count: 50))
        #expect(zip(jittered, 0..<50).allSatisfy { t, k in t >= Double(k) && t <= Double(k) + 0.25 })
        #expect(jittered == Array(FrameTimes(interval: 1, jitter: 0.25, seed: 7, count: 50)))
        #expect(jittered != Array(FrameTimes(interval: 1, jitter: 0.25, seed: 8, count: 50)))
        // The first frame on the grid exactly, the rest jittered.
        let firstExact = Array(FrameTimes(interval: 1, jitter: 0.25, seed: 7, offset: 0.1, firstWithoutJitter: true, count: 3))
        #expect(firstExact[0] == 0.1 && firstExact[1] > 1.1)
    }

    @Test func aSubscriptionToARecordingFindsThenLosesAndEnds() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("bytes.wav").path
        let content: [UInt8] = [0xCA, 0xFE]
        let modulator = try Modulator()
        try FrameScheduleWriter.write(to: path, format: AudioFileFormat(path: path), sampleRate: 48_000, modulator: modulator,
                                      times: FrameTimes(interval: 1, count: 2, airtime: 1), duration: 2.5,
                                      frameAt: { _ in Payload.audioBytes(content).frameBytes })
        let manager = MessageManager(appID: "test", broadcasts: false, now: 0)
        let filter = try MessageFilter([.audioBytes(content.count)])
        let events = Mutex<[String]>([])
        try await ExchangeSession.subscribe(manager: manager, filter: filter, strategy: Strategy(ttl: .infinite), lostTimeout: 1,
                                            ttl: 600, source: .recording(path: path, raw: nil), stop: StopFlag(),
                                            onEvent: { event, _ in
                                                switch event {
                                                case .found(let message): events.withLock { $0.append("found \(message.content)") }
                                                case .lost(let message): events.withLock { $0.append("lost \(message.content)") }
                                                default: break
                                                }
                                            })
        // Ended by itself once the message was lost (the TTL, counted from before the decode, is only a bound:
        // a loaded machine may take a minute to decode the recording in a debug build).
        #expect(events.withLock { $0 } == ["found \(content)", "lost \(content)"])
    }

    /// A session on a recording that ends at its subscription's TTL reports the expiry first: the loop used to
    /// check the deadline before letting the manager's clock reach it, and never reported it. (On a device,
    /// the same race between the session's deadline and the radio's ticks lost it under load: covered by
    /// `subscribeOnADeviceEndsWhenItsTTLExpires`.)
    @Test func aSessionEndingAtItsTTLReportsTheExpiry() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("silence.wav").path
        try AudioFile.write([Float](repeating: 0, count: 4_800), sampleRate: 48_000, to: path)
        let manager = MessageManager(appID: "test", broadcasts: false, now: 0)
        let expired = Mutex(false)
        try await ExchangeSession.subscribe(manager: manager, filter: MessageFilter([.audioBytes(2)]), strategy: Strategy(ttl: .seconds(1)),
                                            lostTimeout: 10, ttl: 1, source: .recording(path: path, raw: nil), stop: StopFlag(),
                                            onEvent: { event, _ in if case .expired = event { expired.withLock { $0 = true } } })
        #expect(expired.withLock { $0 })
    }

    @Test func aStoppedSessionEndsAtOnce() async throws {
        let manager = MessageManager(appID: "test", broadcasts: false, now: 0)
        let stop = StopFlag()
        stop.set()
        let message = try Message(namespace: "", type: "", content: [1])
        let published = Mutex(false)
        let ttl = 60.0
        let started = Date()
        try await ExchangeSession.publish(manager: manager, message: message, strategy: Strategy(ttl: .seconds(Int(ttl))), ttl: ttl,
                                          devices: nil, interval: 1, jitter: 0, stop: stop,
                                          onPublished: { published.withLock { $0 = true } })
        #expect(published.withLock { $0 })
        // Not kept for the TTL: the flag ended it.
        #expect(Date().timeIntervalSince(started) < ttl)
    }
}
