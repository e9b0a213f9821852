import SottoChannel
import Testing
@testable import SottoModem

/// Carrier sense and the sender's rules: what listen-before-talk is built on.
@Suite struct MediumAccessTests {
    let rate = 48_000.0
    let inaudible = 17_500.0...20_500.0

    func noise(seconds: Double, sigma: Float, seed: UInt64) -> [Float] {
        var rng = SeededRandom(seed: seed)
        return (0..<Int(seconds * rate)).map { _ in sigma * Float(rng.gaussian()) }
    }

    /// Feeds `x` in device periods and returns, per period, whether the band was busy at its end.
    func busyByPeriod(_ monitor: BandActivityMonitor, _ x: [Float], period: Int = 1024) -> [Bool] {
        stride(from: 0, to: x.count, by: period).map { start in
            monitor.process(Array(x[start..<min(x.count, start + period)]))
            return monitor.isBusy
        }
    }

    @Test func aBurstInTheBandIsBusyAndNoiseAloneIsNot() throws {
        // 2 s of noise, an 8-byte default frame 6 dB over the noise in the band (1/8 of the noise's power is in
        // the 3 kHz watched: -35 dB; the burst's power -29 dB), 2 s of noise.
        var x = noise(seconds: 4.5, sigma: 0.05, seed: 3)
        let burst = try Modulator(profile: .standard, sampleRate: rate, level: -26).modulate(Array(repeating: 7, count: 8))
        let at = Int(2 * rate)
        for i in burst.indices { x[at + i] += burst[i] }
        let monitor = try BandActivityMonitor(band: inaudible, sampleRate: rate)
        let busy = busyByPeriod(monitor, x)
        let period = 1024.0 / rate
        let busyTimes = busy.indices.filter { busy[$0] }.map { Double($0 + 1) * period }
        #expect(!busyTimes.isEmpty)
        // Busy only during the burst (and its last block), never in the noise before or after it.
        #expect(busyTimes.allSatisfy { $0 >= 2 && $0 <= 2 + Double(burst.count) / rate + 2 * period })
        // Busy for most of the burst.
        #expect(Double(busyTimes.count) * period >= 0.8 * Double(burst.count) / rate)
        #expect(monitor.idle(for: 0.5))
    }

    @Test func aSoundOutsideTheBandAndALouderSteadyNoiseAreNotBusy() throws {
        let monitor = try BandActivityMonitor(band: inaudible, sampleRate: rate)
        // An audible-profile frame (2-4 kHz) at full level over quiet noise.
        var x = noise(seconds: 3, sigma: 0.001, seed: 4)
        let audible = try Modulator(profile: .audible, sampleRate: rate, level: -6).modulate([1, 2, 3, 4])
        for i in audible.indices { x[Int(rate) + i] += audible[i] }
        #expect(!busyByPeriod(monitor, x).contains(true))
        // The noise gets 20 dB louder and stays so: busy at the step, idle again once the floor has followed.
        let louder = noise(seconds: 6, sigma: 0.01, seed: 5)
        let busy = busyByPeriod(monitor, louder)
        #expect(busy.prefix(10).contains(true))
        #expect(!busy.suffix(Int(1.5 * rate / 1024)).contains(true))
    }

    @Test func fixedRulesSendOnTheirScheduleWhateverIsHeard() {
        var scheduler = TransmitScheduler(rules: .fixed(interval: 1, jitter: 0.25), airtime: 0.5, start: 0.3, seed: 1)
        var starts: [Double] = []
        for step in 0..<1000 {
            let now = Double(step) * 0.01
            if scheduler.step(now: now, bandIdleFor: 0) == .transmit { starts.append(now) }
        }
        #expect(starts.first.map { abs($0 - 0.3) < 0.011 } == true)
        let gaps = zip(starts.dropFirst(), starts).map { $0 - $1 }
        #expect(gaps.count >= 7)
        #expect(gaps.allSatisfy { $0 >= 1 - 1e-9 && $0 <= 1.25 + 0.011 })
    }

