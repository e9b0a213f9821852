import Foundation
import SottoAudio
import SottoDaemon
import SottoExchange
import SottoExchangeCore
import SottoModem
@testable import SottoNotify
import SottoSupport
import SottoTools
import Testing

/// A user's directories for the daemon and consent, in a temporary directory: XDG_CONFIG_HOME (consent),
/// XDG_RUNTIME_DIR (socket, lock), XDG_STATE_HOME (persistent operations), and ALSA's test PCMs.
struct DaemonRig {
    let directory: URL
    let audio: FilePluginRig
    /// More environment for the daemon and commands: by default no session bus (the machine's own is never
    /// used: desktop notifications are on by default).
    var extraEnvironment = ["DBUS_SESSION_BUS_ADDRESS": ""]
    var config: URL { directory.appendingPathComponent("config") }
    var runtime: URL { directory.appendingPathComponent("run") }
    var state: URL { directory.appendingPathComponent("state") }
    var paths: DaemonPaths { DaemonPaths(environment: environment) }
    var environment: [String: String] {
        audio.environment.merging(["XDG_CONFIG_HOME": config.path, "XDG_RUNTIME_DIR": runtime.path, "XDG_STATE_HOME": state.path,
                                    "XDG_CACHE_HOME": directory.appendingPathComponent("cache").path]) { $1 }
            .merging(extraEnvironment) { $1 }
    }

    /// - Parameter consent: the stored answer to start with (nil: never asked).
    init(consent: Bool? = true) throws {
        directory = try temporaryDirectory()
        audio = try FilePluginRig()
        for sub in [config, runtime, state] { try FileManager.default.createDirectory(at: sub, withIntermediateDirectories: true) }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: runtime.path)
        if let consent { try Consent(directory: config.appendingPathComponent("sotto")).set(granted: consent) }
    }

    func remove() {
        try? FileManager.default.removeItem(at: directory)
        try? FileManager.default.removeItem(at: audio.directory)
    }

    /// Runs a `sotto` command as this user (bounded).
    func run(_ arguments: [String], timeout: Double = 30) throws -> Sotto.Result {
        try Sotto.run(arguments, environment: environment, timeout: timeout)
    }

    /// Starts `sotto daemon` on the paced test PCMs and waits until its socket answers.
    func startDaemon(_ extra: [String] = []) async throws -> BackgroundSotto {
        let daemon = try BackgroundSotto(["daemon", "--capture-device", "sotto_faulty_capture", "--playback-device", "sotto_faulty_playback",
                                          "--retry-interval", "0.2"] + extra, environment: environment)
        // Bounded by attempts as well as time: beside the crowd simulation, this task itself may not run for a
        // minute (it never even asked); it gives up after 20 s with at least 100 attempts, or after 120 s.
        let started = Date()
        var attempts = 0
        while Date().timeIntervalSince(started) < 120 && (attempts < 100 || Date().timeIntervalSince(started) < 20) {
            attempts += 1
            if (try? ControlClient(path: paths.socket).call(.list, timeout: 2)) != nil { return daemon }
            if !daemon.process.isRunning { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("the daemon did not start: \(daemon.standardError)")
        return daemon
    }

    /// The daemon's operations.
    func operations() throws -> [OperationRecord] {
        try ControlClient(path: paths.socket).call(.list, timeout: 5).operations ?? []
    }
}

extension BackgroundSotto {
    /// SIGTERM, then waits (at most `timeout` s) for the end; returns the exit status (nil: had to be killed).
    func terminate(timeout: Double = 10) async -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        process.terminate()
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); return nil }
        return process.terminationStatus
    }

    /// Waits (at most `timeout` s) until its standard error contains `text` (read as it comes, it may lag).
    func saidOnStandardError(_ text: String, timeout: Double = 5) async -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while !standardError.contains(text) && Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return standardError.contains(text)
    }

    /// Waits (at most `timeout` s) until the process has ended.
    func waitForExit(timeout: Double) async -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while process.isRunning && Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return !process.isRunning
    }
}

