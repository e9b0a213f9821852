import ArgumentParser
import Foundation
import SottoAudio
import SottoChannel
import SottoExchange
import SottoLive
import SottoModem
import SottoTools

/// Where a transmitter's frames go.
struct TransmitTarget: ParsableArguments {
    @Option(help: "ALSA playback PCM to play on.") var device: String = "default"
    @Option(help: "Write exactly what would be played over the TTL to this file instead.") var out: String?
    @Option(parsing: .unconditional, help: "Seconds from one frame to the next.") var interval: Double = 1
    @Option(parsing: .unconditional, help: "Random extra delay per frame (s, uniform 0...jitter), so that devices do not collide every time.") var jitter: Double = 0.25
    @Option(parsing: .unconditional, help: "Seed of the jitter in --out files (reproducible).") var seed: UInt64 = 1
    @Option(help: "Profile.") var profile: Profile = .standard

    func validate() throws {
        try NumericOption("--interval", 0.1...3600, unit: "s").check(interval)
        try NumericOption("--jitter", 0...interval, unit: "s (at most --interval)").check(jitter)
        if let out { do { _ = try AudioFileFormat(path: out) } catch { throw ValidationError(error.description) } }
    }

    /// Start times (s) of the frames sent over `duration` seconds, in order and one at a time (a day at
    /// 0.1 s is 864 000 of them): k x interval + uniform jitter, seeded.
    func schedule(duration: Double, airtime: Double) -> some Sequence<Double> {
        var random = SeededRandom(seed: seed)
        var k = 0.0
        return AnyIterator { [interval, jitter] in
            let t = k * interval + random.uniform() * jitter
            k += 1
            return t + airtime > duration ? nil : t
        }.lazy
    }

    /// Sends `frame` for `duration` seconds: into a file (exactly what would be played) or to the device.
    func send(frame: [UInt8], duration: Double, what: String) throws {
        try send(frameAt: { _ in frame }, changesEvery: nil, duration: duration, what: what)
    }

    /// Sends the frame `frameAt(t)` of each moment (it may change every `changesEvery` seconds, as a
    /// rotating beacon's ID does) for `duration` seconds, into a file or to the device.
    func send(frameAt: (Double) -> [UInt8], changesEvery period: Double?, duration: Double, what: String) throws {
        if let out {
            let rate = 48_000.0
            let modulator: Modulator
            do { modulator = try Modulator(profile: profile, sampleRate: rate) } catch { throw CommandError(error.description) }
            let airtime: Double
            do { airtime = Double(try modulator.modulate(frameAt(0)).count) / rate } catch { throw CommandError(error.description) }
            let frameCount: Int
            do {
                frameCount = try FrameScheduleWriter.write(to: out, format: AudioFileFormat(path: out), sampleRate: rate, modulator: modulator,
                                                           times: schedule(duration: duration, airtime: airtime), duration: duration, frameAt: frameAt)
            } catch { throw CommandError("\(error)") }
            printError("wrote \(frameCount) frames of \(what) over \(fixed(duration, 1)) s to \(out == "-" ? "standard output" : out)")
            return
        }
        // On a device: one broadcaster per period of an unchanging frame.
        let stop = StopFlag()
        let current = CurrentBroadcaster()
        let interrupt = Interruption.onControlC { stop.set(); current.value?.stop() }
        defer { interrupt.cancel() }
        let started = Date()
        var sent = 0, underruns = 0
        while !stop.isSet {
            let elapsed = Date().timeIntervalSince(started)
            let remaining = duration - elapsed
            guard remaining > 0 else { break }
            let span = min(remaining, period.map { $0 - elapsed.truncatingRemainder(dividingBy: $0) } ?? remaining)
            let broadcaster: Broadcaster
            do { broadcaster = try Broadcaster(configuration: PCMConfiguration(device: device), token: frameAt(elapsed), profile: profile) }
            catch { throw CommandError("\(error)") }
            if sent == 0 { printError("broadcasting \(what) on \(device) (\(broadcaster.negotiated))") }
            current.value = broadcaster
            let failure = ErrorBox()
            broadcaster.start(interval: interval, jitter: jitter, count: max(1, Int(span / interval)), generator: SystemRandomNumberGenerator(),
                              onStatus: { [device] status in
                                  switch status {
                                  case .deviceError(let error, let retry): printError("device error: \(error)\(retry ? " (retrying)" : "")")
                                  case .reopened(let negotiated): printError("device \(device) is back: \(negotiated)")
                                  }
                              }, onEnd: { failure.error = $0 })
            broadcaster.wait()
            if let error = failure.error { throw CommandError("\(error)") }
            sent += broadcaster.sent
            underruns += broadcaster.underruns
        }
        printError("sent \(sent) frames, \(underruns) underruns")
    }
}

