import ArgumentParser
import Foundation
import SottoAudio
import SottoDaemon
import SottoExchange
import SottoExchangeCore
import SottoExchangeRadio
import SottoLive
import SottoModem
import SottoSupport
import SottoTools

/// Where a transmitter's frames go.
struct TransmitTarget: ParsableArguments {
    @Option(help: "ALSA playback PCM to play on.") var device: String = "default"
    @Option(name: [.customShort("o"), .long], help: "Write exactly what would be played over the TTL to this file instead (at most 86400 s, a day, in any format, also to standard output as - and to a named pipe, AIFF only to -; 16-bit WAV and AIFF about 12 h).") var out: String?
    @Option(parsing: .unconditional, help: "Seconds from one frame to the next.") var interval: Double = 1
    @Option(name: .customLong("jitter"), parsing: .unconditional, help: "Random extra delay per frame (s, uniform 0...jitter), so that devices do not collide every time (default: \(fixed(FramePlayer.Schedule.defaultJitter, 2)) s, or --interval when shorter, as in send and daemon).") var jitterOption: Double?
    /// --jitter as given, or the default every transmitting command shares.
    var jitter: Double { jitterOption ?? FramePlayer.Schedule.defaultJitter(interval: interval) }
    @Option(parsing: .unconditional, help: "Seed of the jitter in --out files (default: drawn anew for every file, so that devices writing files do not send at the same instants; give one to reproduce a file).") var seed: UInt64?
    @Option(help: "Profile.") var profile: Profile = .standard

    func validate() throws {
        try NumericOption("--interval", 0.1...3600, unit: "s").check(interval)
        try NumericOption("--jitter", 0...interval, unit: "s (at most --interval)").check(jitterOption)
        if let out { do { _ = try AudioFileFormat(path: out) } catch { throw ValidationError(error.description) } }
    }

    /// Sends `frame` for `duration` seconds: into a file (exactly what would be played) or to the device.
    func send(frame: [UInt8], duration: Double, what: String) throws {
        try send(frameAt: { _ in frame }, changesEvery: nil, clockAtStart: 0, duration: duration, what: what)
    }

    /// Sends the frame `frameAt(t)` of each moment `t` of a clock that reads `clockAtStart` at the start (it
    /// may change every `changesEvery` seconds, as a rotating beacon's ID does) for `duration` seconds, into
    /// a file or to the device.
    func send(frameAt: @escaping @Sendable (Double) -> [UInt8], changesEvery period: Double?, clockAtStart: Double,
              duration: Double, what: String) throws {
        if let out {
            let rate = 48_000.0
            do {
                let modulator = try Modulator(profile: profile, sampleRate: rate)
                let airtime = Double(try modulator.modulate(frameAt(clockAtStart)).count) / rate
                let times = FrameTimes(interval: interval, jitter: jitter, seed: seed ?? UInt64.random(in: .min ... .max),
                                       end: duration, airtime: airtime)
                let count = try FrameScheduleWriter.write(to: out, format: AudioFileFormat(path: out), sampleRate: rate, modulator: modulator,
                                                          times: times, duration: duration, stop: Interruption.stop,
                                                          frameAt: { frameAt(clockAtStart + $0) })
                printError("wrote \(count) frames of \(what) over \(fixed(duration, 1)) s to \(out == "-" ? "standard output" : out)")
            } catch { throw CommandError("\(error)") }
            return
        }
        let device = self.device
        let summary: FramePlayer.Summary
        let warnings = WarningGate { printError($0) }
        defer { warnings.finish() }
        do {
            let player = try FramePlayer(configuration: PCMConfiguration(device: device), profile: profile, frameAt: frameAt,
                                         changesEvery: period, clockAtStart: clockAtStart)
            let interrupt = Interruption.onStop { player.stop() }
            defer { interrupt.cancel() }
            summary = try player.run(.init(interval: interval, jitter: jitter, duration: duration)) { event in
                if case .started(let negotiated) = event { printError("broadcasting \(what) on \(device) (\(negotiated))") }
                DeviceStatusText.print(event, device: device, warnings: warnings)
            }
        } catch { throw CommandError("\(error)") }
        printError("sent \(summary.sent) frames, \(summary.underruns) underruns")
    }
}

