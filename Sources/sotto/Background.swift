import ArgumentParser
import Foundation
import SottoAudio
import SottoDaemon
import SottoDaemonNotify
import SottoExchange
import SottoExchangeCore
import SottoLive
import SottoNotify
import SottoSupport
import SottoTools
import Synchronization

/// `--daemon`, `--persistent`, `--group KEY` of publish and subscribe.
struct DaemonOptions: ParsableArguments {
    @Flag(help: "Hand the operation to the running daemon (sotto daemon) and return its id at once.") var daemon = false
    @Flag(help: "With --daemon: keep the operation across restarts of the daemon (for its remaining TTL).") var persistent = false
    @Option(help: "With --daemon: the notification group key (default: one group per operation).") var group: String?

    /// Refuses the options that do not go with --daemon, and --persistent/--group without it.
    func check(server: Bool, out: Bool) throws {
        if !daemon {
            if persistent || group != nil { throw ValidationError("--persistent and --group are options of the daemon's operations: give --daemon") }
            return
        }
        if server { throw ValidationError("--daemon uses the daemon's matcher: give --server to 'sotto daemon', not here") }
        if out { throw ValidationError("--daemon uses the daemon's devices: not with --device, --out or --input") }
        if let group, group.isEmpty || group.utf8.count > 200 { throw ValidationError("--group must be 1-200 bytes") }
    }
}

/// Handing operations to the daemon and printing its answer.
enum DaemonHandoff {
    static func client() throws -> ControlClient {
        do { return try ControlClient(path: DaemonPaths().socket) } catch { throw CommandError(error.description) }
    }

    /// Starts `spec` in the daemon; prints its id (text) or its record (JSON) on standard output.
    static func start(_ spec: OperationSpec, json: Bool) throws {
        let reply: ControlReply
        do { reply = try client().call(.start(spec)) } catch { throw CommandError("daemon: \(error)") }
        guard let record = reply.operation else { throw CommandError("daemon: unexpected reply \(reply.reply)") }
        if json { Output.record(record); return }
        Output.line(record.id)
        printError("the daemon runs \(record.kind) \(record.id) (\(record.summary))\(record.persistent ? ", persistent" : "")")
    }
}

/// Consent, enforced before anything is played or heard.
enum ConsentCheck {
    /// Goes on with consent; asks once on a terminal when `mayAsk` and never asked; else fails with the hint.
    static func require(mayAsk: Bool) throws {
        let consent = Consent()
        switch ConsentGate.decide(consent.state, interactive: mayAsk && isatty(0) != 0 && isatty(2) != 0) {
        case .proceed: return
        case .refuse(let message): throw CommandError(message)
        case .ask:
            FileHandle.standardError.write(Data(ConsentGate.question.utf8))
            let yes = ConsentGate.isYes(readLine())
            do { try consent.set(granted: yes) } catch { throw CommandError("cannot store the answer in \(consent.file.path): \(error.localizedDescription)") }
            guard yes else { throw CommandError("consent refused: nothing was broadcast or scanned. \(ConsentGate.hint)") }
        }
    }
}

/// `sotto consent status|grant|revoke`.
struct ConsentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consent",
        abstract: "Show, grant or revoke the user's consent to play and listen for nearby tokens.",
        discussion: """
        Without consent, no command plays or listens on a device (send, listen, publish, subscribe, beacon, the \
        daemon). The answer is stored in $XDG_CONFIG_HOME/sotto/consent (else ~/.config/sotto/consent). Revoking \
        stops every operation of a running daemon at once; its clients see a permission notice.
        """)

    enum Action: String, ExpressibleByArgument, CaseIterable { case status, grant, revoke }
    @Argument(help: "status, grant or revoke.") var action: Action = .status

    func run() throws {
        let consent = Consent()
        switch action {
        case .status:
            Output.line(consent.state.rawValue)
        case .grant, .revoke:
            let granted = action == .grant
            do { try consent.set(granted: granted) } catch { throw CommandError("cannot store consent in \(consent.file.path): \(error.localizedDescription)") }
            // A running daemon acts on it at once (it also notices the file within a second on its own).
            let told = (try? ControlClient(path: DaemonPaths().socket).call(.consentChanged, timeout: 5)) != nil
            printError("consent \(granted ? "granted" : "revoked")\(told ? "; the daemon was told" : "")")
        }
    }
}

