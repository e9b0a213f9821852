import ArgumentParser
import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeClient
import SottoExchangeRadio
import SottoExchangeWire
import SottoLive
import SottoModem
import SottoTools
import Synchronization

/// `--server URL --api-key K`: use a matcher service (`sotto serve`); `--server` again for more nodes of it.
struct ServerOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Matcher service: HOST:PORT, unix:PATH, sotto://HOST:PORT or sottos://HOST:PORT (TLS).",
        discussion: "Repeat for the nodes of one service (sharing a PostgreSQL): they are tried in turn, the next one when one fails."))
    var server: [String] = []
    @Option(help: "API key of a project (default: $SOTTO_API_KEY).") var apiKey: String?
    @Option(help: "CA certificate (PEM) to verify the service with (implies TLS).") var ca: String?
    @Flag(help: "TLS with the system's trust roots.") var tls = false

    /// Whether a service was given.
    var given: Bool { !server.isEmpty }

    /// A link to the service, for a session that broadcasts or not.
    func link(broadcasts: Bool) throws -> RemoteMatcher {
        guard given else { throw ValidationError("--server is needed") }
        guard let key = apiKey ?? ProcessInfo.processInfo.environment["SOTTO_API_KEY"], !key.isEmpty else {
            throw ValidationError("--api-key (or SOTTO_API_KEY) is needed with --server")
        }
        var addresses: [MatcherAddress] = []
        for text in server {
            do { addresses.append(try MatcherAddress(parsing: text)) } catch { throw ValidationError("--server \(text): \(error)") }
        }
        let secure = tls || ca != nil || server.contains { $0.hasPrefix("sottos://") }
        if let ca, !FileManager.default.isReadableFile(atPath: ca) { throw CommandError("cannot read \(ca)") }
        var options = RemoteMatcher.Options(endpoints: addresses, apiKey: key, tls: secure ? .init(trustRoots: ca) : nil,
                                            broadcasts: broadcasts, clientVersion: "sotto-cli")
        options.backoff = 0.2...5
        do { return try RemoteMatcher(options: options) } catch { throw CommandError("--server: \(error)") }
    }
}

/// Capture and playback devices of an exchange session on a sound card.
struct RadioDevices: ParsableArguments {
    @Option(help: "ALSA capture PCM (default: --device).") var captureDevice: String?
    @Option(help: "ALSA playback PCM of the session's own token (default: --device).") var playbackDevice: String?
}

/// SIGINT and SIGTERM, caught once for the process (a long-running command ends cleanly on either).
enum Interruption {
    private static let flag = StopFlag()
    nonisolated(unsafe) private static let sources: [any DispatchSourceSignal] = [SIGINT, SIGTERM].map { number in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { flag.set() }
        source.resume()
        return source
    }
    /// Runs `handler` on SIGINT (Ctrl-C) instead of ending the process, while the returned source is kept.
    /// (SIGTERM still ends a command that runs a device: a test or supervisor can always stop it.)
    static func onControlC(_ handler: @escaping @Sendable () -> Void) -> any DispatchSourceSignal {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler(handler: handler)
        source.resume()
        return source
    }

    /// Starts catching the signals; true once one arrived.
    static var happened: Bool {
        _ = sources
        return flag.isSet
    }
}

/// Waits until `seconds` pass, SIGINT or SIGTERM arrives, or `stop` is set.
func waitForStop(seconds: Double?, stop: StopFlag) async {
    let deadline = seconds.map { Date(timeIntervalSinceNow: $0) }
    while !Interruption.happened && !stop.isSet {
        if let deadline, Date() >= deadline { break }
        try? await Task.sleep(for: .milliseconds(50))
    }
}

/// Exchange sessions through a matcher service, for `publish` and `subscribe` with `--server`.
enum RemoteExchange {
    /// Connects a manager to the service; connection changes go to stderr.
    static func manager(link: RemoteMatcher, lostTimeout: Double = 10) async throws -> MessageManager {
        let manager = MessageManager(link: link, appID: "sotto-cli", lostTimeout: lostTimeout) { notice in
            switch notice {
            case .disconnected(let reason): printError("matcher: disconnected (\(reason)); reconnecting")
            case .connected(let resumed): printError("matcher: connected\(resumed ? " (session resumed)" : "")")
            case .failed(let error): printError("matcher: \(error)")
            default: break
            }
        }
        do { try await manager.connect(timeout: 15) } catch { throw CommandError("matcher: \(error)") }
        return manager
    }