/// Consent (seed 000's permission): every command that plays or listens on a device asks for it, and without
/// it nothing is played or heard; files need none.
@Suite(.serialized) struct ConsentCommandTests {
    @Test func withoutConsentNothingPlaysOrListensAndTheHintSaysHow() throws {
        let rig = try DaemonRig(consent: nil)
        defer { rig.remove() }
        #expect(try rig.run(["consent", "status"]).stdout == "not-asked\n")
        try FilePluginRig.raw([Float](repeating: 0, count: 4_800) + Modulator().modulate([7, 7]) + [Float](repeating: 0, count: 48_000)).write(to: rig.audio.input)
        let commands: [[String]] = [
            ["send", "0x0102", "--device", "sotto_playback"],
            ["listen", "--device", "sotto_capture", "--duration", "1"],
            // Not a terminal: never blocks on a prompt.
            ["publish", "--text", "hi", "--ttl", "2", "--device", "sotto_playback"],
            ["subscribe", "--device", "sotto_capture", "--ttl", "2"],
            ["beacon", "0102", "--duration", "1", "--device", "sotto_playback"],
        ]
        for command in commands {
            let result = try rig.run(command, timeout: 20)
            #expect(result.status == 2, "\(command): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("sotto consent grant") && result.stderr.contains("nothing was broadcast or scanned"), "\(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
        // Nothing was played: the file plugin's output was never written.
        let played = (try? Data(contentsOf: rig.audio.output)) ?? Data()
        #expect(played.isEmpty)
        // Files are no broadcast: they need no consent.
        let wav = rig.directory.appendingPathComponent("a.wav").path
        #expect(try rig.run(["send", "0x0102", "--out", wav]).status == 0)

        #expect(try rig.run(["consent", "grant"]).status == 0)
        #expect(try rig.run(["consent", "status"]).stdout == "granted\n")
        let heard = try rig.run(["listen", "--device", "sotto_capture", "--duration", "1.5", "--format", "hex"])
        #expect(heard.status == 0 && heard.stdout == "0707\n", "\(heard.stderr)")

        #expect(try rig.run(["consent", "revoke"]).status == 0)
        #expect(try rig.run(["consent", "status"]).stdout == "denied\n")
        let refused = try rig.run(["send", "0x0102", "--device", "sotto_playback"])
        #expect(refused.status == 2 && refused.stderr.contains("revoked"), "\(refused.stderr)")
        #expect(try rig.run(["consent", "maybe"]).status == 64)
    }

    /// On a terminal (util-linux script gives it one), the first subscribe asks once: yes is stored and the
    /// command goes on; no is stored too, and the next run is refused without asking again.
    @Test func aTerminalIsAskedOnce() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script") else { print("skipped: no /usr/bin/script"); return }
        for answer in ["y", "n"] {
            let rig = try DaemonRig(consent: nil)
            defer { rig.remove() }
            try FilePluginRig.raw([Float](repeating: 0, count: 48_000)).write(to: rig.audio.input)
            let command = "'\(Sotto.executable.path)' subscribe --device sotto_capture --ttl 1"
            let first = try Sotto.run(["-qec", command, "/dev/null"], environment: rig.environment, timeout: 30, launcher: "/usr/bin/script",
                                      input: Data("\(answer)\n".utf8))
            #expect(first.stdout.contains("Allow it? [y/N]"), "\(first.stdout)")
            #expect(try rig.run(["consent", "status"]).stdout == (answer == "y" ? "granted\n" : "denied\n"))
            #expect(first.status == (answer == "y" ? 0 : 2), "\(first.stdout)")
            let second = try Sotto.run(["-qec", command, "/dev/null"], environment: rig.environment, timeout: 30, launcher: "/usr/bin/script",
                                       input: Data("y\n".utf8))
            #expect(!second.stdout.contains("Allow it?"), "asked twice: \(second.stdout)")
            #expect(second.status == (answer == "y" ? 0 : 2), "\(second.stdout)")
        }
    }

    @Test func theGateAsksOnlyOnATerminalAndOnlyOnce() {
        #expect(ConsentGate.decide(.granted, interactive: false) == .proceed)
        #expect(ConsentGate.decide(.notAsked, interactive: true) == .ask)
        #expect(ConsentGate.decide(.denied, interactive: true) != .ask)
        if case .refuse(let message) = ConsentGate.decide(.notAsked, interactive: false) {
            #expect(message.contains(ConsentGate.hint))
        } else { Issue.record("a non-interactive run must be refused") }
        #expect(ConsentGate.isYes(" Y ") && ConsentGate.isYes("yes") && !ConsentGate.isYes("") && !ConsentGate.isYes(nil) && !ConsentGate.isYes("no"))
    }
}

/// `sotto daemon` from outside: one per user, its socket, operations handed over and listed, cancelled,
/// restored after `kill -9`, device faults survived, consent revocation, and bad clients.
@Suite(.serialized) struct DaemonTests {
    /// An audio-bytes frame after half a second of silence, then silence: what the capture PCM hears.
    static func audioBytes(_ text: String) throws -> Data {
        FilePluginRig.raw([Float](repeating: 0, count: 24_000) + (try Modulator().modulate(Payload.audioBytes(Array(text.utf8)).frameBytes))
                          + [Float](repeating: 0, count: 24_000))
    }