/// `sotto daemon`: the per-user background service.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Run the per-user daemon that keeps publications and subscriptions in the background.",
        discussion: """
        One per user. It owns the sound card (one capture and one playback path shared by every operation) and \
        the matcher (audio bytes, or --server), and runs what 'publish|subscribe|beacon --daemon' hand it; \
        'sotto ops' lists, cancels and watches them. Control: $XDG_RUNTIME_DIR/sotto/control.sock (mode 0600, \
        same user only). Persistent operations: $XDG_STATE_HOME/sotto/operations.json, restored at start with \
        their remaining TTL. Device faults are reported and operations resume when the device is back. Stops \
        cleanly on SIGINT or SIGTERM. Under systemd: systemctl --user enable --now sotto. What subscriptions find \
        is shown as grouped desktop notifications (--notify, --lost) when a session bus and a notification server \
        answer, else a warning says so; --exec runs a program per event instead or as well.
        """)

    @Option(help: "ALSA PCM to listen and play on.") var device: String = "default"
    @OptionGroup var devices: RadioDevices
    @Option(parsing: .unconditional, help: "Seconds from one broadcast frame to the next.") var interval: Double = 1.5
    @Option(name: .customLong("jitter"), parsing: .unconditional, help: "Random extra delay per frame (s, uniform 0...jitter; default: \(fixed(FramePlayer.Schedule.defaultJitter, 2)) s, or --interval when shorter, as in send, publish and beacon).") var jitterOption: Double?
    /// --jitter as given, or the default every transmitting command shares.
    var jitter: Double { jitterOption ?? FramePlayer.Schedule.defaultJitter(interval: interval) }
    @Option(parsing: .unconditional, help: "Seconds between attempts to reopen a failed device or reach the matcher.") var retryInterval: Double = 1
    @Option(parsing: .unconditional, help: "Duty-cycled scanning: listen this many seconds of every --scan-every (default: listen all the time).") var scanListen: Double?
    @Option(parsing: .unconditional, help: "Duty-cycled scanning: the period (s) of --scan-listen.") var scanEvery: Double?
    @OptionGroup var server: ServerOptions
    enum NotifyMode: String, ExpressibleByArgument, CaseIterable { case desktop, none }
    enum LostMode: String, ExpressibleByArgument, CaseIterable { case withdraw, mark }
    @Option(help: "Desktop notifications of found, lost and expired messages (on the session bus), or none.") var notify: NotifyMode = .desktop
    @Option(help: "What a lost message does to its notification: withdraw it, or mark it lost.") var lost: LostMode = .mark
    @Option(help: "Run this program for each found, lost or expired event: SOTTO_* environment variables, the content on standard input (no shell).")
    var exec: String?
    @Option(parsing: .unconditionalSingleValue, help: "An argument of the --exec program (repeat for several).") var execArg: [String] = []
    enum EventsMode: String, ExpressibleByArgument, CaseIterable { case none, json }
    @Option(help: "Structured events for headless machines: json prints every event as a JSON Lines record on standard output (under systemd, when standard output is the journal, as journal entries with SOTTO_* fields).")
    var events: EventsMode = .none

    func validate() throws {
        if exec?.isEmpty == true { throw ValidationError("--exec needs a program") }
        if exec == nil && !execArg.isEmpty { throw ValidationError("--exec-arg goes with --exec") }
        if let exec, !exec.isEmpty {
            let candidates = exec.contains("/") ? [exec]
                : (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map { "\($0)/\(exec)" }
            if !candidates.contains(where: { FileManager.default.isExecutableFile(atPath: $0) }) {
                throw ValidationError("--exec \(exec): no such executable program\(exec.contains("/") ? "" : " in PATH")")
            }
        }
        try NumericOption("--interval", 0.1...3600, unit: "s").check(interval)
        try NumericOption("--scan-listen", 1...3600, unit: "s").check(scanListen)
        try NumericOption("--scan-every", 2...3600, unit: "s").check(scanEvery)
        if (scanListen == nil) != (scanEvery == nil) { throw ValidationError("--scan-listen and --scan-every go together") }
        if let scanListen, let scanEvery, scanListen >= scanEvery { throw ValidationError("--scan-listen must be shorter than --scan-every") }
        try NumericOption("--jitter", 0...interval, unit: "s (at most --interval)").check(jitterOption)
        try NumericOption("--retry-interval", 0.05...60, unit: "s").check(retryInterval)
    }

    func run() async throws {
        let matcher: DaemonConfiguration.Matcher
        if server.given {
            _ = try server.link(broadcasts: true)  // checks the address and key now, as a usage error
            let server = self.server
            matcher = .service(description: server.server.joined(separator: ", ")) { lostTimeout, onNotice in
                // The same first contact as publish and subscribe: a failure's cause at once (the daemon says it and retries;
                // it adds "matcher: " itself).
                do { return try await RemoteExchange.manager(server: server, broadcasts: true, lostTimeout: lostTimeout, onNotice: onNotice) }
                catch let error as CommandError where error.description.hasPrefix("matcher: ") {
                    throw CommandError(String(error.description.dropFirst("matcher: ".count)))
                }
            }
        } else {
            matcher = .embedded
        }
        let configuration = DaemonConfiguration(capture: PCMConfiguration(device: devices.captureDevice ?? device),
                                                playback: PCMConfiguration(device: devices.playbackDevice ?? device),
                                                interval: interval, jitter: jitter, matcher: matcher, retryInterval: retryInterval)
        var configured = configuration
        if let scanListen, let scanEvery { configured.scanning = .dutyCycled(listen: scanListen, period: scanEvery) }
        let daemon = Daemon(configuration: configured) { printError($0) }
        if configuration.consent.state != .granted { printError("warning: consent is not granted: nothing runs until it is. \(ConsentGate.hint)") }
        let notifications = try notificationSink()
        if let notifications { await daemon.add(sink: notifications) }
        let structured = structuredEventSink()
        if let structured { await daemon.add(sink: structured) }
        do {
            try await daemon.run(until: Interruption.stop) { printError("sotto daemon listening on \($0)") }
        } catch {
            await notifications?.finish()
            structured?.flush()
            throw CommandError(error.description)
        }
        await notifications?.finish()
        structured?.flush()
        printError("sotto daemon stopped")
    }
}