    @Test func listenBeforeTalkWaitsForAnIdleBand() {
        var scheduler = TransmitScheduler(rules: .crowd, airtime: 0.5, start: 0, seed: 2)
        // Busy for the first 3 s: nothing is sent.
        for step in 0..<300 { #expect(scheduler.step(now: Double(step) * 0.01, bandIdleFor: 0) == .wait) }
        // Idle from 3 s: a frame within listen-first, idle-before-talk and the backoff window (the crowded one: the
        // band was busy all along).
        var sent: Double?
        for step in 300..<600 where sent == nil {
            let now = Double(step) * 0.01
            if scheduler.step(now: now, bandIdleFor: now - 3) == .transmit { sent = now }
        }
        let window = Double(TransmitScheduler.Rules.crowd.crowdedWindow) * TransmitScheduler.Rules.crowd.slot
        #expect(sent.map { $0 >= 3 + TransmitScheduler.Rules.crowd.idleBeforeTalk && $0 <= 3 + 0.05 + window + 0.02 } == true)
    }

    @Test func theIntervalGrowsWithTheDevicesHeardAndShrinksWhenTheyLeave() {
        let rules = TransmitScheduler.Rules.crowd
        var scheduler = TransmitScheduler(rules: rules, airtime: 0.3, start: 0, seed: 3)
        #expect(scheduler.interval(at: 0) == rules.interval)
        for d in 0..<9 { scheduler.heard([UInt8(d)], at: 1) }
        #expect(scheduler.neighbours(at: 1) == 9)
        #expect(abs(scheduler.interval(at: 1) - min(rules.maximumInterval, 10 * 0.3 / rules.airtimeShare!)) < 1e-9)
        // Forgotten after the neighbour memory.
        #expect(scheduler.neighbours(at: 1 + rules.neighbourMemory + 0.1) == 0)
        #expect(scheduler.interval(at: 1 + rules.neighbourMemory + 0.1) == rules.interval)
        // Capped so that a device is still heard within the lost timeout.
        for d in 0..<100 { scheduler.heard([UInt8(d), 1], at: 20) }
        #expect(scheduler.interval(at: 20) == rules.maximumInterval)
    }

    @Test func aNewcomerBringsTheNextFrameForwardOncePerFrame() {
        var scheduler = TransmitScheduler(rules: .crowd, airtime: 0.5, start: 0, seed: 4)
        var now = 0.0
        func runUntilSent(limit: Double) -> Double? {
            while now < limit {
                now += 0.01
                if scheduler.step(now: now, bandIdleFor: 10) == .transmit { return now }
            }
            return nil
        }
        let first = runUntilSent(limit: 2)
        #expect(first != nil)
        // Frame over at first + 0.5; the next is due about an interval after the first.
        _ = runUntilSent(limit: first! + 0.6)
        scheduler.heard([9, 9], at: now)
        let heardAt = now
        let answer = runUntilSent(limit: heardAt + 2)
        #expect(answer.map { $0 - heardAt < 0.95 } == true)  // one airtime per device heard, then the backoff window
        // A second newcomer right after does not bring the frame after forward again.
        scheduler.heard([8, 8], at: now + 0.01)
        let next = runUntilSent(limit: now + 5)
        #expect(next.map { $0 - answer! >= TransmitScheduler.Rules.crowd.interval - 1e-9 } == true)
    }

    /// Ten schedulers on one ideal medium (everyone senses everyone one step late): with listen-before-talk
    /// far fewer frames overlap than with the fixed rule.
    @Test func listenBeforeTalkAvoidsMostOverlaps() {
        func overlaps(_ rules: TransmitScheduler.Rules) -> (sent: Int, overlapped: Int) {
            let airtime = 0.3, step = 0.02
            var schedulers = (0..<10).map { TransmitScheduler(rules: rules, airtime: airtime, start: Double($0) * 0.1, seed: UInt64($0) + 10) }
            var frames: [(device: Int, start: Double)] = []
            var lastBusy = -1.0
            var now = 0.0
            while now < 30 {
                let busyNow = frames.contains { now - step < $0.start + airtime && $0.start <= now - step }
                if busyNow { lastBusy = now }
                for d in schedulers.indices where schedulers[d].step(now: now, bandIdleFor: busyNow ? 0 : now - lastBusy) == .transmit {
                    frames.append((d, now))
                    for other in schedulers.indices where other != d { schedulers[other].heard([UInt8(d)], at: now + airtime) }
                }
                now += step
            }
            let overlapped = frames.filter { f in frames.contains { $0.device != f.device && abs($0.start - f.start) < airtime } }.count
            return (frames.count, overlapped)
        }
        let fixed = overlaps(.fixed()), crowd = overlaps(.crowd)
        #expect(fixed.sent > 200 && Double(fixed.overlapped) > 0.9 * Double(fixed.sent))
        #expect(crowd.sent > 30)
        #expect(Double(crowd.overlapped) < 0.3 * Double(crowd.sent))
    }

    /// The backoff window of a device that heard nobody: the crowded one after seconds of a band busy most of the
    /// time (a crowd whose frames collide, so that its devices decode few of each other's), the small one after a
    /// single frame of another device. (The device follows an empty schedule meanwhile, so that it sends nothing.)
    @Test func theBackoffWindowGrowsWithTheBandsBusyShareWhoeverWasHeard() {
        let rules = TransmitScheduler.Rules.crowd, step = 0.01
        func window(busy: (Double) -> Bool) -> Int {
            var scheduler = TransmitScheduler(rules: rules, airtime: 0.54, start: 0, seed: 9)
            scheduler.follow(slots: [], until: 100, now: 0)
            var lastBusy = 0.0
            for tick in 0...600 {
                let now = Double(tick) * step
                if busy(now) { lastBusy = now }
                #expect(scheduler.step(now: now, bandIdleFor: busy(now) ? 0 : now - lastBusy) == .wait)
            }
            #expect(scheduler.neighbours(at: 6) == 0)
            return scheduler.window(at: 6, bandIdleFor: 0)
        }
        // Frames of 0.54 s with gaps of 0.23 s (70 % busy), as in a twenty-device room on the sender's rules.
        let crowd = window { $0.truncatingRemainder(dividingBy: 0.77) < 0.54 }
        // One frame of another device, 4 s before.
        let pair = window { $0 >= 2 && $0 < 2.54 }
        #expect(crowd == rules.crowdedWindow, "window after a crowded band: \(crowd)")
        #expect(pair == rules.minimumWindow, "window after one frame: \(pair)")
        #expect(rules.crowdedWindow > rules.minimumWindow)
    }

    /// Two devices: a frame that falls due while the other's frame is on the air, on a band quiet before it, draws
    /// from the smallest window (``TransmitScheduler/Rules/minimumWindow``), not the crowded one, so that a pair
    /// still hears each other soon.
    @Test func aFrameDueDuringOneOtherFrameDrawsFromTheSmallWindow() {
        let rules = TransmitScheduler.Rules.crowd, step = 0.01
        var waited: [Double] = []
        for seed in 0..<200 {
            var scheduler = TransmitScheduler(rules: rules, airtime: 0.54, start: 0, seed: UInt64(seed) + 500)
            // Quiet for 2 s (the device sends its first frame and waits its interval), then the other device's
            // frame from 2 s to 2.54 s; the rounds where this device's next frame fell due during it count.
            var contendedThroughIt = false
            for tick in 0..<600 {
                let now = Double(tick) * step
                let busy = now >= 2 && now < 2.54
                let action = scheduler.step(now: now, bandIdleFor: busy ? 0 : (now < 2 ? now : now - 2.54))
                if tick == 253, case .contending = scheduler.state { contendedThroughIt = true }
                if contendedThroughIt && now >= 2.54 && action == .transmit { waited.append(now - 2.54); break }
            }
        }
        #expect(waited.count >= 20, "rounds where a frame fell due during the other's: \(waited.count)")
        let bound = rules.idleBeforeTalk + Double(rules.minimumWindow) * rules.slot + 2 * step
        #expect(waited.allSatisfy { $0 <= bound }, "longest wait \(waited.max() ?? 0) s after the band freed")
    }
}

/// Following the matcher's turns instead of the device's own rules.
@Suite struct FollowedScheduleTests {
    @Test func aFollowedScheduleSendsInItsSlotsOnlyThenTheOwnRulesAgain() {
        var scheduler = TransmitScheduler(rules: .crowd, airtime: 0.5, start: 0, seed: 7)
        scheduler.follow(slots: [1.0, 3.0, 0.2], until: 5, now: 0.4)  // 0.2 is already past: skipped
        #expect(scheduler.isFollowing)
        var sent: [Double] = []
        var step = 40
        while Double(step) * 0.01 < 5 {
            let now = Double(step) * 0.01
            // The band is idle the whole time: on its own rules the device would have sent several frames.
            if scheduler.step(now: now, bandIdleFor: 10) == .transmit { sent.append(now) }
            step += 1
        }
        #expect(sent.count == 2 && abs(sent[0] - 1) < 0.011 && abs(sent[1] - 3) < 0.011)
        // After the schedule ends the device sends on its own rules again within an interval.
        var own: Double?
        while own == nil && Double(step) * 0.01 < 8 {
            let now = Double(step) * 0.01
            if scheduler.step(now: now, bandIdleFor: 10) == .transmit { own = now }
            step += 1
        }
        #expect(!scheduler.isFollowing)
        #expect(own.map { $0 >= 5 && $0 <= 5 + TransmitScheduler.Rules.crowd.interval + 0.4 } == true)
    }

