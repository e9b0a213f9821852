import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoExchangeRadio
import SottoModem
import SottoSupport
import Synchronization

/// What `sotto subscribe` and `sotto publish` do with a `MessageManager` (embedded, or linked to a
/// matcher service): run a subscription or a publication on the sound card or over a recording until its
/// time to live ends, the caller sets a stop flag, or there is nothing left to hear. Events and device
/// problems go to callbacks; nothing is printed.
public enum ExchangeSession {
    /// Where a subscription hears from.
    public enum Source: Sendable {
        /// Live: listen on `capture`; play the session's token on `playback` (nil: listen only).
        case devices(capture: PCMConfiguration, playback: PCMConfiguration?)
        /// A recording (`-`: standard input; `raw` for headerless PCM), every frame reported as heard now.
        case recording(path: String, raw: RawPCMFormat?)
    }

    /// Subscribes with `filter`, `strategy` and `lostTimeout` (s) and runs until the TTL expires, `stop` is
    /// set or `ttl` seconds pass; with a recording, until everything found is lost again (more than
    /// `lostTimeout` + 2 s after the recording was fed) or `ttl`. `onEvent` gets every event with the
    /// seconds since the start. The manager is closed at the end. A strategy that prefers low power
    /// (`Strategy.lowPower`) listens on the devices duty-cycled on `lowPowerScan`, its lost timeout raised to
    /// ``lowPowerLostTimeout(_:scan:)`` (so that a find does not flap between windows); `onRadio`
    /// gets the radio once it runs (for measurements). The session's time (its TTL, the events' seconds, the
    /// manager's `now`) is `clock`'s, monotonic.
    public static func subscribe(manager: MessageManager, filter: MessageFilter, strategy: Strategy, lostTimeout: Double,
                                 ttl: Double?, source: Source, stop: StopFlag,
                                 lowPowerScan: ScanDutyCycle = .lowPower,
                                 onEvent: @escaping @Sendable (SubscriptionEvent, Double) -> Void,
                                 onDeviceError: @escaping @Sendable (AudioDeviceError) -> Void = { _ in },
                                 onRadio: (AudioRadio) -> Void = { _ in },
                                 onProgress: (RecordingDecoder.Progress) -> Void = { _ in },
                                 clock: any Clock<Duration> = ContinuousClock()) async throws {
        let time = Stopwatch(clock)
        let lostTimeout = strategy.lowPower ? lowPowerLostTimeout(lostTimeout, scan: lowPowerScan) : lostTimeout
        let visible = Mutex(0)
        let ended = StopFlag()
        let subscription = try await manager.subscribe(filter: filter, strategy: strategy, lostTimeout: lostTimeout, now: 0) { event in
            onEvent(event, time.elapsed())
            switch event {
            case .found: visible.withLock { $0 += 1 }
            case .lost: visible.withLock { $0 -= 1 }
            case .expired: ended.set()
            case .signalChanged: break
            }
        }
        switch source {
        case .recording(let path, let raw):
            var frames: [DecodedFrame] = []
            try RecordingDecoder.decode(path: path, raw: raw, profiles: Profile.all, channel: .mix, onProgress: onProgress) { frames.append($0) }
            // Heard now, on the same clock as the ticks below (an embedded manager's lost timeout runs from here).
            let heardAt = time.elapsed()
            for frame in frames { await manager.heard(frame: frame.token, alias: frame.alias, snr: frame.snr, level: frame.level, now: heardAt) }
            let fed = time.elapsed()
            while !ended.isSet && !stop.isSet {
                // An embedded manager keeps time only through ticks (a linked one is told by its matcher); the
                // tick comes first so that an expiry due by the deadline is reported before the loop ends.
                let now = time.elapsed()
                await manager.tick(now: now)
                if time.elapsed() - fed > lostTimeout + quietMargin && visible.withLock({ $0 }) == 0 { break }
                if let ttl, now >= ttl { break }
                try? await time.sleep(pollInterval.inSeconds)
            }
            await subscription.cancel()
            await manager.close(now: time.elapsed())
        case .devices(let capture, let playback):
            let radio = AudioRadio(manager: manager, capture: capture, playback: playback,
                                   clockOrigin: Date(timeIntervalSinceNow: -time.elapsed()), clock: clock)
            radio.onDeviceError = onDeviceError
            if strategy.lowPower { radio.scanning = lowPowerScan }
            try radio.start()
            onRadio(radio)
            await wait(until: ttl, on: time, unless: [stop, ended])
            // The radio ticks the manager every 200 ms: at the deadline the TTL has run out but its expiry may
            // not have been seen yet (it was lost to this race under load). One tick now delivers it.
            await manager.tick(now: time.elapsed())
            await subscription.cancel()
            await radio.stop()
        }
    }