extension DaemonCommand {
    /// The desktop notifier (when asked for and a notification server answers; else a warning) and the
    /// --exec command, as one sink; nil when neither is on.
    func notificationSink() throws -> DaemonNotifications? {
        var desktop: DesktopNotifier?
        var media: MediaFetcher?
        var connect: (@Sendable () throws -> (DesktopNotifier, MediaFetcher?))?
        if notify == .desktop {
            let policy = NotificationPolicy(lost: lost == .withdraw ? .withdraw : .mark)
            // At login the daemon may start before the desktop's notification server: it is asked for again
            // when something is to be shown.
            let make: @Sendable () throws -> (DesktopNotifier, MediaFetcher?) = {
                let fetcher = MediaFetcher(cacheDirectory: MediaFetcher.defaultCacheDirectory())
                do { return (try DesktopNotifier(configuration: DesktopNotifier.Configuration(policy: policy), media: fetcher), fetcher) } catch {
                    Task { await fetcher.shutdown() }
                    throw error
                }
            }
            do { (desktop, media) = try make() } catch {
                printError("warning: \(error); the daemon runs without desktop notifications until a notification server answers"
                           + " (asked again when a subscription finds something)")
                connect = make
            }
        }
        var sink: ExecSink?
        if let exec {
            do { sink = try ExecSink(command: [exec] + execArg) } catch { throw CommandError("\(error)") }
        }
        guard desktop != nil || connect != nil || sink != nil else { return nil }
        return DaemonNotifications(desktop: desktop, media: media, exec: sink, connectDesktop: connect) { printError($0) }
    }
}