    /// Slots of a schedule that names a short frame (the matcher's room alias) say so when they come; slots of
    /// another schedule merged with it keep their own frame.
    @Test func aliasSlotsAskForTheAliasFrame() {
        var scheduler = TransmitScheduler(rules: .crowd, airtime: 0.5, start: 0, seed: 9)
        scheduler.follow(slots: [1.0], until: 4, now: 0.1, alias: true)
        scheduler.follow(slots: [2.0], until: 4, now: 0.2)
        var actions: [(Double, TransmitScheduler.Action)] = []
        for step in 30..<400 {
            let now = Double(step) * 0.01
            let action = scheduler.step(now: now, bandIdleFor: 10)
            if action != .wait { actions.append((now, action)) }
        }
        #expect(actions.count == 2)
        #expect(actions.first.map { abs($0.0 - 1) < 0.011 && $0.1 == .transmitAlias } == true)
        #expect(actions.last.map { abs($0.0 - 2) < 0.011 && $0.1 == .transmit } == true)
    }

    @Test func aScheduleArrivingDuringAFrameIsFollowedAfterIt() {
        var scheduler = TransmitScheduler(rules: .crowd, airtime: 0.5, start: 0, seed: 8)
        var now = 0.0
        while scheduler.step(now: now, bandIdleFor: 10) != .transmit { now += 0.01 }
        let frameEnds = now + 0.5
        // A slot inside the frame cannot be kept; the one after it is.
        scheduler.follow(slots: [now + 0.2, frameEnds + 1], until: frameEnds + 2, now: now + 0.1)
        var sent: [Double] = []
        while now < frameEnds + 3 {
            now += 0.01
            if scheduler.step(now: now, bandIdleFor: 10) == .transmit { sent.append(now) }
        }
        #expect(sent.first.map { abs($0 - (frameEnds + 1)) < 0.011 } == true)
    }
}