    /// Publishes `message` with `strategy` and keeps it published for `ttl` seconds or until `stop` is set,
    /// then unpublishes. With `devices`, listens on the capture device and plays the session's token (in a
    /// broadcasting mode) on the playback device every `interval` s plus 0...`jitter` s; without (`nil`), the
    /// publication only stays alive (the caller plays or writes the token itself). The TTL runs on `clock`,
    /// monotonic.
    public static func publish(manager: MessageManager, message: Message, strategy: Strategy, ttl: Double,
                               devices: (capture: PCMConfiguration, playback: PCMConfiguration?)?, interval: Double, jitter: Double,
                               stop: StopFlag,
                               onPublished: @Sendable () async throws -> Void = {},
                               onDeviceError: @escaping @Sendable (AudioDeviceError) -> Void = { _ in },
                               onOwnTokenNotHeard: @escaping @Sendable (Int) -> Void = { _ in },
                               clock: any Clock<Duration> = ContinuousClock()) async throws {
        let time = Stopwatch(clock)
        let handle = try await manager.publish(message, strategy: strategy, now: 0)
        var radio: AudioRadio?
        if let devices {
            let newRadio = AudioRadio(manager: manager, capture: devices.capture, playback: devices.playback, interval: interval,
                                      jitter: jitter, clockOrigin: Date(timeIntervalSinceNow: -time.elapsed()), clock: clock)
            newRadio.onDeviceError = onDeviceError
            newRadio.onOwnTokenNotHeard = onOwnTokenNotHeard
            do { try newRadio.start() } catch { await handle.cancel(); await manager.close(now: 0); throw error }
            radio = newRadio
        }
        do { try await onPublished() } catch {
            await handle.cancel()
            if let radio { await radio.stop() } else { await manager.close(now: time.elapsed()) }
            throw error
        }
        await wait(until: ttl, on: time, unless: [stop])
        await handle.cancel()
        if let radio { await radio.stop() } else { await manager.close(now: time.elapsed()) }
    }

    /// The lost timeout (s) of a low-power subscription: at least its scan's period and window and a second
    /// (`ScanDutyCycle.shortestLostTimeout`), at most the matcher's longest.
    public static func lowPowerLostTimeout(_ lostTimeout: Double, scan: ScanDutyCycle) -> Double {
        min(ExchangeLimits.lostTimeoutRange.upperBound, max(lostTimeout, scan.shortestLostTimeout))
    }

    /// Waits (at most `timeout` s) for the matcher to give the session its token.
    public static func token(of manager: MessageManager, timeout: Double = 5) async -> [UInt8]? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if let token = await manager.token { return token }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    /// Sleeps until `deadline` (nil: no deadline) or until one of `flags` is set, checking every
    /// ``pollInterval``.
    public static func wait(until deadline: Date?, unless flags: [StopFlag]) async {
        await wait(until: deadline?.timeIntervalSinceNow, on: Stopwatch(ContinuousClock()), unless: flags)
    }

    /// Sleeps until `time` reaches `deadline` (s; nil: no deadline) or until one of `flags` is set, checking
    /// every ``pollInterval`` on `time`'s clock.
    static func wait(until deadline: Double?, on time: Stopwatch, unless flags: [StopFlag]) async {
        while !flags.contains(where: \.isSet) {
            if let deadline, time.elapsed() >= deadline { return }
            try? await time.sleep(pollInterval.inSeconds)
        }
    }

    /// How often a waiting session checks its stop flags and deadline.
    public static let pollInterval = Duration.milliseconds(50)
    /// After a recording was fed, how long past the lost timeout to wait for the last `lost` (s).
    static let quietMargin = 2.0
}