    /// The daemon's connection to a matcher service takes the same first contact as publish and subscribe: a port
    /// nobody listens on is said as such (refused), not after a time-out without a cause.
    @Test func aRefusedMatcherIsReportedWithItsCause() async throws {
        var rig = try DaemonRig()
        defer { rig.remove() }
        rig.extraEnvironment["SOTTO_API_KEY"] = "sotto_test_key"
        let port = try FailureCauseTests.freePort()
        let daemon = try await rig.startDaemon(["--server", "127.0.0.1:\(port)"])
        defer { daemon.process.terminate() }
        // A subscription needs the matcher: the daemon tries it, and the cause reaches the client or the daemon's log.
        let subscribe = try rig.run(["subscribe", "--daemon", "--namespace", "a", "--type", "b"])
        let said = "127.0.0.1:\(port) refused the connection"
        let reported = subscribe.stderr.contains(said) ? true : await daemon.saidOnStandardError(said, timeout: 20)
        #expect(reported, "client: \(subscribe.status) \(subscribe.stderr); daemon: \(daemon.standardError)")
        #expect(!daemon.standardError.contains("not connected after"), "\(daemon.standardError)")
        #expect(!subscribe.stderr.contains("matcher: matcher:"), "\(subscribe.stderr)")
    }

    @Test func oneDaemonPerUserItsSocketAndItsOperations() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        let mode = try FileManager.default.attributesOfItem(atPath: rig.paths.socket.path)[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)

        // A second daemon is refused with the reason (the lock), and the first keeps running.
        let second = try rig.run(["daemon", "--device", "sotto_faulty_capture"], timeout: 10)
        #expect(second.status == 2 && second.stderr.contains("another sotto daemon is running"), "\(second.stderr)")

        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door", "--lost-timeout", "3"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let id = subscribe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(OperationID.isValid(id), "\(subscribe.stdout)")
        let publish = try rig.run(["publish", "--daemon", "--text", "hi", "--ttl", "60"])
        #expect(publish.status == 0, "\(publish.stderr)")
        let beacon = try rig.run(["beacon", "0a0b", "--daemon", "--duration", "30"])
        #expect(beacon.status == 0, "\(beacon.stderr)")

        let list = try rig.run(["ops", "list", "--format", "json"])
        #expect(try JSONLinesSchemaTests.validateAll(list.stdout) == ["operation", "operation", "operation"])
        let records = try rig.operations()
        #expect(records.map(\.kind) == ["subscribe", "publish", "beacon"])
        #expect(records.first?.group == "door" && records.first?.remaining == nil)
        #expect(records[1].remaining.map { $0 > 50 && $0 <= 60 } == true && records[1].summary == "\"hi\"")

        // Options that need a matcher the daemon does not have are refused by it, with its reason.
        let namespaced = try rig.run(["subscribe", "--daemon", "--namespace", "a", "--type", "b"])
        #expect(namespaced.status == 2 && namespaced.stderr.contains("need a matcher"), "\(namespaced.stderr)")
        #expect(try rig.run(["publish", "--daemon", "--text", "hi", "--server", "127.0.0.1:1"]).status == 64)

        #expect(try rig.run(["ops", "cancel", id]).status == 0)
        #expect(try rig.operations().map(\.kind) == ["publish", "beacon"])
        let unknown = try rig.run(["ops", "cancel", "0123456789ab"])
        #expect(unknown.status == 2 && unknown.stderr.contains("no operation"), "\(unknown.stderr)")
        #expect(try rig.run(["ops", "cancel", "nonsense"]).status == 64)