/// The broadcaster playing now (for Ctrl-C).
final class CurrentBroadcaster: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Broadcaster?
    var value: Broadcaster? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// `sotto publish`: publish a message, through a matcher service (`--server`) or as audio bytes.
struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish a message to nearby subscribers.",
        discussion: """
        With --server, the message (up to 102400 bytes, with a namespace and type) is registered with a matcher \
        service and this session's token is played; subscribers that hear it (or that this session hears) find \
        the message. Without a matcher, messages of up to 10 bytes travel directly in the audio frame \
        (audio-bytes mode) and arrive in the reserved namespace and type.
        """)

    @Option(help: "Namespace (needs --server).") var namespace: String?
    @Option(help: "Type (needs --server).") var type: String?
    @Option(help: "Content as text; - reads standard input.") var text: String?
    @Option(help: "Content as hex; - reads standard input.") var hex: String?
    @Option(help: "Content from a file (needs --server); - reads standard input.") var file: String?
    @Option(parsing: .unconditional, help: "Seconds to publish (1-86400).") var ttl: Int = ExchangeLimits.defaultTTL
    @Option(help: "Discovery mode: broadcast, scan or both (broadcast and both play this session's token).") var mode: String = "both"
    @OptionGroup var server: ServerOptions
    @OptionGroup var target: TransmitTarget
    @OptionGroup var devices: RadioDevices

    func validate() throws {
        guard DiscoveryModeArgument.parse(mode) != nil else { throw ValidationError("--mode must be broadcast, scan or both") }
        try NumericOption.ttl.check(ttl)
        if [text, hex, file].filter({ $0 == "-" }).count > 1 { throw ValidationError("only one of --text, --hex and --file can be read from standard input") }
        if file != nil && (text != nil || hex != nil) { throw ValidationError("give the content with one of --text, --hex or --file") }
        if !server.given && (namespace != nil || type != nil || file != nil) {
            throw ValidationError("namespaces, types and files need a matcher (--server); without one, publish audio bytes")
        }
        if server.given && target.out == "-" { throw ValidationError("--out -: with --server the publication stays alive for its TTL; write to a file") }
    }

    func run() async throws {
        let discovery = DiscoveryModeArgument.parse(mode)!
        let text = try StandardInput.resolve(self.text, asHex: false), hex = try StandardInput.resolve(self.hex, asHex: true)
        if server.given {
            let content: [UInt8]
            if let file {
                if file == "-" {
                    content = Array(FileHandle.standardInput.readDataToEndOfFile())
                } else {
                    guard let data = FileManager.default.contents(atPath: file) else { throw CommandError("cannot read \(file)") }
                    content = Array(data)
                }
            } else {
                content = try TokenInput.bytes(hex: hex, text: text)
            }
            do {
                let strategy = try Strategy(discoveryMode: discovery, ttl: .seconds(ttl))
                let message = try Message(namespace: namespace ?? "", type: type ?? "", content: content)
                try await RemoteExchange.publish(message: message, strategy: strategy, ttl: ttl, server: server, target: target, devices: devices)
            } catch let error as ExchangeError {
                throw CommandError(error.description)
            }
            return
        }
        let content = try TokenInput.bytes(hex: hex, text: text)
        do {
            _ = try Strategy(ttl: .seconds(ttl))
            let message = try AudioBytes.message(content)
            if discovery == .scan { printError("scan mode does not play anything: nothing to do"); return }
            try target.send(frame: Payload.audioBytes(message.content).frameBytes, duration: Double(ttl), what: "\(message)")
        } catch let error as ExchangeError {
            throw CommandError(error.description)
        }
    }
}

/// `--mode broadcast|scan|both`.
enum DiscoveryModeArgument {
    static func parse(_ text: String) -> Strategy.DiscoveryMode? {
        switch text {
        case "broadcast": return .broadcast
        case "scan": return .scan
        case "both": return .both
        default: return nil
        }
    }
}

