import Foundation
import Testing
@testable import SottoNotify

/// The headless sink: one command per event by posix_spawn, fields in the environment, content on stdin.
@Suite(.timeLimit(.minutes(1))) struct ExecSinkTests {
    func directory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-exec-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    func environment(in file: URL) throws -> [String: String] {
        let text = try String(contentsOf: file, encoding: .utf8)
        var result: [String: String] = [:]
        for record in text.split(separator: "\0") {
            guard let equals = record.firstIndex(of: "=") else { continue }
            result[String(record[..<equals])] = String(record[record.index(after: equals)...])
        }
        return result
    }

    @Test func theEventsFieldsArriveInTheEnvironmentAndNeverThroughAShell() async throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let envFile = dir.appendingPathComponent("env"), stdinFile = dir.appendingPathComponent("stdin")
        // The script writes what it was given; no field is ever part of a command line.
        let script = dir.appendingPathComponent("hook")
        try "#!/bin/sh\n/usr/bin/env -0 > \"$1\"\ncat > \"$2\"\n".write(to: script, atomically: true, encoding: .utf8)
        // Run through /bin/sh: executing a file this process just wrote can fail with ETXTBSY while a parallel
        // test forks.
        let sink = try ExecSink(command: ["/bin/sh", script.path, envFile.path, stdinFile.path], timeout: 5)
        let hostile = "$(touch \(dir.path)/pwned); `touch \(dir.path)/pwned2` \"'\n"
        let event = NotificationEvent(kind: .found, groupKey: "g; rm -rf /", subscriptionID: "sub-9", title: "T",
                                      namespace: "ns", type: "ty", content: Array(hostile.utf8),
                                      foundAt: Date(timeIntervalSince1970: 1_800_000_000.25))
        #expect(try await sink.deliver(event) == 0)
        let env = try environment(in: envFile)
        #expect(env["SOTTO_EVENT"] == "found" && env["SOTTO_GROUP"] == "g; rm -rf /" && env["SOTTO_SUBSCRIPTION"] == "sub-9")
        #expect(env["SOTTO_NAMESPACE"] == "ns" && env["SOTTO_TYPE"] == "ty" && env["SOTTO_TITLE"] == "T")
        #expect(env["SOTTO_CONTENT"] == hostile)
        #expect(env["SOTTO_CONTENT_HEX"] == event.contentHex && env["SOTTO_CONTENT_SIZE"] == String(hostile.utf8.count))
        #expect(env["SOTTO_FOUND_AT"] == "2027-01-15T08:00:00.250Z" && env["SOTTO_FOUND_AT_UNIX"] == "1800000000.250")
        #expect(env["SOTTO_URL"] == nil && env["PATH"] != nil)
        #expect(try Data(contentsOf: stdinFile) == Data(hostile.utf8))
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("pwned").path))
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("pwned2").path))
    }

    @Test func binaryAndLargeContentGoOnStandardInputWithTheHexOnlyWhenItFits() async throws {
        let dir = try directory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let envFile = dir.appendingPathComponent("env"), stdinFile = dir.appendingPathComponent("stdin")
        let script = dir.appendingPathComponent("hook")
        try "#!/bin/sh\n/usr/bin/env -0 > \"$1\"\ncat > \"$2\"\n".write(to: script, atomically: true, encoding: .utf8)
        // Run through /bin/sh: executing a file this process just wrote can fail with ETXTBSY while a parallel
        // test forks.
        let sink = try ExecSink(command: ["/bin/sh", script.path, envFile.path, stdinFile.path], timeout: 5)
        let binary: [UInt8] = [0, 1, 2, 0xff]
        #expect(try await sink.deliver(NotificationEvent(kind: .lost, subscriptionID: "s", content: binary, foundAt: Date())) == 0)
        var env = try environment(in: envFile)
        #expect(env["SOTTO_EVENT"] == "lost" && env["SOTTO_CONTENT_HEX"] == "000102ff" && env["SOTTO_CONTENT"] == nil)
        let large = [UInt8](repeating: 0x41, count: 102_400)  // the 100 KiB message limit
        #expect(try await sink.deliver(NotificationEvent(kind: .found, subscriptionID: "s", content: large, foundAt: Date())) == 0)
        env = try environment(in: envFile)
        #expect(env["SOTTO_CONTENT_HEX"] == nil && env["SOTTO_CONTENT_SIZE"] == "102400")
        #expect(try Data(contentsOf: stdinFile) == Data(large))
    }

    @Test func aCommandThatDoesNotReadItsInputOrHangsIsBounded() async throws {
        let sink = try ExecSink(command: ["/bin/sleep", "30"], timeout: 0.3)
        let started = ContinuousClock.now
        let status = try await sink.deliver(NotificationEvent(kind: .found, subscriptionID: "s",
                                                              content: [UInt8](repeating: 1, count: 200_000), foundAt: Date()))
        // Killed by the limit, not ended by itself: `sleep 30` would have exited 0. (No bound on the time taken:
        // beside the whole suite on two cores the test's own tasks waited 4 and 20 s to run on CI.)
        #expect(status == 128 + SIGKILL)
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(try await ExecSink(command: ["/bin/sh", "-c", "exit 3"]).deliver(
            NotificationEvent(kind: .expired, subscriptionID: "s", content: [], foundAt: Date())) == 3)
    }

    @Test func aMissingOrEmptyCommandIsAClearError() async throws {
        #expect(throws: SpawnFailure.self) { try ExecSink(command: []) }
        let sink = try ExecSink(command: ["/nonexistent/sotto-hook"])
        await #expect(throws: SpawnFailure.self) {
            try await sink.deliver(NotificationEvent(kind: .found, subscriptionID: "s", content: [1], foundAt: Date()))
        }
        do {
            try await sink.deliver(NotificationEvent(kind: .found, subscriptionID: "s", content: [1], foundAt: Date()))
        } catch {
            #expect(error.description == "cannot run /nonexistent/sotto-hook: No such file or directory")
        }
    }
}