        // SIGTERM: a clean end, the socket removed; a client then hears there is no daemon and how to start one.
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
        #expect(!FileManager.default.fileExists(atPath: rig.paths.socket.path))
        let none = try rig.run(["ops", "list"])
        #expect(none.status == 2 && none.stderr.contains("sotto daemon"), "\(none.stderr)")
    }

    /// Socket activation (sd_listen_fds): systemd-socket-activate listens, and starts the daemon with the
    /// socket as fd 3 when the first client connects; the daemon serves it, ends cleanly on SIGTERM and leaves
    /// the socket's file alone (it is systemd's). The activator is started with posix_spawn and reaped by the
    /// test (``SpawnedProcess``): it closes the descriptors it inherits, which Foundation's `Process` watches.
    @Test func socketActivationServesThePassedSocket() async throws {
        let activate = "/usr/bin/systemd-socket-activate"
        guard FileManager.default.isExecutableFile(atPath: activate) else { print("skipped: no \(activate)"); return }
        let rig = try DaemonRig()
        defer { rig.remove() }
        try rig.paths.prepareRuntime()
        var arguments = ["-l", rig.paths.socket.path]
        for name in rig.environment.keys.sorted() { arguments += ["-E", name] }
        arguments += [Sotto.executable.path, "daemon", "--capture-device", "sotto_faulty_capture", "--playback-device", "sotto_faulty_playback"]
        let listener = try SpawnedProcess(activate, arguments, environment: rig.environment, directory: rig.directory)
        defer { listener.kill9() }
        let deadline = Date(timeIntervalSinceNow: 10)
        while !FileManager.default.fileExists(atPath: rig.paths.socket.path) && listener.isRunning && Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        // The first connection starts the daemon, which answers on it.
        let reply = try ControlClient(path: rig.paths.socket).call(.list, timeout: 20)
        #expect(reply.operations == [])
        #expect(await listener.saidOnStandardError("listening on the socket passed by systemd"), "\(listener.standardError)")
        let subscribe = try rig.run(["subscribe", "--daemon"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        #expect(try rig.operations().count == 1)
        #expect(await listener.stop(SIGTERM) == 0, "\(listener.standardError)")
        #expect(listener.standardError.contains("sotto daemon stopped"), "\(listener.standardError)")
        #expect(FileManager.default.fileExists(atPath: rig.paths.socket.path), "systemd's socket file was removed")
    }

    /// Malformed, oversized, unknown and truncated frames, and clients that leave mid-command: each gets a
    /// clear error (or is dropped), and the daemon keeps serving.
    @Test func badClientsGetErrorsAndTheDaemonKeepsRunning() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        let socket = rig.paths.socket

        func reply(to bytes: Data) throws -> ControlReply {
            let client = try ControlClient(path: socket)
            client.sendRaw(bytes)
            return try client.receive(timeout: 10)
        }
        func frame(_ json: String) -> Data { ControlProtocol.frame(Data(json.utf8)) }

        #expect(try reply(to: frame("{not json")).error?.contains("malformed request") == true)
        #expect(try reply(to: frame(#"{"version":99,"request":"list"}"#)).error?.contains("unsupported protocol version 99") == true)
        #expect(try reply(to: frame(#"{"version":1,"request":"reboot"}"#)).error?.contains("unknown request") == true)
        #expect(try reply(to: frame(#"{"version":1,"request":"start","operation":{"kind":"publish","mode":"loud","beacons":false,"persistent":false}}"#))
            .error?.contains("mode") == true)
        #expect(try reply(to: Data([0xFF, 0xFF, 0xFF, 0xFF])).error?.contains("over the limit") == true)
        #expect(try reply(to: Data([0, 0, 0, 0])).error?.contains("empty frame") == true)

        // After a malformed request the same connection goes on.
        let client = try ControlClient(path: socket)
        client.sendRaw(frame("[]"))
        #expect(try client.receive().reply == "error")
        #expect(try client.call(.list).reply == "operations")

        // Half a frame, then silence: dropped after the frame time-out with an error.
        let stalled = try ControlClient(path: socket)
        stalled.sendRaw(Data([0, 0, 0, 40, 0x7B]))
        #expect(try stalled.receive(timeout: 10).error?.contains("incomplete frame") == true)

        // Clients that disconnect mid-frame and mid-command (a start whose reply nobody reads, a watch).
        for _ in 0..<5 {
            let gone = try ControlClient(path: socket)
            gone.sendRaw(Data([0, 0, 1, 0, 0x7B, 0x22]))
        }
        do {
            let gone = try ControlClient(path: socket)
            try gone.send(.start(OperationSpec(kind: .subscribe)))
            let watcher = try ControlClient(path: socket)
            try watcher.send(.watch(nil))
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(daemon.process.isRunning)
        let records = try rig.operations()
        #expect(records.count == 1 && records.first?.kind == "subscribe")
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
    }

    /// The socket refuses another uid after checking SO_PEERCRED, even when its file mode lets it connect.
    @Test func anotherUserIsRefused() async throws {
        guard getuid() == 0 else {
            print("skipped: making a second user and switching to it needs root")
            return
        }
        guard ["/usr/sbin/useradd", "/usr/bin/setpriv"].allSatisfy(FileManager.default.isExecutableFile(atPath:)) else {
            print("skipped: useradd and setpriv (passwd, util-linux) are needed to act as a second user")
            return
        }
        let user = "sottopeer"
        if getpwnam(user) == nil {
            let add = try Sotto.run(["-r", "-M", "-s", "/usr/sbin/nologin", user], launcher: "/usr/sbin/useradd")
            #expect(add.status == 0, "\(add.stderr)")
        }
        let peer = try #require(getpwnam(user)?.pointee)
        let rig = try DaemonRig()
        defer { rig.remove() }
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        // Open the way on purpose (as a careless chmod would): the peer credentials are what must refuse it.
        for path in [rig.directory.path, rig.runtime.path, rig.paths.runtime.path] { chmod(path, 0o755) }
        chmod(rig.paths.socket.path, 0o777)
        let other = try Sotto.run(["--reuid=\(peer.pw_uid)", "--regid=\(peer.pw_gid)", "--clear-groups", Sotto.executable.path, "ops", "list"],
                                  environment: rig.environment, timeout: 20, launcher: "/usr/bin/setpriv")
        #expect(other.status == 2 && other.stderr.contains("another user"), "\(other.status) \(other.stderr)")
        #expect(await daemon.saidOnStandardError("refused a control client of uid \(peer.pw_uid)"), "\(daemon.standardError)")
        // The owner is still served.
        #expect(try rig.run(["ops", "list"]).status == 0)
        #expect(await daemon.terminate() == 0)
    }

    /// Persistent operations survive `kill -9` with their remaining TTL; others do not; a corrupt state file
    /// is kept aside with a warning.
    @Test func persistentOperationsAreRestoredAfterKill9() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        var daemon = try await rig.startDaemon()
        let kept = try rig.run(["subscribe", "--daemon", "--persistent", "--ttl", "600", "--group", "door"])
        #expect(kept.status == 0, "\(kept.stderr)")
        let keptID = kept.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try rig.run(["publish", "--daemon", "--text", "x", "--ttl", "600"]).status == 0)
        #expect(try rig.run(["beacon", "0102", "--daemon", "--persistent", "--duration", "600"]).status == 0)
        try await Task.sleep(for: .seconds(1.2))
        kill(daemon.process.processIdentifier, SIGKILL)
        #expect(await daemon.waitForExit(timeout: 10))

        daemon = try await rig.startDaemon()
        var records = try rig.operations()
        #expect(records.map(\.kind) == ["subscribe", "beacon"], "\(records) \(daemon.standardError)")
        #expect(records.first?.id == keptID && records.first?.group == "door" && records.first?.persistent == true)
        #expect(records.first?.remaining.map { $0 < 599 && $0 > 560 } == true, "\(records)")
        #expect(await daemon.saidOnStandardError("restored 2 persistent operation(s)"), "\(daemon.standardError)")
        #expect(await daemon.terminate() == 0)

        // A clean stop keeps them too.
        daemon = try await rig.startDaemon()
        records = try rig.operations()
        #expect(records.count == 2)
        #expect(await daemon.terminate() == 0)

        // A truncated file: kept aside with a warning, the daemon starts without it.
        let file = rig.paths.operations
        let text = try Data(contentsOf: file)
        try text.prefix(text.count / 2).write(to: file)
        daemon = try await rig.startDaemon()
        #expect(try rig.operations().isEmpty)
        #expect(await daemon.saidOnStandardError("truncated or corrupt") && daemon.standardError.contains("kept as"), "\(daemon.standardError)")
        let aside = try FileManager.default.contentsOfDirectory(atPath: rig.paths.state.path).filter { $0.hasPrefix("operations.json.corrupt-") }
        #expect(aside.count == 1)
        #expect(try Data(contentsOf: rig.paths.state.appendingPathComponent(aside[0])) == text.prefix(text.count / 2))
        #expect(await daemon.terminate() == 0)
    }

    /// A subscription's find reaches watchers with its operation and group; the device unplugged is reported
    /// and the daemon goes on, and hears again once it is back; revoking consent stops everything at once and
    /// watchers see it.
    @Test func eventsDeviceFaultsAndRevocationReachWatchers() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        try Self.audioBytes("hi").write(to: rig.audio.faultyInput)
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        let watch = try BackgroundSotto(["ops", "watch", "--format", "json"], environment: rig.environment)
        defer { watch.process.terminate() }
        try await Task.sleep(for: .milliseconds(300))
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door", "--lost-timeout", "2"])
        let id = subscribe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let found = await watch.line(timeout: 20) { $0.contains(#""event":"found""#) }
        #expect(found?.contains(#""text":"hi""#) == true && found?.contains(#""group":"door""#) == true
                && found?.contains(#""operation":"\#(id)""#) == true, "\(watch.output) \(daemon.standardError)")

        try rig.audio.setUnplugged(true)
        let fault = await watch.line(timeout: 20) { $0.contains(#""notice":"device""#) && $0.contains(#""status":"fault""#) }
        #expect(fault != nil, "\(watch.output) \(daemon.standardError)")
        #expect(daemon.process.isRunning)
        #expect(try rig.operations().first?.status.hasPrefix("waiting: device") == true)
        try Self.audioBytes("ho").write(to: rig.audio.faultyInput)
        try rig.audio.setUnplugged(false)
        let back = await watch.line(timeout: 20) { $0.contains(#""notice":"device""#) && $0.contains(#""status":"running""#) }
        #expect(back != nil, "\(watch.output) \(daemon.standardError)")
        let again = await watch.line(timeout: 20) { $0.contains(#""event":"found""#) && $0.contains(#""text":"ho""#) }
        #expect(again != nil, "\(watch.output)")

        #expect(try rig.run(["consent", "revoke"]).status == 0)
        let revoked = await watch.line(timeout: 5) { $0.contains(#""notice":"permission""#) && $0.contains(#""status":"revoked""#) }
        #expect(revoked != nil, "\(watch.output)")
        let ended = await watch.line(timeout: 5) { $0.contains(#""status":"ended""#) && $0.contains("consent revoked") }
        #expect(ended != nil, "\(watch.output)")
        #expect(try rig.operations().isEmpty)
        let refused = try rig.run(["subscribe", "--daemon"])
        #expect(refused.status == 2 && refused.stderr.contains("sotto consent grant"), "\(refused.stderr)")
        for line in watch.output { _ = try JSONLinesSchemaTests.validate(Substring(line)) }
        #expect(await daemon.terminate() == 0)
        await watch.interrupt()
    }
}

/// Duty-cycled scanning: the capture device is open one second of every three (the paced test PCM replays
/// its input at each open, so the frame is heard again in every window), and a lost timeout shorter than the
/// period is raised so that the find does not flap between windows.
@Suite(.serialized) struct DaemonScanningTests {
    @Test func dutyCycledScanningHearsInEachWindowWithoutFlapping() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let daemon = try await rig.startDaemon(["--scan-listen", "1", "--scan-every", "3"])
        defer { daemon.process.terminate() }
        let watch = try BackgroundSotto(["ops", "watch", "--format", "json"], environment: rig.environment)
        defer { watch.process.terminate() }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try rig.run(["subscribe", "--daemon", "--lost-timeout", "2"]).status == 0)
        #expect(await watch.line(timeout: 10) { $0.contains(#""event":"found""#) } != nil, "\(watch.output) \(daemon.standardError)")
        // Three more windows: heard in each (never lost), though 2 s pass between them without a sighting.
        try await Task.sleep(for: .seconds(9))
        #expect(!watch.output.contains { $0.contains(#""event":"lost""#) }, "\(watch.output)")
        #expect(watch.output.filter { $0.contains(#""event":"found""#) }.count == 1)
        #expect(await daemon.terminate() == 0)
        // Continuously, the input is read once: the same subscription loses it after its 2 s.
        let continuous = try await rig.startDaemon()
        defer { continuous.process.terminate() }
        let watch2 = try BackgroundSotto(["ops", "watch", "--format", "json"], environment: rig.environment)
        defer { watch2.process.terminate() }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try rig.run(["subscribe", "--daemon", "--lost-timeout", "2"]).status == 0)
        #expect(await watch2.line(timeout: 10) { $0.contains(#""event":"lost""#) } != nil, "\(watch2.output)")
        #expect(await continuous.terminate() == 0)
        #expect(try rig.run(["daemon", "--scan-listen", "3", "--scan-every", "3"]).status == 64)
    }
}

/// The control protocol's decoder and the state file, directly.
@Suite struct ControlProtocolTests {
    @Test func framesAreSplitBoundedAndVersioned() throws {
        var decoder = ControlFrameDecoder(limit: 100)
        let payload = ControlRequest.list.payload
        let bytes = [UInt8](ControlProtocol.frame(payload) + ControlProtocol.frame(ControlRequest.cancel("0123456789ab").payload))
        for byte in bytes.prefix(7) { decoder.append([byte]); #expect(try decoder.next() == nil) }
        decoder.append(bytes.dropFirst(7))
        #expect(try ControlRequest(payload: #require(try decoder.next())) == .list)
        #expect(try ControlRequest(payload: #require(try decoder.next())) == .cancel("0123456789ab"))
        #expect(try decoder.next() == nil && !decoder.hasPartialFrame)
        decoder.append([0, 0, 0, 101])
        #expect(throws: ControlError.self) { try decoder.next() }
        for request in [ControlRequest.list, .watch(nil), .watch("00000000000a"), .consentChanged,
                        .start(OperationSpec(kind: .beacon, content: "0102", ttl: 5, persistent: true, group: "g"))] {
            #expect(try ControlRequest(payload: Array(request.payload)) == request)
        }
        #expect(throws: ControlError.self) { try ControlRequest(payload: Array(#"{"version":1,"request":"cancel","id":"../../x"}"#.utf8)) }
        #expect(throws: ControlError.self) { try ControlRequest(payload: Array(#"{"version":1,"request":"start","operation":{"kind":"beacon","mode":"both","beacons":false,"persistent":false,"content":"zz"}}"#.utf8)) }
    }

    @Test func theStateFileIsSavedAtomicallyAndACorruptOneIsKept() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = OperationStore(file: dir.appendingPathComponent("s/operations.json"))
        #expect(store.load().operations.isEmpty && store.load().warning == nil)
        let saved = [SavedOperation(id: "0123456789ab", spec: OperationSpec(kind: .subscribe, persistent: true), expiresAt: 1e10)]
        try store.save(saved)
        #expect(store.load().operations == saved)
        try Data("{\"version\":1,\"operations\":[{".utf8).write(to: store.file)
        let loaded = store.load()
        #expect(loaded.operations.isEmpty && loaded.warning?.contains("kept as") == true)
        #expect(!FileManager.default.fileExists(atPath: store.file.path))
    }

    /// A full disk while saving: the save fails with a clear error and the previous file is intact.
    @Test func aFullDiskLeavesThePreviousStateIntact() throws {
        guard getuid() == 0 else { print("skipped: mounting a small tmpfs needs root"); return }
        let dir = try temporaryDirectory()
        defer { _ = try? Sotto.run([dir.path], launcher: "/usr/bin/umount"); try? FileManager.default.removeItem(at: dir) }
        let mount = try Sotto.run(["-t", "tmpfs", "-o", "size=64k", "tmpfs", dir.path], launcher: "/usr/bin/mount")
        guard mount.status == 0 else { print("skipped: cannot mount a tmpfs here (\(mount.stderr))"); return }
        let store = OperationStore(file: dir.appendingPathComponent("operations.json"))
        let small = [SavedOperation(id: "0123456789ab", spec: OperationSpec(kind: .subscribe, persistent: true), expiresAt: nil)]
        try store.save(small)
        let before = try Data(contentsOf: store.file)
        // Fill the rest of the disk.
        let filler = dir.appendingPathComponent("filler")
        #expect(FileManager.default.createFile(atPath: filler.path, contents: nil))
        let handle = try FileHandle(forWritingTo: filler)
        while (try? handle.write(contentsOf: Data(count: 4096))) != nil {}
        try? handle.close()
        let big = (0..<200).map { SavedOperation(id: String(format: "%012x", $0), spec: OperationSpec(kind: .publish, content: String(repeating: "ab", count: 100), ttl: 60, persistent: true), expiresAt: 1e10) }
        #expect(throws: DaemonError.self) { try store.save(big) }
        do { try store.save(big) } catch { #expect(error.description.contains("previous state is kept"), "\(error)") }
        #expect(try Data(contentsOf: store.file) == before)
        #expect(store.load().operations == small)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["filler", "operations.json"])
    }
}

extension DaemonTests {
    /// A device busy when the first operation starts (another program holds it): the operation is accepted
    /// and waits, the fault is reported, and it runs (and hears) once the device can be opened.
    @Test func aBusyDeviceIsWaitedFor() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        try Self.audioBytes("hi").write(to: rig.audio.faultyInput)
        try rig.audio.setRefusal(EBUSY)
        let daemon = try await rig.startDaemon()
        defer { daemon.process.terminate() }
        let watch = try BackgroundSotto(["ops", "watch", "--format", "json"], environment: rig.environment)
        defer { watch.process.terminate() }
        try await Task.sleep(for: .milliseconds(300))
        let subscribe = try rig.run(["subscribe", "--daemon"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let fault = await watch.line(timeout: 10) { $0.contains(#""notice":"device""#) && $0.contains(#""status":"fault""#) }
        #expect(fault?.contains("busy") == true, "\(watch.output) \(daemon.standardError)")
        #expect(try rig.operations().first?.status.hasPrefix("waiting: device") == true)
        try rig.audio.setRefusal(nil)
        #expect(await watch.line(timeout: 10) { $0.contains(#""status":"running""#) } != nil, "\(watch.output)")
        #expect(await watch.line(timeout: 10) { $0.contains(#""event":"found""#) && $0.contains(#""text":"hi""#) } != nil, "\(watch.output)")
        #expect(try rig.operations().first?.status == "running")
        #expect(await daemon.terminate() == 0)
    }
}

/// The daemon with a matcher service, end to end: a persistent subscription in the daemon, a publisher's
/// token through a simulated room into the daemon's capture PCM, the find on `ops watch` with its group and
/// as a grouped desktop notification recorded on a session bus the test starts; then the daemon killed
/// (`kill -9`), started again, and the same again (watch and notification) without any new command.
@Suite(.serialized) struct DaemonServiceEndToEndTests {
    @Test(.timeLimit(.minutes(3))) func aPersistentSubscriptionFindsThroughTheServiceAcrossARestart() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let notifications = try RecordingNotificationServer(address: bus.address)
        defer { notifications.stop() }
        var rig = try DaemonRig()
        rig.extraEnvironment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        defer { rig.remove() }
        let directory = rig.directory
        let store = directory.appendingPathComponent("exchange.sqlite").path
        func admin(_ arguments: [String]) throws -> String {
            let result = try Sotto.run(["admin"] + arguments + ["--store", "sqlite:" + store], timeout: 30)
            #expect(result.status == 0, "\(result.stderr)")
            return result.stdout.split(separator: "\n").first.map(String.init) ?? ""
        }
        _ = try admin(["project", "create", "museum"])
        let key = try admin(["key", "create", "museum"])
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")

        let plugin = FilePluginRig.faultPlugin.path
        let speaker = directory.appendingPathComponent("publisher-speaker.raw"), room = directory.appendingPathComponent("room.raw")
        var asoundrc = "pcm_type.sottofault { lib \"\(plugin)\" }\n"
        asoundrc += "pcm.a_speaker { type sottofault; rate 48000; outfile \"\(speaker.path)\" }\n"
        asoundrc += "pcm.a_microphone { type sottofault; rate 48000 }\n"
        asoundrc += "pcm.d_microphone { type sottofault; rate 48000; infile \"\(room.path)\" }\n"
        asoundrc += "pcm.d_speaker { type sottofault; rate 48000; outfile \"\(directory.path)/d-speaker.raw\" }\n"
        let configuration = directory.appendingPathComponent("asoundrc")
        try Data(asoundrc.utf8).write(to: configuration)
        var environment = rig.environment
        environment["ALSA_CONFIG_PATH"] = configuration.path

        let message = "Gallery 2: The Night Watch"
        let publisher = try BackgroundSotto(["publish", "--server", address, "--api-key", key, "--namespace", "museum", "--type", "exhibit",
                                             "--text", message, "--ttl", "150", "--device", "a_speaker", "--capture-device", "a_microphone",
                                             "--interval", "1", "--jitter", "0.25"], environment: environment)
        defer { publisher.process.terminate() }
        var played: [[UInt8]] = []
        let playDeadline = Date(timeIntervalSinceNow: 30)
        while played.count < 3 && Date() < playDeadline {
            try await Task.sleep(for: .milliseconds(500))
            played = try ServiceEndToEndTests.tokens(inRaw: speaker)
        }
        #expect(played.count >= 3, "\(publisher.standardError)")
        let samples = FilePluginRig.samples(try Data(contentsOf: speaker)).map { Float($0) / 32_768 }
        let speakerWav = directory.appendingPathComponent("speaker.wav").path, roomWav = directory.appendingPathComponent("room.wav").path
        try AudioFile.write(samples, sampleRate: 48_000, to: speakerWav, format: .wav16)
        #expect(try Sotto.run(["simulate", speakerWav, roomWav, "--rt60", "0.4", "--distance", "2", "--snr", "15", "--ppm", "120", "--seed", "9"],
                              timeout: 60).status == 0)
        try FilePluginRig.raw(try AudioFileReader(path: roomWav).readAll()).write(to: room)

        // The key reaches the daemon through its environment, never its command line.
        environment["SOTTO_API_KEY"] = key
        func startDaemon() async throws -> BackgroundSotto {
            let daemon = try BackgroundSotto(["daemon", "--server", address, "--capture-device", "d_microphone", "--playback-device", "d_speaker"],
                                             environment: environment)
            let deadline = Date(timeIntervalSinceNow: 20)
            while Date() < deadline, (try? ControlClient(path: rig.paths.socket).call(.list, timeout: 2)) == nil { try await Task.sleep(for: .milliseconds(50)) }
            return daemon
        }
        let contentHex = OperationSpec.hex(Array(message.utf8))
        var daemon = try await startDaemon()
        var watch = try BackgroundSotto(["ops", "watch", "--format", "json"], environment: environment)
        try await Task.sleep(for: .milliseconds(300))
        let subscribe = try Sotto.run(["subscribe", "--daemon", "--persistent", "--namespace", "museum", "--type", "exhibit", "--group", "museum",
                                       "--lost-timeout", "60"], environment: environment, timeout: 30)
        #expect(subscribe.status == 0, "\(subscribe.stderr) \(daemon.standardError)")
        var found = await watch.line(timeout: 40) { $0.contains(#""event":"found""#) }
        #expect(found?.contains(contentHex) == true && found?.contains(#""group":"museum""#) == true, "\(watch.output) \(daemon.standardError)")
        // The find as a desktop notification of the subscription's group (dunst's stack tag; GNOME and KDE group
        // by desktop-entry), its summary naming the namespace and type.
        func notified(after earlier: Int) async -> RecordingNotificationServer.Notify? {
            let shown = await notifications.wait(timeout: 20) { record in
                record.notifies.dropFirst(earlier).contains { $0.body.contains(message) }
            }
            guard shown else { return nil }
            return notifications.notifies.dropFirst(earlier).first { $0.body.contains(message) }
        }
        let first = await notified(after: 0)
        #expect(first?.hints["x-dunst-stack-tag"] == .string("sotto-museum") && first?.summary == "Sotto: museum/exhibit"
                && first?.hints["desktop-entry"] != nil, "\(notifications.notifies) \(daemon.standardError)")
        await watch.interrupt()

        // Killed (nothing closes cleanly), then started again: the subscription is back from the state file and
        // the message is found and notified again in its group, with no new command.
        kill(daemon.process.processIdentifier, SIGKILL)
        #expect(await daemon.waitForExit(timeout: 10))
        let before = notifications.notifies.count
        daemon = try await startDaemon()
        defer { daemon.process.terminate() }
        watch = try BackgroundSotto(["ops", "watch", "--format", "json"], environment: environment)
        defer { watch.process.terminate() }
        #expect(await daemon.saidOnStandardError("restored 1 persistent operation(s)"), "\(daemon.standardError)")
        found = await watch.line(timeout: 40) { $0.contains(#""event":"found""#) }
        #expect(found?.contains(contentHex) == true && found?.contains(#""group":"museum""#) == true, "\(watch.output) \(daemon.standardError)")
        let again = await notified(after: before)
        #expect(again?.hints["x-dunst-stack-tag"] == .string("sotto-museum") && again?.summary == "Sotto: museum/exhibit",
                "\(notifications.notifies) \(daemon.standardError)")
        // The service goes away: watchers see the matcher's disconnection, and the daemon keeps running.
        await publisher.interrupt()
        await serve.interrupt()
        let gone = await watch.line(timeout: 20) { $0.contains(#""notice":"matcher""#) && $0.contains(#""status":"disconnected""#) }
        #expect(gone != nil, "\(watch.output)")
        #expect(try rig.operations().count == 1)
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
        await watch.interrupt()
    }
}
