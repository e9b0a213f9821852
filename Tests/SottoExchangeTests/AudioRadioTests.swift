import Foundation
import SottoAudio
import SottoModem
import Testing
@testable import SottoExchange
@testable import SottoExchangeCore
import SottoExchangeRadio

/// The exchange on real ALSA PCMs: the project's paced test plugin for capture and the file plugin over a
/// null slave for playback (no sound card, no mocks).
@Suite(.serialized) struct AudioRadioTests {
    static let directory: URL = {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-radio-\(getpid())")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let text = """
        pcm.sotto_radio_null { type null }
        pcm_type.sottofault { lib "\(faultPlugin)" }
        pcm.sotto_radio_capture { type sottofault; rate 48000; infile "\(url.path)/in.raw" }
        pcm.sotto_radio_playback { type file; slave.pcm "sotto_radio_null"; file "/dev/null"; format "raw" }
        pcm.sotto_radio_lbt_capture { type sottofault; rate 48000; infile "\(url.path)/lbt-in.raw" }
        pcm.sotto_radio_lbt_playback { type sottofault; rate 48000; outfile "\(url.path)/lbt-out.raw" }
        pcm.sotto_radio_turns_capture { type sottofault; rate 48000; infile "\(url.path)/turns-in.raw" }
        pcm.sotto_radio_turns_playback { type sottofault; rate 48000; outfile "\(url.path)/turns-out.raw" }
        pcm.sotto_radio_alias_capture { type sottofault; rate 48000; infile "\(url.path)/alias-in.raw" }
        pcm.sotto_radio_alias_playback { type sottofault; rate 48000; outfile "\(url.path)/alias-out.raw" }
        pcm.sotto_radio_profile_capture { type sottofault; rate 48000; infile "\(url.path)/profile-in.raw" }
        pcm.sotto_radio_profile_playback { type sottofault; rate 48000; outfile "\(url.path)/profile-out.raw" }
        """
        // ALSA keeps one configuration per process, and the live-audio suites of another test target run in
        // this process at the same time: every in-process suite sets the same list of files (see
        // `sharedALSAConfiguration`), each writing its own, with PCM names of its own.
        try! Data(text.utf8).write(to: URL(fileURLWithPath: sharedALSAConfiguration.radio))
        setenv("ALSA_CONFIG_PATH", sharedALSAConfiguration.path, 1)
        return url
    }()

    /// The project's test I/O plugin (built next to the test bundle): a capture paced to the sample clock, so
    /// that the capture thread cannot run through the recording (and fail at its end) while a loaded machine
    /// keeps the radio's event task waiting, as the unpaced `file` plugin could.
    static let faultPlugin: String = {
        let name = "libasound_module_pcm_sottofault.so"
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent(name).path), directory.path != "/" {
            directory.deleteLastPathComponent()
        }
        return directory.appendingPathComponent(name).path
    }()

    /// The per-process ALSA configuration files of the in-process live-audio suites (missing ones are skipped).
    static let sharedALSAConfiguration: (radio: String, live: String, path: String) = {
        let base = FileManager.default.temporaryDirectory.path + "/sotto-alsa-\(getpid())"
        return (base + "-radio.conf", base + "-live.conf", base + "-radio.conf:" + base + "-live.conf")
    }()

    static func writeCapture(_ samples: [Float], name: String = "in.raw") throws {
        var data = Data(capacity: 2 * samples.count)
        for s in samples {
            let v = Int16(max(-32_768, min(32_767, (s * 32_768).rounded())))
            withUnsafeBytes(of: v.littleEndian) { data.append(contentsOf: $0) }
        }
        try data.write(to: directory.appendingPathComponent(name))
    }

    /// The 16-bit little-endian samples a playback PCM wrote to `url`, as floats in -1...1.
    static func played(_ url: URL) throws -> [Float] {
        try Data(contentsOf: url).withUnsafeBytes { raw in raw.bindMemory(to: Int16.self).map { Float(Int16(littleEndian: $0)) / 32_768 } }
    }

    /// The rig of the turns tests: `seconds` of faint noise for the capture PCM `name`-in.raw, the playback file
    /// `name`-out.raw removed, and a matcher core planning turns by `rules` behind a `LocalMatcher`.
    static func turnsRig(_ name: String, seconds: Double, rules: BroadcastCoordinator.Rules) throws -> (matcher: LocalMatcher, out: URL) {
        var rng = SystemRandomNumberGenerator()
        try writeCapture((0..<Int(seconds * 48_000)).map { _ in Float.random(in: -0.001...0.001, using: &rng) }, name: "\(name)-in.raw")
        let out = directory.appendingPathComponent("\(name)-out.raw")
        try? FileManager.default.removeItem(at: out)
        var core = MatcherCore()
        core.turns = BroadcastCoordinator(rules: rules)
        return (LocalMatcher(core: core), out)
    }

    /// Link adaptation reaches the sound card: the radio plays its token frames in the default profile until the
    /// matcher (a core with `linkAdaptation`, behind a `LocalMatcher`) hears them weakly from another session and
    /// says `broadcastProfile(robust)`; from then on they are robust (decoded back from what the radio played).
    @Test func aRobustProfileFromTheMatcherMakesTheTokenFramesRobust() async throws {
        let rate = 48_000.0
        var rng = SystemRandomNumberGenerator()
        try Self.writeCapture((0..<Int(25 * rate)).map { _ in Float.random(in: -0.001...0.001, using: &rng) }, name: "profile-in.raw")
        let out = Self.directory.appendingPathComponent("profile-out.raw")
        try? FileManager.default.removeItem(at: out)
        var core = MatcherCore()
        core.linkAdaptation = LinkAdaptation()
        let matcher = LocalMatcher(core: core)
        let rig = try await RadioPair(matcher, devices: "profile")
        let (manager, other) = (rig.manager, rig.other)
        func elapsed() -> Double { rig.elapsed() }
        let tokenBytes = try #require(await rig.token(of: manager))
        // The default profile first: 3 s on the sender's rules.
        while elapsed() < 3 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(await manager.broadcastProfile == .standard)
        // The other session hears the token at -2 dB in-band, every 0.5 s until the profile changes (a client
        // reports one payload at most every 2 s, so the matcher gets one about every 2 s; on a loaded machine a report
        // comes later than the hearing, so two hearings 2.1 s apart could make only one report): the median of two
        // reports is below 1 dB.
        let frame = Payload.token(tokenBytes).frameBytes
        let firstHeard = elapsed()
        var profile = await manager.broadcastProfile
        var lastHeard = -Double.infinity
        while profile != .robust, elapsed() < firstHeard + 15 {
            if elapsed() >= lastHeard + 0.5 {
                await other.heard(frame: frame, snr: -2, level: -60, now: 0)
                lastHeard = elapsed()
            }
            try await Task.sleep(for: .milliseconds(20))
            profile = await manager.broadcastProfile
        }
        #expect(profile == .robust)
        let switchedAt = elapsed()
        while elapsed() < switchedAt + 6 { try await Task.sleep(for: .milliseconds(50)) }
        let (played, delay) = try await rig.stop(playedTo: out, sampleRate: rate)
        let frames = try StreamingDecoder.decode(played, sampleRate: rate, profiles: Profile.all).filter { $0.token == frame }
        let switched = switchedAt - delay
        let described = frames.map { "\($0.profile)@\(String(format: "%.2f", $0.startTime))" }
        #expect(frames.contains { $0.profile == Profile.standard.name && $0.startTime < switched }, "before: \(described), switched at \(switched)")
        // After the switch (the radio reads the profile every 0.2 s and restarts its token's broadcaster): robust only.
        #expect(frames.contains { $0.profile == Profile.robust.name && $0.startTime > switched }, "after: \(described)")
        #expect(frames.filter { $0.startTime > switched + 1 }.allSatisfy { $0.profile == Profile.robust.name }, "after: \(described)")
    }

    @Test func heardAudioBytesAreFoundAndAMissingOwnTokenIsReported() async throws {
        // Another device's audio-bytes frames, as the capture device hears them.
        let frame = try Modulator().modulate(Payload.audioBytes(Array("hi".utf8)).frameBytes)
        try Self.writeCapture(Array([[Float]](repeating: frame + [Float](repeating: 0, count: 24_000), count: 400).joined()))
        let manager = MessageManager(appID: "app")
        let subscription = try await manager.subscribe(filter: MessageFilter([.audioBytes(2)]), now: 0)
        let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: "sotto_radio_capture"),
                               playback: PCMConfiguration(device: "sotto_radio_playback"), interval: 0.6, jitter: 0)
        let misses = Counter()
        radio.onOwnTokenNotHeard = { _ in misses.increment() }
        try radio.start()
        var found: Message?
        for await event in subscription.events {
            if case .found(let message) = event { found = message; break }
        }
        #expect(found == (try AudioBytes.message(Array("hi".utf8))))
        #expect(await subscription.status() == .active)
        // Our own token is broadcast but never captured (the capture holds only the other device): reported.
        // Two misses in a row are reported; on the sender's rules, with the other device heard, frames are 1.7 s apart.
        for _ in 0..<150 where misses.value == 0 { try await Task.sleep(for: .milliseconds(100)) }
        #expect(misses.value > 0)
        await radio.stop()
    }

    /// Listen before talk on real PCMs (the paced test plugin both ways): while another device's frames fill the
    /// band, nothing is played; once it is quiet, the own frame goes out. On a loaded machine the capture thread
    /// lags the air, and the radio waits until it knows the band again (`CarrierSense`).
    @Test func nothingIsPlayedWhileTheBandIsBusy() async throws {
        let rate = 48_000.0
        var rng = SystemRandomNumberGenerator()
        func quiet(_ seconds: Double) -> [Float] { (0..<Int(seconds * rate)).map { _ in Float.random(in: -0.001...0.001, using: &rng) } }
        let other = try Modulator().modulate(Payload.audioBytes(Array("xx".utf8)).frameBytes)
        // 0.6 s quiet, 3 s of the other device's frames 10 ms apart, then quiet.
        var busy: [Float] = []
        while Double(busy.count) < 3 * rate { busy += other + [Float](repeating: 0, count: 480) }
        let capture = quiet(0.6) + busy + quiet(6)
        try Self.writeCapture(capture, name: "lbt-in.raw")
        let out = Self.directory.appendingPathComponent("lbt-out.raw")
        try? FileManager.default.removeItem(at: out)
        let manager = MessageManager(appID: "app")
        let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: "sotto_radio_lbt_capture"),
                               playback: PCMConfiguration(device: "sotto_radio_lbt_playback"))
        let errors = Counter()
        radio.onDeviceError = { error in errors.increment(); print("device error: \(error)") }
        let started = Date()
        try radio.start()
        // A subscription alone: the session broadcasts its token, and nothing else (two payloads would open two
        // playback streams, which the file cannot mix).
        let subscription = try await manager.subscribe(now: 0)
        while Date().timeIntervalSince(started) < 6.5 { try await Task.sleep(for: .milliseconds(100)) }
        let token = try #require(await manager.token)
        let stoppedAt = Date().timeIntervalSince(started)
        await subscription.cancel()
        await radio.stop()
        #expect(errors.value == 0)
        let played = try Self.played(out)
        let own = Payload.token(token).frameBytes
        let frames = try StreamingDecoder.decode(played, sampleRate: rate).filter { $0.token == own }
        // Both PCMs are paced from their opening: playback opens after capture (the radio's 0.2 s ticker, more on a
        // loaded machine), by about the time run less the audio played. The band is busy at 0.6-3.6 s of capture:
        // in playback time that window shifted by the opening delay, less the sensing lag and a device buffer.
        let delay = max(0, stoppedAt - Double(played.count) / rate)
        let busyWindow = (0.6 - delay + 0.15)...(3.6 - delay - 0.15)
        #expect(!frames.isEmpty)
        #expect(frames.allSatisfy { !busyWindow.contains($0.startTime) }, "frames started at \(frames.map(\.startTime)), busy \(busyWindow)")
        #expect(frames.contains { $0.startTime > busyWindow.upperBound })
    }

    /// The matcher's turns reach the sound card: a radio whose session takes turns (it says so itself, with its
    /// frame's airtime) plays on its own rules until the matcher puts it in a room where everyone heard
    /// everyone; then it stays quiet, as the matcher's schedule says, while the hearings keep coming; and
    /// plays again in the slot it is given once they stop.
    @Test func theRadioFollowsTheMatchersTurns() async throws {
        let rate = 48_000.0
        let (matcher, out) = try Self.turnsRig("turns", seconds: 19, rules: .init())
        let rig = try await RadioPair(matcher, devices: "turns")
        let (manager, other) = (rig.manager, rig.other)
        func elapsed() -> Double { rig.elapsed() }
        let otherTokenBytes = try #require(await rig.token(of: other))
        // Own rules first: 2.5 s without hearings.
        while elapsed() < 2.5 { try await Task.sleep(for: .milliseconds(50)) }
        let token = try #require(await manager.token)
        // Then the two hear each other every half second until 8 s: one room, everyone heard, quiet.
        let quietFrom = elapsed()
        while elapsed() < 8 {
            await other.heard(frame: Payload.token(token).frameBytes, snr: 20, level: -30, now: 0)
            await manager.heard(frame: Payload.token(otherTokenBytes).frameBytes, snr: 20, level: -30, now: 0)
            try await Task.sleep(for: .milliseconds(500))
        }
        let quietUntil = elapsed()
        // Then nothing is heard: within the refresh (5 s after the last report, which the manager sends at most
        // every 2 s) the matcher gives the radio a slot again.
        while elapsed() < 17.5 { try await Task.sleep(for: .milliseconds(50)) }
        let (played, delay) = try await rig.stop(playedTo: out, sampleRate: rate)
        let own = Payload.token(token).frameBytes
        let starts = try StreamingDecoder.decode(played, sampleRate: rate).filter { $0.token == own }.map(\.startTime)
        // Quiet: from 2 s after the first mutual hearings (a frame on the air finishes; the schedule needs a tick,
        // more on a loaded machine) until the hearings stop, nothing starts (on its own rules: about 4 frames).
        let quiet = (quietFrom + 2 - delay)...(quietUntil - delay)
        #expect(starts.contains { $0 < quiet.lowerBound }, "own rules before: \(starts)")
        #expect(!starts.contains { quiet.contains($0) }, "frames at \(starts) in the quiet \(quiet)")
        #expect(starts.contains { $0 > quiet.upperBound }, "a slot after: \(starts)")
    }

    /// In a crowded room the matcher hands the radio a room alias, and the radio plays the alias's frame (the modem's
    /// alias frame) in the slots that name it (and its token in the round's full-token slots), on the sound card.
    @Test func theRadioPlaysItsRoomAliasInTheSlotsThatNameIt() async throws {
        let rate = 48_000.0
        let (matcher, out) = try Self.turnsRig("alias", seconds: 28, rules: .init(aliasRoomSize: 2))
        let manager = MessageManager(link: await matcher.link(appID: "app"), appID: "app")
        let others = [MessageManager(link: await matcher.link(appID: "app"), appID: "app"),
                      MessageManager(link: await matcher.link(appID: "app"), appID: "app")]
        let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: "sotto_radio_alias_capture"),
                               playback: PCMConfiguration(device: "sotto_radio_alias_playback"))
        let started = Date()
        func elapsed() -> Double { Date().timeIntervalSince(started) }
        try radio.start()
        let subscription = try await manager.subscribe(now: 0)
        var tokens: [[UInt8]] = []
        var otherSubscriptions: [SubscriptionHandle] = []
        for other in others {
            otherSubscriptions.append(try await other.subscribe(now: 0))
            await other.takeTurns(frameAirtime: 0.5, aliasAirtime: 0.3)
            while await other.token == nil, elapsed() < 10 { try await Task.sleep(for: .milliseconds(20)) }
            tokens.append(try #require(await other.token))
        }
        var token = await manager.token
        while token == nil, elapsed() < 10 {
            try await Task.sleep(for: .milliseconds(20))
            token = await manager.token
        }
        let own = Payload.token(try #require(token)).frameBytes
        // The first other hears the radio, the second hears the first: one room of three, where the second never
        // heard the radio, so that every round gives the radio a slot; the full token goes round (every 3 s, to the
        // member whose token was on the air least lately: under load the radio's turn came after 12 s once, in the
        // clean-clone run of 2026-11-28). Until what the radio played holds its alias and its token, 25 s at most.
        var lastLook = 0.0
        while elapsed() < 25 {
            await others[0].heard(frame: own, snr: 20, level: -30, now: 0)
            await others[1].heard(frame: Payload.token(tokens[0]).frameBytes, snr: 20, level: -30, now: 0)
            try await Task.sleep(for: .milliseconds(500))
            if elapsed() - lastLook >= 2, let played = try? Self.played(out) {
                lastLook = elapsed()
                let heard = (try? StreamingDecoder.decode(played, sampleRate: rate, aliasFrames: true)) ?? []
                if heard.contains(where: { $0.alias != nil }) && heard.contains(where: { $0.token == own }) { break }
            }
        }
        await subscription.cancel()
        for handle in otherSubscriptions { await handle.cancel() }
        await radio.stop()
        for other in others { await other.close(now: 0) }
        let played = try Self.played(out)
        // The alias is played as the short alias frame.
        let frames = try StreamingDecoder.decode(played, sampleRate: rate, aliasFrames: true)
        let aliases = frames.compactMap(\.alias)
        #expect(!aliases.isEmpty, "no room alias among \(frames.map { ($0.startTime, $0.token) })")
        #expect(Set(aliases).count == 1, "one alias while the room stands: \(aliases)")
        #expect(frames.allSatisfy { $0.token == own || $0.alias != nil })
        #expect(frames.contains { $0.token == own }, "its token too (on its own rules first, and in full-token slots)")
    }

    @Test func missingDevicesAreReportedWithTheirKind() async throws {
        _ = Self.directory
        let manager = MessageManager(appID: "app")
        let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: "no_such_capture"), playback: nil)
        let reported = Counter()
        radio.onDeviceError = { error in if error == .noDevice("no_such_capture") { reported.increment() } }
        let subscription = try await manager.subscribe(now: 0)
        #expect(throws: AudioDeviceError.noDevice("no_such_capture")) { try radio.start() }
        #expect(reported.value == 1)
        for _ in 0..<20 where await subscription.status() != .failed { try await Task.sleep(for: .milliseconds(10)) }
        #expect(await subscription.status() == .failed)
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

/// Two sessions of one matcher, both subscribed, the first on a radio over the test devices
/// `sotto_radio_NAME_capture` and `sotto_radio_NAME_playback` (started); `elapsed()` counts seconds from its start.
private struct RadioPair {
    let manager: MessageManager
    let other: MessageManager
    let radio: AudioRadio
    let subscription: SubscriptionHandle
    let otherSubscription: SubscriptionHandle
    let started = Date()

    init(_ matcher: LocalMatcher, devices name: String) async throws {
        manager = MessageManager(link: await matcher.link(appID: "app"), appID: "app")
        other = MessageManager(link: await matcher.link(appID: "app"), appID: "app")
        radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: "sotto_radio_\(name)_capture"),
                           playback: PCMConfiguration(device: "sotto_radio_\(name)_playback"))
        try radio.start()
        subscription = try await manager.subscribe(now: 0)
        otherSubscription = try await other.subscribe(now: 0)
    }

    func elapsed() -> Double { Date().timeIntervalSince(started) }

    /// Stops both sessions and the radio; what the radio played into `out`, and how far playback lagged the start
    /// (s: playback is paced from its opening, which lags the start by about the time run less the audio played).
    func stop(playedTo out: URL, sampleRate rate: Double) async throws -> (played: [Float], delay: Double) {
        let stoppedAt = elapsed()
        await subscription.cancel()
        await otherSubscription.cancel()
        await radio.stop()
        await other.close(now: 0)
        let played = try AudioRadioTests.played(out)
        return (played, max(0, stoppedAt - Double(played.count) / rate))
    }

    /// The session's token once the matcher has given it one, waiting until 10 s after the start at most.
    func token(of session: MessageManager) async throws -> [UInt8]? {
        var token = await session.token
        while token == nil, elapsed() < 10 {
            try await Task.sleep(for: .milliseconds(20))
            token = await session.token
        }
        return token
    }
}
