import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SottoDaemon
import SottoExchange
import SottoExchangeCore
import Testing

/// A Unix datagram socket the test binds, standing in for the journal's native socket: it receives what a
/// client sends there, as journald would.
final class DatagramReceiver: @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let lock = NSLock()
    private var closed = false

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw POSIXError(.ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: bytes); raw[bytes.count] = 0 }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { Glibc.close(fd); throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    /// The next datagram, waiting at most `timeout` s (polled without blocking, every 20 ms).
    func receive(timeout: Double) async -> [UInt8]? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var buffer = [UInt8](repeating: 0, count: 262_144)
        while Date() < deadline {
            let n = lock.withLock { closed ? -1 : buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) } }
            if n > 0 { return Array(buffer[0..<n]) }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    /// Closes the socket and removes its file: sends to it fail from now on.
    func close() {
        lock.withLock {
            guard !closed else { return }
            closed = true
            Glibc.close(fd)
            unlink(path)
        }
    }
}

/// Journal entries in the native protocol, directly: the fields of an event, and the datagram's encoding.
@Suite struct JournalEntryTests {
    @Test func anEventsFieldsAreJournalFields() throws {
        let message = try Message(namespace: "museum", type: "exhibit", content: Array("hi".utf8))
        let found = DaemonEvent(kind: .subscription(.found(message), time: 1.5), operation: "0123456789ab", group: "door")
        let entry = JournalEntry(event: found)
        #expect(entry["MESSAGE"] == "0123456789ab  found  museum/exhibit  \"hi\"")
        #expect(entry["PRIORITY"] == "6" && entry["SYSLOG_IDENTIFIER"] == "sotto")
        #expect(entry["SOTTO_RECORD"] == "event" && entry["SOTTO_EVENT"] == "found" && entry["SOTTO_GROUP"] == "door")
        #expect(entry["SOTTO_OPERATION"] == "0123456789ab" && entry["SOTTO_TEXT"] == "hi" && entry["SOTTO_CONTENT"] == "6869")
        #expect(entry["SOTTO_NAMESPACE"] == "museum" && entry["SOTTO_TYPE"] == "exhibit" && entry["SOTTO_TIME"] == "1.5")
        #expect(entry["SOTTO_JSON"] == found.jsonLine)
        #expect(entry.fields.allSatisfy { JournalEntry.isValidFieldName($0.name) })
        #expect(JournalEntry(datagram: entry.datagram) == entry)

        let fault = JournalEntry(event: DaemonEvent(kind: .device(fault: "unplugged")))
        #expect(fault["PRIORITY"] == "4" && fault["SOTTO_NOTICE"] == "device" && fault["SOTTO_STATUS"] == "fault" && fault["SOTTO_DETAIL"] == "unplugged")
        #expect(JournalEntry(event: DaemonEvent(kind: .device(fault: nil)))["PRIORITY"] == "6")

        // 100 KB of content: the large values are left out and named, the entry stays small.
        let big = try Message(namespace: "n", type: "t", content: [UInt8](repeating: 0x41, count: 100_000))
        let large = JournalEntry(event: DaemonEvent(kind: .subscription(.found(big), time: 0), operation: "0123456789ab", group: "g"))
        #expect(large["SOTTO_OMITTED"] == "SOTTO_CONTENT,SOTTO_TEXT,SOTTO_JSON" && large["SOTTO_CONTENT"] == nil && large["SOTTO_EVENT"] == "found")
        #expect(large.datagram.count < 4_096)
    }

    @Test func theDatagramEncodesNewlinesWithALengthAndSkipsBadNames() {
        let entry = JournalEntry(fields: [.init("MESSAGE", "two\nlines"), .init("A", "b"), .init("_PID", "1"), .init("lower", "x"),
                                          .init("9X", "x"), .init("", "x")])
        let bytes = entry.datagram
        #expect(bytes == Array("MESSAGE\n".utf8) + [9, 0, 0, 0, 0, 0, 0, 0] + Array("two\nlines\nA=b\n".utf8))
        #expect(JournalEntry(datagram: bytes) == JournalEntry(fields: [.init("MESSAGE", "two\nlines"), .init("A", "b")]))
        #expect(JournalEntry(datagram: Array("A=b".utf8)) == nil)
        #expect(JournalEntry(datagram: Array("A\n".utf8) + [200, 0, 0, 0, 0, 0, 0, 0] + Array("x\n".utf8)) == nil)
        #expect(JournalEntry.isValidFieldName("SOTTO_EVENT") && !JournalEntry.isValidFieldName(String(repeating: "A", count: 65)))
    }