    /// Waits (at most `timeout` s) for the service to give the session its token.
    static func token(of manager: MessageManager, timeout: Double = 5) async -> [UInt8]? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if let token = await manager.token { return token }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    static func publish(message: Message, strategy: Strategy, ttl: Int, server: ServerOptions, target: TransmitTarget,
                        devices: RadioDevices) async throws {
        let broadcasts = strategy.discoveryMode != .scan
        let manager = try await manager(link: server.link(broadcasts: broadcasts))
        let handle: PublicationHandle
        do { handle = try await manager.publish(message, strategy: strategy, now: 0) } catch { throw CommandError("\(error)") }
        printError("published \(message) for \(ttl) s")
        let expired = StopFlag()
        if let out = target.out {
            // What would be played over the TTL, while the publication stays alive for its TTL.
            if broadcasts {
                guard let token = await token(of: manager) else { throw CommandError("the matcher gave this session no token") }
                try target.send(frame: Payload.token(token).frameBytes, duration: Double(ttl), what: "token \(token.hex)")
            } else {
                printError("scan mode plays nothing: \(out) not written")
            }
            await waitForStop(seconds: Double(ttl), stop: expired)
        } else {
            let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: devices.captureDevice ?? target.device),
                                   playback: broadcasts ? PCMConfiguration(device: devices.playbackDevice ?? target.device) : nil,
                                   interval: target.interval, jitter: target.jitter)
            radio.onDeviceError = { printError("device error: \($0)") }
            radio.onOwnTokenNotHeard = { printError("warning: our own token was not heard \($0) times in a row (speaker or microphone off?)") }
            do { try radio.start() } catch { throw CommandError("\(error)") }
            await waitForStop(seconds: Double(ttl), stop: expired)
            await handle.cancel()
            await radio.stop()
            printError("unpublished")
            return
        }
        await handle.cancel()
        await manager.close(now: 0)
        printError("unpublished")
    }

    static func subscribe(filter: MessageFilter, strategy: Strategy, ttl: Int?, lostTimeout: Double, server: ServerOptions,
                          device: String, devices: RadioDevices, input: String?, raw: RawPCMFormat?, printer: EventPrinter) async throws {
        let broadcasts = strategy.discoveryMode != .scan && input == nil
        let manager = try await manager(link: server.link(broadcasts: broadcasts), lostTimeout: lostTimeout)
        let started = Date()
        let stop = StopFlag()
        let visible = Mutex(0)
        let subscription: SubscriptionHandle
        do {
            subscription = try await manager.subscribe(filter: filter, strategy: strategy, lostTimeout: lostTimeout, now: 0) { event in
                printer.print(event, at: Date().timeIntervalSince(started))
                switch event {
                case .found: visible.withLock { $0 += 1 }
                case .lost: visible.withLock { $0 -= 1 }
                case .expired: stop.set()
                case .signalChanged: break
                }
            }
        } catch { throw CommandError("\(error)") }
        if let input {
            // The recording as heard now: every frame reported at once, then events until nothing is left found.
            var frames: [DecodedFrame] = []
            do {
                try RecordingDecoder.decode(path: input, raw: raw, profiles: Profile.all, channel: .mix,
                                            onProgress: ProgressLine.shared.decoding(input == "-" ? "standard input" : input)) { frames.append($0) }
                ProgressLine.shared.clear()
            } catch {
                throw CommandError("\(input): \(error)")
            }
            for frame in frames { await manager.heard(frame: frame.token, snr: frame.snr, level: frame.level, now: 0) }
            let fed = Date()
            let limit = ttl.map { Double($0) }
            while !stop.isSet {
                let quiet = Date().timeIntervalSince(fed) > lostTimeout + 2 && visible.withLock({ $0 }) == 0
                if quiet { break }
                if let limit, Date().timeIntervalSince(started) >= limit { break }
                await waitForStop(seconds: 0.2, stop: stop)
            }
        } else {
            let radio = AudioRadio(manager: manager, capture: PCMConfiguration(device: devices.captureDevice ?? device),
                                   playback: broadcasts ? PCMConfiguration(device: devices.playbackDevice ?? device) : nil)
            radio.onDeviceError = { printError("device error: \($0)") }
            do { try radio.start() } catch { throw CommandError("\(error)") }
            await waitForStop(seconds: ttl.map { Double($0) }, stop: stop)
            await subscription.cancel()
            await radio.stop()
            return
        }
        await subscription.cancel()
        await manager.close(now: 0)
    }
}