/// `sotto beacon`: loop a beacon ID.
struct Beacon: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Loop a beacon ID (hex, 1-15 bytes) like an audio beacon.")
    @Argument(help: "Beacon ID as hex (the stable ID the matcher registers; 1-15 bytes).") var id: String
    @Option(parsing: .unconditional, help: "Seconds to run.") var duration: Double = 60
    @Option(parsing: .unconditional, help: "Rotate the broadcast ID every this many seconds (EID-like), derived from --rotation-key.") var rotateEvery: Double?
    @Option(parsing: .unconditional, help: "Secret key of the rotation (shared with the matcher).") var rotationKey: UInt64 = 0
    @OptionGroup var target: TransmitTarget

    func validate() throws {
        let bytes = try TokenInput.bytes(hex: id, text: nil)
        guard (1...15).contains(bytes.count) else { throw ValidationError(ExchangeError.invalidBeaconID(bytes.count).description) }
        try NumericOption("--duration", above: 0, upTo: 86_400, unit: "s").check(duration)
        try NumericOption("--rotate-every", 1...86_400, unit: "s").check(rotateEvery)
    }

    func run() throws {
        let bytes = try TokenInput.bytes(hex: id, text: nil)
        if let rotateEvery {
            let rotation = BeaconRotation(key: rotationKey, period: rotateEvery)
            try target.send(frameAt: { Payload.beacon(rotation.id(atTime: $0, length: bytes.count)).frameBytes },
                            changesEvery: rotateEvery, duration: duration, what: "rotating beacon \(bytes.hex)")
        } else {
            try target.send(frame: Payload.beacon(bytes).frameBytes, duration: duration, what: "beacon \(bytes.hex)")
        }
    }
}

