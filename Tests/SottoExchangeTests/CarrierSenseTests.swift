import SottoExchange
import SottoExchangeCore
import SottoLive
import SottoModem
import Testing

/// The radio's carrier sense: shared by its senders for as long as the capture runs, and aware of how far it lags
/// the air (arrival instants are given, so nothing here waits on the wall clock).
@Suite struct CarrierSenseTests {
    let rate = 48_000.0
    let block = 1024

    /// Faint noise, and another device's frames back to back (10 ms apart), both as 1024-sample blocks.
    func blocks(quiet seconds: Double) -> [[Float]] {
        var rng = SystemRandomNumberGenerator()
        let count = Int(seconds * rate) / block
        return (0..<count).map { _ in (0..<block).map { _ in Float.random(in: -0.001...0.001, using: &rng) } }
    }

    func blocks(busy seconds: Double) throws -> [[Float]] {
        let frame = try Modulator().modulate(Payload.audioBytes(Array("xx".utf8)).frameBytes) + [Float](repeating: 0, count: 480)
        var audio: [Float] = []
        while Double(audio.count) < seconds * rate { audio += frame }
        return stride(from: 0, to: Int(seconds * rate) / block * block, by: block).map { Array(audio[$0..<$0 + block]) }
    }

    /// Feeds `audio` to `sense`, block `k` arriving at `start + k * pace * block / rate`; returns the instant after.
    @discardableResult
    func feed(_ sense: CarrierSense, _ audio: [[Float]], from start: ContinuousClock.Instant, pace: Double = 1) -> ContinuousClock.Instant {
        var arrival = start
        for samples in audio {
            arrival = arrival.advanced(by: .seconds(pace * Double(block) / rate))
            samples.withUnsafeBufferPointer { sense.captured($0, sampleRate: rate, at: arrival) }
        }
        return arrival
    }

    @Test func aSenderThatStartsMidBurstKnowsTheBandIsBusy() throws {
        let sense = CarrierSense()
        let start = ContinuousClock.now
        var now = feed(sense, blocks(quiet: 0.6), from: start)
        #expect(try #require(sense.idleFor(at: now)) > 0.5)
        now = feed(sense, try blocks(busy: 1), from: now)
        // A sender made now, sharing the sense, sees the band busy and does not start its frame.
        let late = MediumAccess(rules: .crowd, airtime: 0.5, ownFrames: [], sense: sense)
        now = feed(sense, try blocks(busy: 1), from: now)
        #expect(try #require(late.sense.idleFor(at: now)) < 0.05)
        // Quiet again: idle from the end of the burst.
        let quietFrom = now
        now = feed(sense, blocks(quiet: 1), from: now)
        let idle = try #require(sense.idleFor(at: now))
        #expect(idle > 0.8 && idle <= (now - quietFrom).seconds + 0.001)
    }

    @Test func aSenseThatLagsTheAirCountsAsBusy() throws {
        let sense = CarrierSense()
        #expect(sense.idleFor(at: .now) == nil)
        let start = ContinuousClock.now
        var now = feed(sense, blocks(quiet: 1), from: start)
        #expect(try #require(sense.lag(at: now)) < 0.001)
        #expect(try #require(sense.idleFor(at: now)) > 0.9)
        // The capture thread runs at half speed for a second (the decoder cannot keep up): the quiet band it senses
        // is the band of up to 0.5 s ago, so it counts as busy now.
        now = feed(sense, blocks(quiet: 0.5), from: now, pace: 2)
        #expect(try #require(sense.lag(at: now)) > 0.45)
        #expect(sense.idleFor(at: now) == 0)
        // Asked 0.2 s after a block that kept up, it lags by those 0.2 s: still fresh enough.
        now = feed(sense, blocks(quiet: 0.5), from: now, pace: 0.01)
        #expect(try #require(sense.idleFor(at: now.advanced(by: .milliseconds(50)))) > 1)
        // The capture closes: nothing lags, and the idle time runs on.
        sense.captureStopped()
        #expect(sense.lag(at: now.advanced(by: .seconds(5))) == nil)
        #expect(try #require(sense.idleFor(at: now.advanced(by: .seconds(5)))) > 5)
    }

    @Test func anOverrunsLostSamplesAreForgotten() throws {
        let sense = CarrierSense()
        var now = feed(sense, blocks(quiet: 1), from: .now)
        // An overrun: 0.5 s of samples lost, then the capture keeps up again. It looks like a lag at first, and is
        // forgotten within two spans of the running minimum (4 s).
        now = feed(sense, blocks(quiet: 0.1), from: now.advanced(by: .milliseconds(500)))
        #expect(sense.idleFor(at: now) == 0)
        now = feed(sense, blocks(quiet: 4.5), from: now)
        #expect(try #require(sense.lag(at: now)) < 0.05)
        #expect(try #require(sense.idleFor(at: now)) > 4)
    }
}

private extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) * 1e-18 }
}