/// `sotto publish`: publish a message, through a matcher service (`--server`) or as audio bytes.
struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish",
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
    @Flag(help: "Earshot: only subscribers heard at an in-band SNR of at least the matcher's earshot threshold (\(fixed(MatcherCore.defaultEarshotSNR, 1)) dB by default) find the message (needs --server).") var earshot = false
    @OptionGroup var server: ServerOptions
    @OptionGroup var target: TransmitTarget
    @OptionGroup var devices: RadioDevices
    @OptionGroup(title: "Background") var daemon: DaemonOptions

    func validate() throws {
        guard DiscoveryModeArgument.parse(mode) != nil else { throw ValidationError("--mode must be broadcast, scan or both") }
        if earshot && daemon.daemon { throw ValidationError("--earshot is not carried by the daemon: publish without --daemon") }
        if earshot && !server.given { throw ValidationError("--earshot is the matcher's rule: give --server (audio bytes reach whoever decodes them)") }
        try daemon.check(server: server.given, out: target.out != nil || target.device != "default")
        if daemon.daemon { return }
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
        if daemon.daemon {
            try ConsentCheck.require(mayAsk: true)
            let content = try file.map(Self.read) ?? TokenInput.bytes(hex: hex, text: text)
            try DaemonHandoff.start(OperationSpec(kind: .publish, namespace: namespace, type: type, content: OperationSpec.hex(content), mode: mode,
                                                  ttl: ttl, persistent: daemon.persistent, group: daemon.group), json: false)
            return
        }
        if target.out == nil { try ConsentCheck.require(mayAsk: true) }
        if server.given {
            let content: [UInt8]
            if let file {
                content = try Self.read(file)
            } else {
                content = try TokenInput.bytes(hex: hex, text: text)
            }
            do {
                let strategy = try Strategy(discoveryMode: discovery, distanceType: earshot ? .earshot : .default, ttl: .seconds(ttl))
                let message = try Message(namespace: namespace ?? "", type: type ?? "", content: content)
                try await publishThroughServer(message, strategy: strategy)
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

extension Publish {
    /// The bytes of a --file (- for standard input).
    static func read(_ file: String) throws -> [UInt8] {
        if file == "-" { return Array(FileHandle.standardInput.readDataToEndOfFile()) }
        guard let data = FileManager.default.contents(atPath: file) else { throw CommandError("cannot read \(file)") }
        return Array(data)
    }

    /// Keeps the message published on the matcher for its TTL (or until Ctrl-C), playing the session's token
    /// on the device, or writing what would be played to --out.
    func publishThroughServer(_ message: Message, strategy: Strategy) async throws {
        let broadcasts = strategy.discoveryMode != .scan
        let manager = try await RemoteExchange.manager(server: server, broadcasts: broadcasts)
        let radioDevices = target.out != nil ? nil : (capture: PCMConfiguration(device: devices.captureDevice ?? target.device),
                                                      playback: broadcasts ? PCMConfiguration(device: devices.playbackDevice ?? target.device) : nil)
        let (ttl, target) = (self.ttl, self.target)
        // One warning of a kind every 30 s at most, with the count held back (a device gone would say one a frame).
        let warnings = WarningGate { printError($0) }
        defer { warnings.finish() }
        do {
            try await ExchangeSession.publish(
                manager: manager, message: message, strategy: strategy, ttl: Double(ttl), devices: radioDevices,
                interval: target.interval, jitter: target.jitter, stop: Interruption.stop,
                onPublished: {
                    printError("published \(message) for \(ttl) s")
                    guard let out = target.out else { return }
                    guard broadcasts else { printError("scan mode plays nothing: \(out) not written"); return }
                    guard let token = await ExchangeSession.token(of: manager) else { throw CommandError("the matcher gave this session no token") }
                    try target.send(frame: Payload.token(token).frameBytes, duration: Double(ttl), what: "token \(token.hex)")
                },
                onDeviceError: { warnings.warn("device error: \($0)") },
                onOwnTokenNotHeard: { warnings.warn("warning: our own token was not heard \($0) times in a row (speaker or microphone off?)", kind: "own token not heard") })
        } catch let error as CommandError { throw error } catch let error as ExchangeError { throw error } catch { throw CommandError("\(error)") }
        printError("unpublished")
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
    static let configuration = CommandConfiguration(
        commandName: "beacon", abstract: "Loop a beacon ID (hex, 1-15 bytes) like an audio beacon.",
        discussion: """
        With --key-file (written by `sotto admin beacon register --rotating`), the beacon rotates (EID-like): during \
        each period of Unix time it plays the HMAC-SHA256 of the period's number under the file's secret key, which \
        only the matcher can resolve. The beacon's clock must be within 60 s of the matcher's.
        """)
    @Argument(help: "Beacon ID as hex (1-15 bytes; with --key-file, optional and checked against the file's).") var id: String?
    @Option(parsing: .unconditional, help: "Seconds to run.") var duration: Double = 60
    @Option(help: "Rotating beacon: its key file (mode 600), from `sotto admin beacon register --rotating`.") var keyFile: String?
    @Option(parsing: .unconditional, help: "Rotating beacon: seconds between ID changes (checked against the key file's).") var rotateEvery: Double?
    @Option(parsing: .unconditional, help: "Rotating beacon: its clock at the start, in Unix time (s; default: now), e.g. for a recording played later.") var clock: Double?
    @OptionGroup var target: TransmitTarget
    @Flag(help: "Hand the beacon to the running daemon (sotto daemon) and return its operation id at once.") var daemon = false
    @Flag(help: "With --daemon: keep the beacon across restarts of the daemon.") var persistent = false

    func validate() throws {
        if let id {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            guard (1...15).contains(bytes.count) else { throw ValidationError(ExchangeError.invalidBeaconID(bytes.count).description) }
        } else if keyFile == nil {
            throw ValidationError("give a beacon ID, or --key-file for a rotating beacon")
        }
        try NumericOption("--duration", above: 0, upTo: 86_400, unit: "s").check(duration)
        try NumericOption("--rotate-every", 1...86_400, unit: "s").check(rotateEvery)
        if keyFile == nil && (rotateEvery != nil || clock != nil) {
            throw ValidationError("a rotating beacon needs its key: --key-file (from `sotto admin beacon register --rotating`)")
        }
        if let clock, !(clock.isFinite && clock >= 0 && clock < 1e11) { throw ValidationError("--clock must be a Unix time in seconds") }
        if persistent && !daemon { throw ValidationError("--persistent keeps an operation of the daemon: give --daemon") }
        if daemon && (keyFile != nil || rotateEvery != nil || target.out != nil) {
            throw ValidationError("--daemon runs a fixed beacon on the daemon's device: not with --key-file, --rotate-every or --out")
        }
    }

    func startInDaemon(_ bytes: [UInt8]) throws {
        try ConsentCheck.require(mayAsk: false)
        try DaemonHandoff.start(OperationSpec(kind: .beacon, content: OperationSpec.hex(bytes), ttl: Int(duration.rounded(.up)), persistent: persistent),
                                json: false)
    }

    func run() throws {
        if target.out == nil && !daemon { try ConsentCheck.require(mayAsk: false) }
        if let keyFile {
            let provisioning: BeaconProvisioning
            do { provisioning = try BeaconKeyFile.read(keyFile) } catch { throw CommandError(error.description) }
            let bytes = provisioning.id, rotation = provisioning.rotation
            if let id, try TokenInput.bytes(hex: id, text: nil) != bytes {
                throw CommandError("\(keyFile) is the key of beacon \(bytes.hex), not \(id)")
            }
            if let rotateEvery, rotateEvery != rotation.period {
                throw CommandError("\(keyFile) rotates every \(rotation.period) s, not \(rotateEvery) s")
            }
            try target.send(frameAt: { Payload.beacon(rotation.id(atUnixTime: $0, length: bytes.count)).frameBytes },
                            changesEvery: rotation.period, clockAtStart: clock ?? Date().timeIntervalSince1970, duration: duration,
                            what: "rotating beacon \(bytes.hex)")
        } else if let id {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            if daemon { try startInDaemon(bytes); return }
            try target.send(frame: Payload.beacon(bytes).frameBytes, duration: duration, what: "beacon \(bytes.hex)")
        }
    }
}

/// `sotto subscribe`: print found / lost / expired events as they happen.
struct Subscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe",
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
    @Flag(help: "Also receive beacons: their IDs, and all attachments of the project's own beacons (needs --server).") var beacons = false
    @Option(parsing: .unconditional, help: "Seconds to subscribe (1-86400); default: until the input ends or Ctrl-C.") var ttl: Int?
    @Option(parsing: .unconditional, help: "Seconds without a sighting before lost.") var lostTimeout: Double = 10
    @Option(help: "Discovery mode: broadcast, scan or both (scan and both report what is heard).") var mode: String = "both"
    @Flag(help: "Earshot: find only what is heard at an in-band SNR of at least the matcher's earshot threshold (\(fixed(MatcherCore.defaultEarshotSNR, 1)) dB by default).") var earshot = false
    @Flag(help: "Low power (beacon subscriptions; the seeds' lowPowerPreferred): listen duty-cycled, --scan-listen s of every --scan-every s, finding up to the difference later (less CPU only where decoding is costly); the lost timeout is raised to at least --scan-every + --scan-listen + 1 s.") var lowPower = false
    @Option(parsing: .unconditional, help: "With --low-power: seconds of listening per period (default \(fixed(ScanDutyCycle.lowPower.listen, 0))).") var scanListen: Double?
    @Option(parsing: .unconditional, help: "With --low-power: seconds from one listening window to the next (default \(fixed(ScanDutyCycle.lowPower.period, 0)), at most \(fixed(ScanDutyCycle.maximumPeriod, 0))).") var scanEvery: Double?
    @OptionGroup var format: FormatOption
    @Option(help: "ALSA PCM to listen on (and play this session's token on, with --server).") var device: String = "default"
    @Option(help: "Read this recording instead of a device; - reads standard input.") var input: String?
    @OptionGroup(title: "Raw input") var raw: RawInputOptions
    @OptionGroup var server: ServerOptions
    @OptionGroup var devices: RadioDevices
    @OptionGroup(title: "Background") var daemon: DaemonOptions

    /// The low-power scan asked for (validated).
    var scan: ScanDutyCycle {
        get throws {
            do { return try ScanDutyCycle(listen: scanListen ?? ScanDutyCycle.lowPower.listen, period: scanEvery ?? ScanDutyCycle.lowPower.period) }
            catch { throw ValidationError("--scan-listen/--scan-every: \(error)") }
        }
    }

    func validate() throws {
        try format.refuseHex("subscribe")
        if earshot && daemon.daemon { throw ValidationError("--earshot is not carried by the daemon: subscribe without --daemon") }
        if (scanListen != nil || scanEvery != nil) && !lowPower { throw ValidationError("--scan-listen and --scan-every shape --low-power") }
        if lowPower {
            if daemon.daemon { throw ValidationError("--low-power is not carried by the daemon: start the daemon with --scan-listen and --scan-every") }
            if !beacons { throw ValidationError("--low-power is for beacon subscriptions: add --beacons (and --server)") }
            if input != nil { throw ValidationError("--low-power listens on a device duty-cycled; a recording (--input) is read whole") }
            _ = try scan
        }
        try daemon.check(server: server.given, out: input != nil || device != "default")
        if daemon.daemon {
            try NumericOption.ttl.check(ttl)
            try NumericOption("--lost-timeout", 1...600, unit: "s").check(lostTimeout)
            guard DiscoveryModeArgument.parse(mode) != nil else { throw ValidationError("--mode must be broadcast, scan or both") }
            if (namespace == nil) != (type == nil) { throw ValidationError("--namespace and --type go together") }
            return
        }
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
        if daemon.daemon {
            try ConsentCheck.require(mayAsk: true)
            try DaemonHandoff.start(OperationSpec(kind: .subscribe, namespace: namespace, type: type, mode: mode, ttl: ttl, lostTimeout: lostTimeout,
                                           beacons: beacons, persistent: daemon.persistent, group: daemon.group), json: format.format == .json)
            return
        }
        if input == nil { try ConsentCheck.require(mayAsk: true) }
        let discovery = DiscoveryModeArgument.parse(mode)!
        let strategy: Strategy
        do {
            strategy = try Strategy(discoveryMode: discovery, distanceType: earshot ? .earshot : .default, ttl: ttl.map { .seconds($0) } ?? .infinite,
                                    lowPower: lowPower)
        } catch { throw CommandError(error.description) }
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
            let broadcasts = strategy.discoveryMode != .scan && input == nil
            let manager = try await RemoteExchange.manager(server: server, broadcasts: broadcasts, lostTimeout: lostTimeout)
            let source: ExchangeSession.Source = input.map { .recording(path: $0, raw: raw.format) }
                ?? .devices(capture: PCMConfiguration(device: devices.captureDevice ?? device),
                            playback: broadcasts ? PCMConfiguration(device: devices.playbackDevice ?? device) : nil)
            try await run(manager, filter: filter, strategy: strategy, source: source, printer: printer)
            return
        }
        let filter = try! MessageFilter((1...ExchangeLimits.maxAudioBytes).map { .audioBytes($0) })
        if let input {
            try await runOffline(input, filter: filter, strategy: strategy, printer: printer)
        } else {
            let manager = MessageManager(appID: "sotto-cli", broadcasts: false, now: 0)
            try await run(manager, filter: filter, strategy: strategy, source: .devices(capture: PCMConfiguration(device: device), playback: nil),
                          printer: printer)
        }
    }

    /// The subscription as it happens, on the devices or a recording reported as heard now.
    func run(_ manager: MessageManager, filter: MessageFilter, strategy: Strategy, source: ExchangeSession.Source,
             printer: EventPrinter) async throws {
        let name = input == "-" ? "standard input" : input ?? ""
        let warnings = WarningGate { printError($0) }
        defer { warnings.finish() }
        do {
            try await ExchangeSession.subscribe(manager: manager, filter: filter, strategy: strategy, lostTimeout: lostTimeout,
                                                ttl: ttl.map(Double.init), source: source, stop: Interruption.stop,
                                                lowPowerScan: lowPower ? try scan : .lowPower,
                                                onEvent: { printer.print($0, at: $1) },
                                                onDeviceError: { warnings.warn("device error: \($0)") },
                                                onProgress: ProgressLine.shared.decoding(name))
            ProgressLine.shared.clear()
        } catch {
            ProgressLine.shared.clear()
            throw CommandError(input.map { "\($0): \(error)" } ?? "\(error)")
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
        if case .signalChanged(_, let snr, let level) = event { line += "  SNR \(fixed(snr, 1)) dB  level \(fixed(level, 1)) dBFS  about \(fixed(AudioDistance().meters(snr: snr), 1)) m" }
        Output.line(line)
    }
}