    @Test func journalStreamMustNameStandardOutput() {
        #expect(Journal.matches("8:12345", device: 8, inode: 12_345))
        #expect(!Journal.matches("8:12346", device: 8, inode: 12_345))
        #expect(!Journal.matches("8", device: 8, inode: 12_345) && !Journal.matches("x:y", device: 8, inode: 12_345) && !Journal.matches("", device: 0, inode: 0))
        #expect(!Journal.standardOutputIsJournal(environment: [:]))
        #expect(!Journal.standardOutputIsJournal(environment: ["JOURNAL_STREAM": "0:0"]))
        #expect(Journal.socket(environment: [:]) == Journal.defaultSocket && Journal.socket(environment: ["SOTTO_JOURNAL_SOCKET": "/x"]) == "/x")
    }
}

/// `sotto daemon --events json` on a headless machine: every event as a JSON Lines record on standard output;
/// under systemd (standard output is the journal: JOURNAL_STREAM names it) as journal entries with their fields
/// on the journal's socket, and back to standard output when the journal does not take them.
extension DaemonNotificationTests {
    @Test func eventsJsonPrintsEveryEventAsARecord() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let daemon = try await rig.startDaemon(["--notify", "none", "--events", "json"])
        defer { daemon.process.terminate() }
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door", "--lost-timeout", "2"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let id = subscribe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let lost = await daemon.line(timeout: 20) { $0.contains(#""event":"lost""#) }
        #expect(lost?.contains(#""group":"door""#) == true && lost?.contains(#""operation":"\#(id)""#) == true, "\(daemon.output) \(daemon.standardError)")
        let found = daemon.output.first { $0.contains(#""event":"found""#) }
        #expect(found?.contains(#""text":"hi""#) == true && found?.contains(#""group":"door""#) == true, "\(daemon.output)")
        #expect(daemon.output.contains { $0.contains(#""notice":"operation""#) && $0.contains(#""status":"started""#) }, "\(daemon.output)")
        #expect(await daemon.terminate() == 0, "\(daemon.standardError)")
        for line in daemon.output { _ = try JSONLinesSchemaTests.validate(Substring(line)) }
        #expect(try rig.run(["daemon", "--events", "xml"], timeout: 10).status == 64)
    }

    @Test func eventsGoToTheJournalWhenStandardOutputIsTheJournal() async throws {
        let rig = try DaemonRig()
        defer { rig.remove() }
        try DaemonTests.audioBytes("hi").write(to: rig.audio.faultyInput)
        let journal = try DatagramReceiver(path: rig.directory.appendingPathComponent("journal.socket").path)
        defer { journal.close() }
        // Standard output is a file whose device and inode JOURNAL_STREAM names, as systemd names its stream.
        let out = rig.directory.appendingPathComponent("stdout")
        #expect(FileManager.default.createFile(atPath: out.path, contents: nil))
        let attributes = try FileManager.default.attributesOfItem(atPath: out.path)
        let device = try #require(attributes[.systemNumber] as? NSNumber), inode = try #require(attributes[.systemFileNumber] as? NSNumber)
        var environment = rig.environment
        environment["JOURNAL_STREAM"] = "\(device.uint64Value):\(inode.uint64Value)"
        environment["SOTTO_JOURNAL_SOCKET"] = journal.path
        let daemon = try SpawnedProcess(Sotto.executable.path, ["daemon", "--capture-device", "sotto_faulty_capture", "--playback-device",
                                                                "sotto_faulty_playback", "--notify", "none", "--events", "json"],
                                        environment: environment, directory: rig.directory, standardOutput: out)
        defer { daemon.kill9() }
        #expect(await daemon.saidOnStandardError("sotto daemon listening", timeout: 20), "\(daemon.standardError)")
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", "door", "--lost-timeout", "2"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        var entries: [JournalEntry] = []
        let deadline = Date(timeIntervalSinceNow: 20)
        while !entries.contains(where: { $0["SOTTO_EVENT"] == "found" }) && Date() < deadline {
            if let datagram = await journal.receive(timeout: 0.5), let entry = JournalEntry(datagram: datagram) { entries.append(entry) }
        }
        let found = entries.first { $0["SOTTO_EVENT"] == "found" }
        #expect(found?["SOTTO_GROUP"] == "door" && found?["SOTTO_TEXT"] == "hi" && found?["SYSLOG_IDENTIFIER"] == "sotto"
                && found?["MESSAGE"]?.contains("found") == true, "\(entries) \(daemon.standardError)")
        #expect(entries.contains { $0["SOTTO_NOTICE"] == "operation" && $0["SOTTO_STATUS"] == "started" }, "\(entries)")
        #expect(((try? String(contentsOf: out, encoding: .utf8)) ?? "").isEmpty)

        // The journal goes away: the next event (the cancellation's notice) is a line on standard output, with
        // one warning.
        journal.close()
        let id = subscribe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try rig.run(["ops", "cancel", id]).status == 0)
        #expect(await daemon.saidOnStandardError("did not take an event", timeout: 20), "\(daemon.standardError)")
        func printed() -> String { (try? String(contentsOf: out, encoding: .utf8)) ?? "" }
        let deadline2 = Date(timeIntervalSinceNow: 10)
        while !printed().contains(#""status":"ended""#) && Date() < deadline2 { try await Task.sleep(for: .milliseconds(50)) }
        let ended = printed().split(separator: "\n").first { $0.contains(#""status":"ended""#) }
        #expect(ended?.contains(#""operation":"\#(id)""#) == true && ended?.contains(#""detail":"cancelled""#) == true, "\(printed())")
        #expect(await daemon.stop(SIGTERM) == 0, "\(daemon.standardError)")
    }
}

extension DaemonNotificationTests {
    /// The journal form against a real journal: a systemd-journald of a namespace of its own (journald 252
    /// serves a namespace outside systemd, on /run/systemd/journal.NAMESPACE/socket, as root), the daemon's
    /// entries read back with `journalctl --namespace`, selected by their SOTTO_* fields.
    @Test func eventsAreEntriesOfARealJournal() async throws {
        let journald = "/lib/systemd/systemd-journald", journalctl = "/usr/bin/journalctl"
        guard getuid() == 0, [journald, journalctl].allSatisfy(FileManager.default.isExecutableFile(atPath:)) else {
            print("skipped: a journald of its own needs root and systemd-journald and journalctl")
            return
        }
        let rig = try DaemonRig()
        defer { rig.remove() }
        let namespace = "sottotest" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let machine = ((try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let server = try SpawnedProcess(journald, [namespace], environment: [:], directory: rig.directory)
        defer {
            server.kill9()
            try? FileManager.default.removeItem(atPath: "/run/systemd/journal.\(namespace)")
            if !machine.isEmpty { try? FileManager.default.removeItem(atPath: "/var/log/journal/\(machine).\(namespace)") }
        }
        let socket = "/run/systemd/journal.\(namespace)/socket"
        let up = Date(timeIntervalSinceNow: 10)
        while !FileManager.default.fileExists(atPath: socket) && server.isRunning && Date() < up { try await Task.sleep(for: .milliseconds(20)) }
        guard FileManager.default.fileExists(atPath: socket) else {
            print("skipped: systemd-journald \(namespace) did not start here: \(server.standardError)")
            return
        }
        let out = rig.directory.appendingPathComponent("stdout")
        #expect(FileManager.default.createFile(atPath: out.path, contents: nil))
        let attributes = try FileManager.default.attributesOfItem(atPath: out.path)
        let device = try #require(attributes[.systemNumber] as? NSNumber), inode = try #require(attributes[.systemFileNumber] as? NSNumber)
        var environment = rig.environment
        environment["JOURNAL_STREAM"] = "\(device.uint64Value):\(inode.uint64Value)"
        environment["SOTTO_JOURNAL_SOCKET"] = socket
        let daemon = try SpawnedProcess(Sotto.executable.path, ["daemon", "--capture-device", "sotto_faulty_capture", "--playback-device",
                                                                "sotto_faulty_playback", "--notify", "none", "--events", "json"],
                                        environment: environment, directory: rig.directory, standardOutput: out)
        defer { daemon.kill9() }
        #expect(await daemon.saidOnStandardError("sotto daemon listening", timeout: 20), "\(daemon.standardError)")
        let subscribe = try rig.run(["subscribe", "--daemon", "--group", namespace])
        let id = subscribe.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        #expect(try rig.run(["ops", "cancel", id]).status == 0)

        var entries: [[String: Any]] = []
        let deadline = Date(timeIntervalSinceNow: 15)
        while entries.count < 2 && Date() < deadline {
            try await Task.sleep(for: .milliseconds(200))
            // Spawned and reaped by the test, as systemd's own tools may close the descriptors they inherit.
            let read = try SpawnedProcess(journalctl, ["--namespace=\(namespace)", "SOTTO_GROUP=\(namespace)", "-o", "json", "--no-pager"],
                                          environment: [:], directory: rig.directory)
            _ = await read.waitForExit(timeout: 10)
            read.kill9()
            let text = (try? String(contentsOf: read.standardOutputFile, encoding: .utf8)) ?? ""
            entries = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
        let statuses = entries.compactMap { $0["SOTTO_STATUS"] as? String }
        #expect(statuses == ["started", "ended"], "\(entries) \(daemon.standardError)")
        let ended = entries.last
        #expect(ended?["SOTTO_OPERATION"] as? String == id && ended?["SOTTO_DETAIL"] as? String == "cancelled"
                && ended?["SYSLOG_IDENTIFIER"] as? String == "sotto" && ended?["PRIORITY"] as? String == "6"
                && ended?["MESSAGE"] as? String == "\(id)  operation ended: cancelled", "\(entries)")
        #expect(((try? String(contentsOf: out, encoding: .utf8)) ?? "").isEmpty)
        #expect(await daemon.stop(SIGTERM) == 0, "\(daemon.standardError)")
    }
}
