import Foundation
import SottoDaemon
@testable import SottoNotify
import SottoTools
import Testing

/// The repo's systemd user units as a person uses them, with a real systemd user manager: the units are
/// checked by `systemd-analyze verify`, then enabled with `systemctl --user`; the first client starts the
/// daemon through the socket (socket activation), a `kill -9` is followed by systemd's restart with the
/// persistent subscription restored, and a new manager (a new login or boot) starts the daemon by itself,
/// which restores the subscription, hears with it and shows a grouped desktop notification (on the manager's
/// user bus, through a recording notification server that comes up after the daemon), without any new command.
///
/// The manager runs in a PID and mount namespace of its own (`unshare --pid --mount`): `/run` there is a
/// private tmpfs holding `/run/systemd/system` (a user manager refuses to start without it, and the machine's
/// own `/run` is never touched); everything of the user (units, configuration, runtime and state directories)
/// is in the test's temporary directory; killing `unshare` ends the namespace and everything in it.
/// `systemctl` runs inside that namespace (`nsenter`): the manager drops bus clients whose pid it cannot see.
/// Only a user manager is run, never systemd as a system manager: that one would run the machine's boot
/// jobs (systemd-tmpfiles --boot cleans /tmp) on the shared filesystem.
@Suite(.serialized) struct SystemdUserDaemonTests {
    static let systemd = "/lib/systemd/systemd", systemctl = "/usr/bin/systemctl", analyze = "/usr/bin/systemd-analyze"
    static let unshare = "/usr/bin/unshare", nsenter = "/usr/bin/nsenter"

    /// The units as `scripts/install --daemon` installs them (`@BINDIR@` filled in) into `directory`.
    static func installUnits(into directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("systemd")
        let bindir = Sotto.executable.deletingLastPathComponent().path
        for unit in ["sotto.service", "sotto.socket"] {
            let text = try String(contentsOf: source.appendingPathComponent(unit), encoding: .utf8)
            try Data(text.replacingOccurrences(of: "@BINDIR@", with: bindir).utf8).write(to: directory.appendingPathComponent(unit))
        }
    }