extension DaemonCommand {
    /// --events json: JSON lines on standard output, or journal entries when standard output is the journal.
    /// A standard output that fails (closed, full) stops the lines with one warning; the daemon keeps running.
    func structuredEventSink() -> StructuredEventSink? {
        guard events == .json else { return nil }
        let environment = ProcessInfo.processInfo.environment
        let destination: StructuredEventSink.Destination = Journal.standardOutputIsJournal(environment: environment)
            ? .journal(socket: Journal.socket(environment: environment)) : .lines
        let failed = Mutex(false)
        return StructuredEventSink(destination: destination, write: { line in
            guard !failed.withLock({ $0 }) else { return }
            let code = StandardStream.write(line + "\n", to: STDOUT_FILENO)
            if code != 0 {
                failed.withLock { $0 = true }
                printError("warning: standard output failed (\(StandardStreamError(code: code))): no more --events lines; the daemon keeps running")
            }
        }, log: { printError($0) })
    }
}

/// `sotto ops list|cancel ID|watch [ID]`.
struct Ops: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ops", abstract: "List, cancel and watch the daemon's operations.",
        subcommands: [OpsList.self, OpsCancel.self, OpsWatch.self], defaultSubcommand: OpsList.self)
}

struct OpsList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the daemon's operations.")
    @OptionGroup var format: FormatOption
    func validate() throws { try format.refuseHex("ops list") }

    func run() throws {
        let reply: ControlReply
        do { reply = try DaemonHandoff.client().call(.list) } catch { throw CommandError("daemon: \(error)") }
        for record in reply.operations ?? [] {
            if format.format == .json { Output.record(record); continue }
            let left = record.remaining.map { "\(Int($0.rounded())) s left" } ?? "no end"
            Output.line("\(record.id)  \(record.kind)  \(record.status)  \(left)\(record.persistent ? "  persistent" : "")  group \(record.group)  \(record.summary)")
        }
    }
}

struct OpsCancel: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cancel", abstract: "End one of the daemon's operations.")
    @Argument(help: "The operation's id (from ops list).") var id: String
    func validate() throws { if !OperationID.isValid(id) { throw ValidationError("'\(id)' is not an operation id (12 hex digits)") } }

    func run() throws {
        do { _ = try DaemonHandoff.client().call(.cancel(id)) } catch { throw CommandError("daemon: \(error)") }
        printError("cancelled \(id)")
    }
}

struct OpsWatch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch", abstract: "Print the daemon's events (of one operation, or all) as they happen, until Ctrl-C (or until that operation ends).")
    @Argument(help: "Only this operation's events (and the daemon's own notices).") var id: String?
    @OptionGroup var format: FormatOption
    func validate() throws {
        try format.refuseHex("ops watch")
        if let id, !OperationID.isValid(id) { throw ValidationError("'\(id)' is not an operation id (12 hex digits)") }
    }

    func run() throws {
        let client = try DaemonHandoff.client()
        do { _ = try client.call(.watch(id)) } catch { throw CommandError("daemon: \(error)") }
        let stop = Interruption.stop
        while !stop.isSet {
            let reply: ControlReply
            do { reply = try client.receive(timeout: 0.5) } catch {
                if error.description.hasPrefix("the daemon did not answer") { continue }
                if stop.isSet { break }
                throw CommandError("daemon: \(error)")
            }
            if let event = reply.event {
                if format.format == .json { Output.record(event); continue }
                var line = "\(event.operation ?? "-")  \(event.event)"
                if let namespace = event.namespace, let type = event.type { line += "  \(namespace)/\(type)" }
                if let text = event.text { line += "  \"\(text)\"" } else if let content = event.content { line += "  \(content)" }
                Output.line(line)
            } else if let notice = reply.notice {
                if format.format == .json { Output.record(notice) } else {
                    Output.line("\(notice.operation ?? "-")  \(notice.notice) \(notice.status)\(notice.detail.map { ": \($0)" } ?? "")")
                }
                // Watching one operation: its end is the end of the watch.
                if let id, notice.notice == "operation", notice.operation == id, ["ended", "expired"].contains(notice.status) { return }
            }
        }
    }
}