/// `sotto subscribe`: print found / lost / expired events as they happen.
struct Subscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Subscribe to nearby messages and print found, lost and expired events.",
        discussion: """
        With --server, tokens heard are resolved by a matcher service into their publishers' messages, and this \
        session plays its own token so that publishers that only listen find it too. With --input and --server, \
        the recording is reported as heard now and the command ends once everything found is lost (or at --ttl). \
        Without a matcher, audio bytes are received, and --input replays a recording on its sample clock: the \
        timeline of events it would have produced live.
        """)

    @Option(help: "Namespace (needs --server; with --type).") var namespace: String?
    @Option(help: "Type (needs --server; with --namespace).") var type: String?
    @Flag(help: "Also receive beacon IDs and beacon attachments (needs --server).") var beacons = false
    @Option(parsing: .unconditional, help: "Seconds to subscribe (1-86400); default: until the input ends or Ctrl-C.") var ttl: Int?
    @Option(parsing: .unconditional, help: "Seconds without a sighting before lost.") var lostTimeout: Double = 10
    @Option(help: "Discovery mode: broadcast, scan or both (scan and both report what is heard).") var mode: String = "both"
    @OptionGroup var format: FormatOption
    @Option(help: "ALSA PCM to listen on (and play this session's token on, with --server).") var device: String = "default"
    @Option(help: "Read this recording instead of a device; - reads standard input.") var input: String?
    @OptionGroup(title: "Raw input") var raw: RawInputOptions
    @OptionGroup var server: ServerOptions
    @OptionGroup var devices: RadioDevices

    func validate() throws {
        try format.refuseHex("subscribe")
        try NumericOption.ttl.check(ttl)
        try NumericOption("--lost-timeout", 1...600, unit: "s").check(lostTimeout)
        guard DiscoveryModeArgument.parse(mode) != nil else { throw ValidationError("--mode must be broadcast, scan or both") }
        if raw.rate != nil && input == nil { throw ValidationError("--rate, --encoding and --channels describe a raw --input") }
        if server.given {
            guard ExchangeLimits.lostTimeoutRange.contains(lostTimeout) else {
                throw ValidationError(ExchangeError.invalidLostTimeout(lostTimeout).description)
            }
            if (namespace == nil) != (type == nil) {
                throw ValidationError("--namespace and --type go together (without them: every message of the project's own namespace)")
            }
        } else if namespace != nil || type != nil || beacons {
            throw ValidationError("namespaces, types and beacons need a matcher (--server); without one, subscribe receives audio bytes")
        }
    }

    func run() async throws {
        let discovery = DiscoveryModeArgument.parse(mode)!
        let strategy: Strategy
        do { strategy = try Strategy(discoveryMode: discovery, ttl: ttl.map { .seconds($0) } ?? .infinite) } catch { throw CommandError(error.description) }
        let printer = EventPrinter(json: format.format == .json)
        if server.given {
            var includes: [MessageFilter.Include] = []
            switch (namespace, type) {
            case (nil, nil): includes = [.allMyTypes]
            case (.some(let namespace), .some(let type)): includes = [.namespacedType(namespace: namespace, type: type)]
            default: throw ValidationError("--namespace and --type go together (without them: every message of the project's own namespace)")
            }
            if beacons { includes.append(.beaconIDs) }
            let filter: MessageFilter
            do { filter = try MessageFilter(includes) } catch { throw CommandError(error.description) }
            try await RemoteExchange.subscribe(filter: filter, strategy: strategy, ttl: ttl, lostTimeout: lostTimeout, server: server,
                                               device: device, devices: devices, input: input, raw: raw.format, printer: printer)
            return
        }
        let filter = try! MessageFilter((1...ExchangeLimits.maxAudioBytes).map { .audioBytes($0) })
        if let input {
            try await runOffline(input, filter: filter, strategy: strategy, printer: printer)
        } else {
            try await runLive(filter: filter, strategy: strategy, printer: printer)
        }
    }

    /// Decodes the recording and replays its frames into the exchange on the sample clock.
    func runOffline(_ path: String, filter: MessageFilter, strategy: Strategy, printer: EventPrinter) async throws {
        var frames: [DecodedFrame] = []
        // The length is what was read, never the header's announcement (unknown in a streamed FLAC).
        let duration: Double
        var readFailure: RecordingDecoder.ReadFailure?
        do {
            duration = try RecordingDecoder.decode(path: path, raw: raw.format, profiles: Profile.all, channel: .mix,
                                                   onProgress: ProgressLine.shared.decoding(path == "-" ? "standard input" : path)) { frames.append($0) }.seconds
            ProgressLine.shared.clear()
        } catch let failure as RecordingDecoder.ReadFailure {
            (duration, readFailure) = (failure.secondsRead, failure)
        } catch { throw CommandError("\(path): \(error)") }
        let timeline: [(Double, SubscriptionEvent)]
        do {
            timeline = try await OfflineTimeline.run(frames: frames.sorted { $0.endTime < $1.endTime }.map { ($0.endTime, $0.token, $0.snr, $0.level) },
                                                     duration: duration, filter: filter, strategy: strategy, lostTimeout: lostTimeout)
        } catch { throw CommandError("\(error)") }
        for (time, event) in timeline { printer.print(event, at: time) }
        if let readFailure { throw CommandError("\(path): \(readFailure)") }
    }

    func runLive(filter: MessageFilter, strategy: Strategy, printer: EventPrinter) async throws {
        let listener: Listener
        do { listener = try Listener(configuration: PCMConfiguration(device: device)) } catch { throw CommandError(error.description) }
        let manager = MessageManager(appID: "sotto-cli", broadcasts: false, now: 0)
        let lostTimeout = self.lostTimeout
        let stopFlag = StopFlag()
        let interrupt = Interruption.onControlC { stopFlag.set(); listener.stop() }
        defer { interrupt.cancel() }
        let start = Date()
        let subscription: SubscriptionHandle
        do {
            subscription = try await manager.subscribe(filter: filter, strategy: strategy, lostTimeout: lostTimeout, now: 0) { event in
                printer.print(event, at: Date().timeIntervalSince(start))
                // The TTL elapsed: nothing more can come.
                if case .expired = event { stopFlag.set(); listener.stop() }
            }
        } catch { throw CommandError("\(error)") }
        let ticker = Task {
            while !Task.isCancelled && !stopFlag.isSet {
                try? await Task.sleep(for: .milliseconds(200))
                await manager.tick(now: Date().timeIntervalSince(start))
            }
        }
        for await event in listener.events {
            if case .frame(let frame) = event {
                await manager.heard(frame: frame.token, snr: frame.snr, level: frame.level, now: Date().timeIntervalSince(start))
            }
            if case .deviceError(let error, let retry) = event { printError("device error: \(error)\(retry ? " (retrying)" : "")") }
        }
        ticker.cancel()
        await manager.close(now: Date().timeIntervalSince(start))
        _ = subscription
    }
}

/// Prints subscription events, one per line, as each happens.
struct EventPrinter: Sendable {
    let json: Bool

    func print(_ event: SubscriptionEvent, at time: Double) {
        let record = EventRecord(event, at: time)
        if json { Output.record(record); return }
        var line = "\(fixed(time, 3)) s  \(record.event)"
        switch event {
        case .found(let m), .lost(let m), .signalChanged(let m, _, _): line += "  \(m)"
        case .expired: break
        }
        if case .signalChanged(_, let snr, let level) = event { line += "  SNR \(fixed(snr, 1)) dB  level \(fixed(level, 1)) dBFS" }
        Output.line(line)
    }
}