    /// `systemd-analyze --user verify` accepts both units with no warning at all (an unknown or misspelt key
    /// is only a warning to it), and refuses a unit whose command does not exist (so it really checks).
    @Test func theUnitsPassSystemdAnalyzeVerify() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.analyze) else { print("skipped: no \(Self.analyze)"); return }
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try Self.installUnits(into: directory)
        let environment = ["HOME": directory.path, "XDG_RUNTIME_DIR": directory.path, "SYSTEMD_LOG_COLOR": "0"]
        let units = ["sotto.service", "sotto.socket"].map { directory.appendingPathComponent($0).path }
        let verified = try Sotto.run(["--user", "verify"] + units, environment: environment, timeout: 30, launcher: Self.analyze)
        #expect(verified.status == 0 && verified.stdout.isEmpty && verified.stderr.isEmpty, "\(verified.stdout)\(verified.stderr)")

        let broken = directory.appendingPathComponent("broken.service")
        let text = try String(contentsOf: directory.appendingPathComponent("sotto.service"), encoding: .utf8)
        try Data(text.replacingOccurrences(of: Sotto.executable.deletingLastPathComponent().path, with: "/nonexistent").utf8).write(to: broken)
        let refused = try Sotto.run(["--user", "verify", broken.path], environment: environment, timeout: 30, launcher: Self.analyze)
        #expect(refused.status != 0 && refused.stderr.contains("/nonexistent/sotto"), "\(refused.stderr)")
    }

    /// A user manager of its own (see the suite), with the rig's user; nil (printed why) where none can run.
    final class UserManager {
        let process: SpawnedProcess
        let rig: DaemonRig
        /// A process in the manager's namespaces (the namespace's init), for `nsenter`.
        private(set) var inside: pid_t = 0

        init?(rig: DaemonRig) async throws {
            self.rig = rig
            let script = "mount -t tmpfs -o mode=755 tmpfs /run && mkdir -p /run/systemd/system && \(SystemdUserDaemonTests.systemd) --user --log-target=null & wait"
            process = try SpawnedProcess(SystemdUserDaemonTests.unshare,
                                         ["--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc", "--kill-child", "/bin/sh", "-c", script],
                                         environment: rig.environment, directory: rig.directory)
            let bus = rig.runtime.appendingPathComponent("systemd/private")
            let deadline = Date(timeIntervalSinceNow: 30)
            while Date() < deadline && process.isRunning {
                if inside == 0, let children = try? String(contentsOfFile: "/proc/\(process.pid)/task/\(process.pid)/children", encoding: .utf8),
                   let first = children.split(separator: " ").first.flatMap({ pid_t($0) }) {
                    inside = first
                }
                if inside != 0, FileManager.default.fileExists(atPath: bus.path),
                   let running = try? systemctl(["is-system-running"]), ["running", "degraded"].contains(running.stdout.trimmed) {
                    return
                }
                try await Task.sleep(for: .milliseconds(100))
            }
            print("skipped: a systemd user manager did not start here: \(process.standardError)")
            process.kill9()
            return nil
        }

        /// `systemctl --user ARGUMENTS` inside the manager's namespaces.
        func systemctl(_ arguments: [String]) throws -> Sotto.Result {
            try Sotto.run(["-t", "\(inside)", "-p", "-m", SystemdUserDaemonTests.systemctl, "--user", "--no-pager"] + arguments,
                          environment: rig.environment, timeout: 30, launcher: SystemdUserDaemonTests.nsenter)
        }

        /// A property of a unit (`systemctl show -p NAME --value`).
        func property(_ name: String, of unit: String = "sotto.service") -> String {
            ((try? systemctl(["show", "-p", name, "--value", unit]))?.stdout.trimmed) ?? ""
        }

        /// Waits (at most `timeout` s) until `sotto.service` is active with a main process.
        func waitForDaemon(timeout: Double = 30) async -> pid_t? {
            let deadline = Date(timeIntervalSinceNow: timeout)
            while Date() < deadline {
                if property("ActiveState") == "active", let pid = pid_t(property("MainPID")), pid > 0 { return pid }
                try? await Task.sleep(for: .milliseconds(200))
            }
            return nil
        }

        /// `systemctl --user status sotto.service`, for messages.
        var status: String { ((try? systemctl(["status", "sotto.service"])).map { $0.stdout + $0.stderr }) ?? "" }

        /// Ends the manager and everything it started (as a logout or a power cut would).
        func end() { process.kill9() }
    }

    @Test(.timeLimit(.minutes(3))) func aRealUserManagerStartsRestartsAndRestoresTheDaemon() async throws {
        for tool in [Self.systemd, Self.systemctl, Self.unshare, Self.nsenter, "/bin/sh"] where !FileManager.default.isExecutableFile(atPath: tool) {
            print("skipped: no \(tool)"); return
        }
        guard getuid() == 0 else { print("skipped: a PID and mount namespace of its own needs root"); return }
        var rig = try DaemonRig()
        defer { rig.remove() }
        // The user: HOME/.config is XDG_CONFIG_HOME (consent, daemon.env, the units), as on a desktop.
        let home = rig.directory.appendingPathComponent("home")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: home.appendingPathComponent(".config"), withDestinationURL: rig.config)
        rig.extraEnvironment["HOME"] = home.path
        try Self.installUnits(into: rig.config.appendingPathComponent("systemd/user"))
        try Data("SOTTO_DAEMON_OPTIONS=--capture-device sotto_faulty_capture --playback-device sotto_faulty_playback --retry-interval 0.2\n".utf8)
            .write(to: rig.config.appendingPathComponent("sotto/daemon.env"))

        guard var manager = try await UserManager(rig: rig) else { return }
        defer { manager.end() }
        // As the README says: enable --now the socket and the service... first the socket alone, so that the
        // daemon is started by a client's connection.
        let socket = try manager.systemctl(["enable", "--now", "sotto.socket"])
        #expect(socket.status == 0, "\(socket.stderr)")
        #expect(FileManager.default.fileExists(atPath: rig.paths.socket.path))
        #expect(manager.property("ActiveState") == "inactive")
        let subscribe = try rig.run(["subscribe", "--daemon", "--persistent", "--group", "door", "--lost-timeout", "3"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let id = subscribe.stdout.trimmed
        guard let first = await manager.waitForDaemon() else {
            Issue.record("systemd did not start sotto.service: \(manager.status)")
            return
        }
        #expect(manager.property("TriggeredBy") == "sotto.socket")
        #expect(try rig.operations().map(\.id) == [id])
        let service = try manager.systemctl(["enable", "sotto.service"])
        #expect(service.status == 0, "\(service.stderr)")

        // kill -9: systemd restarts it (Restart=on-failure, 5 s later) and the subscription is restored.
        // (pids are the namespace's: the kill goes through systemd.)
        let killed = try manager.systemctl(["kill", "--signal=KILL", "sotto.service"])
        #expect(killed.status == 0, "\(killed.stderr)")
        let deadline = Date(timeIntervalSinceNow: 40)
        var second: pid_t?
        while Date() < deadline {
            if let pid = await manager.waitForDaemon(timeout: 1), pid != first { second = pid; break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(second != nil && manager.property("NRestarts") == "1", "\(manager.status)")
        #expect(try rig.operations().map(\.id) == [id])

        // A new login (or boot): a new manager starts the enabled daemon by itself (no client connects until
        // it runs), which restores the subscription; the capture device then plays a frame and the restored
        // subscription hears it.
        manager.end()
        try Self.restartAudio(rig, with: "hi")
        guard let next = try await UserManager(rig: rig) else { Issue.record("the second user manager did not start"); return }
        manager = next
        guard await manager.waitForDaemon() != nil else {
            Issue.record("sotto.service did not start with the manager: \(manager.status)")
            return
        }
        // The desktop's notification server comes up after the daemon, on the user bus of the manager
        // (dbus.socket: $XDG_RUNTIME_DIR/bus, which the manager gives its services): one that records.
        let notifications = try RecordingNotificationServer(address: "unix:path=\(rig.runtime.path)/bus")
        defer { notifications.stop() }
        let watch = try BackgroundSotto(["ops", "watch", id, "--format", "json"], environment: rig.environment)
        defer { watch.process.terminate() }
        #expect(try rig.operations().map(\.id) == [id])
        // The paced capture PCM plays its input from each open: unplug and replug it so that the frame is
        // played once the watch is connected.
        try await Task.sleep(for: .milliseconds(300))
        try rig.audio.setUnplugged(true)
        _ = await watch.line(timeout: 20) { $0.contains(#""notice":"device""#) && $0.contains(#""status":"fault""#) }
        try rig.audio.setUnplugged(false)
        let found = await watch.line(timeout: 30) { $0.contains(#""event":"found""#) }
        #expect(found?.contains(#""text":"hi""#) == true && found?.contains(#""group":"door""#) == true, "\(watch.output)")
        // ...and the user sees it: a desktop notification of the subscription's group.
        let shown = await notifications.wait(timeout: 20) { $0.notifies.contains { $0.body.contains("hi") } }
        #expect(shown, "\(notifications.notifies) \(manager.status)")
        let notify = notifications.notifies.first { $0.body.contains("hi") }
        #expect(notify?.hints["x-dunst-stack-tag"] == .string("sotto-door"), "\(String(describing: notify?.hints))")

        // systemctl --user stop: SIGTERM, a clean end; the subscription stays saved.
        let stop = try manager.systemctl(["stop", "sotto.service"])
        #expect(stop.status == 0 && manager.property("ActiveState") == "inactive" && manager.property("Result") == "success", "\(stop.stderr)")
        #expect(try String(contentsOf: rig.paths.operations, encoding: .utf8).contains(id))
        // The daemon's stop leaves systemd's listening socket working (a shutdown(2) of it failed the unit).
        #expect(manager.property("SubState", of: "sotto.socket") == "listening", "\(manager.property("SubState", of: "sotto.socket"))")

        // The socket stays systemd's: a daemon started by hand meanwhile is refused with the reason (it does not
        // replace the socket file), and the daemon runs through the socket again.
        let byHand = try rig.run(["daemon", "--device", "sotto_faulty_capture"], timeout: 20)
        #expect(byHand.status == 2 && byHand.stderr.contains("sotto.socket"), "\(byHand.stderr)")
        #expect(await manager.waitForDaemon(timeout: 30) != nil, "\(manager.status)")
        var listed: [String]?
        let again = Date(timeIntervalSinceNow: 30)
        while listed == nil && Date() < again {
            listed = (try? rig.operations())?.map(\.id)
            if listed == nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(listed == [id], "\(manager.status)")

        // A usage error in daemon.env: the unit fails with the daemon's status 64 and is not restarted in a
        // loop (RestartPreventExitStatus: after a failure that systemd retries, it is in auto-restart instead).
        try Data("SOTTO_DAEMON_OPTIONS=--no-such-option\n".utf8).write(to: rig.config.appendingPathComponent("sotto/daemon.env"))
        _ = try manager.systemctl(["restart", "sotto.service"])
        let failing = Date(timeIntervalSinceNow: 30)
        while manager.property("ActiveState") != "failed" && Date() < failing { try await Task.sleep(for: .milliseconds(200)) }
        #expect(manager.property("SubState") == "failed" && manager.property("ExecMainStatus") == "64", "\(manager.status)")
        await watch.interrupt()
    }

    /// Writes a frame carrying `text` (after half a second of silence) as the capture PCM's input.
    static func restartAudio(_ rig: DaemonRig, with text: String) throws {
        try DaemonTests.audioBytes(text).write(to: rig.audio.faultyInput)
    }
}

private extension String {
    var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}
