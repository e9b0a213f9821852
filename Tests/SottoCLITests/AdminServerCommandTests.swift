import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import SottoExchangeWire
import Testing

/// `sotto admin --server` against a real `sotto serve --admin unix:PATH`: the operator's credential from the
/// environment or a mode-600 file, never the command line; what is wrong said with exit 64 or 2.
@Suite(.serialized, .timeLimit(.minutes(2))) struct AdminServerCommandTests {
    /// Runs `sotto` in the background and waits (polling, off the pool's threads) for it to end: status, stdout, stderr.
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (Int32, [String], String) {
        let command = try BackgroundSotto(arguments, environment: ["SOTTO_ADMIN_SECRET": ""].merging(environment) { $1 })
        let deadline = Date(timeIntervalSinceNow: 30)
        while command.process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if command.process.isRunning { command.process.terminate() }
        try await Task.sleep(for: .milliseconds(50))  // the last output's handlers
        return (command.process.terminationStatus, command.output, command.standardError)
    }

    @Test func adminCommandsWorkThroughTheAPIWithTheCredentialFromTheEnvironmentOrAFile() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        let created = try await Self.run(["admin", "operator", "create", "alice", "--store", store])
        #expect(created.0 == 0, "\(created.2)")
        let secret = try #require(created.1.first)
        let socket = directory.appendingPathComponent("admin.sock").path
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--admin", "unix:" + socket, "--store", store])
        defer { serve.process.terminate() }
        #expect(await serve.line(timeout: 30) { $0.hasPrefix("admin on unix:") } != nil, "\(serve.standardError)")
        let server = ["--server", "unix:" + socket]

        let project = try await Self.run(["admin", "project", "create", "museum"] + server, environment: ["SOTTO_ADMIN_SECRET": secret])
        #expect(project.0 == 0 && project.1.first?.hasSuffix("\tmuseum") == true, "\(project.2)")
        // From a file: refused while others may read it, used once it is private.
        let file = directory.appendingPathComponent("secret").path
        try (secret + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
        let open = try await Self.run(["admin", "key", "create", "museum", "--secret-file", file] + server)
        #expect(open.0 == 64 && open.2.contains("readable by others"), "\(open.2)")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        let key = try await Self.run(["admin", "key", "create", "museum", "--label", "kiosk", "--secret-file", file] + server)
        #expect(key.0 == 0 && key.1.first?.hasPrefix("sotto_") == true, "\(key.2)")
        let listed = try await Self.run(["admin", "key", "list", "museum", "--secret-file", file] + server)
        #expect(listed.1.count == 1 && listed.1.first?.contains("\tkiosk") == true)
        // A key with its own session quota, listed with it.
        let quota = try await Self.run(["admin", "key", "create", "museum", "--label", "screen", "--max-sessions", "3", "--secret-file", file] + server)
        #expect(quota.0 == 0, "\(quota.2)")
        let quotas = try await Self.run(["admin", "key", "list", "museum", "--secret-file", file] + server)
        #expect(quotas.1.count == 2 && quotas.1.last?.hasSuffix("\tscreen\tmax 3 sessions") == true, "\(quotas.1)")

        // No credential, a project key as one, both --store and --server: each said plainly.
        let none = try await Self.run(["admin", "project", "list"] + server)
        #expect(none.0 == 64 && none.2.contains("SOTTO_ADMIN_SECRET"), "\(none.2)")
        let asKey = try await Self.run(["admin", "project", "list"] + server, environment: ["SOTTO_ADMIN_SECRET": try #require(key.1.first)])
        #expect(asKey.0 == 2 && asKey.2.contains("a project key is not an admin credential"), "\(asKey.2)")
        let both = try await Self.run(["admin", "project", "list", "--store", store] + server, environment: ["SOTTO_ADMIN_SECRET": secret])
        #expect(both.0 == 64, "\(both.2)")
        // Beacons through the API too.
        let withSecret = ["SOTTO_ADMIN_SECRET": secret]
        let registered = try await Self.run(["admin", "beacon", "register", "museum", "abcd", "--public"] + server, environment: withSecret)
        #expect(registered.0 == 0, "\(registered.2)")
        let attached = try await Self.run(["admin", "beacon", "attach", "abcd", "--namespace", "museum", "--type", "exhibit", "--text", "hall"] + server,
                                          environment: withSecret)
        #expect(attached.0 == 0, "\(attached.2)")
        let beacons = try await Self.run(["admin", "beacon", "list"] + server, environment: withSecret)
        #expect(beacons.0 == 0 && beacons.1.count == 1 && beacons.1.first?.hasPrefix("abcd\t") == true && beacons.1.first?.contains("\tpublic") == true,
                "\(beacons.1) \(beacons.2)")
        let unknown = try await Self.run(["admin", "beacon", "decommission", "ef"] + server, environment: withSecret)
        #expect(unknown.0 == 2 && unknown.2.contains("no beacon ef"), "\(unknown.2)")

        let audit = try await Self.run(["admin", "audit", "--store", store, "--limit", "50"])
        #expect(audit.1.contains { $0.contains("operator:alice\tkey.create\tmuseum key ") })
        #expect(audit.1.contains { $0.contains("local:") && $0.contains("\toperator.create\talice\tok") })
        #expect(!audit.1.joined().contains(secret), "no credential in the audit")
    }

    /// `sotto serve --admin-grpc`: the admin API over gRPC on its own socket, beside `--admin`, with the same
    /// credential; the service stops cleanly on SIGINT with it; `--admin-grpc` alone is refused.
    @Test func theAdminAPIOverGRPCBesideTheHTTPOne() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        let created = try await Self.run(["admin", "operator", "create", "alice", "--store", store])
        let secret = try #require(created.1.first, "\(created.2)")
        let alone = try await Self.run(["serve", "--listen", "127.0.0.1:0", "--admin-grpc", "127.0.0.1:0", "--store", store])
        #expect(alone.0 == 64 && alone.2.contains("--admin-grpc goes with --admin"), "\(alone.2)")

        let socket = directory.appendingPathComponent("admin.sock").path, grpcSocket = directory.appendingPathComponent("admin-grpc.sock").path
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--admin", "unix:" + socket, "--admin-grpc", "unix:" + grpcSocket, "--store", store])
        defer { serve.process.terminate() }
        #expect(await serve.line(timeout: 30) { $0 == "admin grpc on unix:" + grpcSocket } != nil, "\(serve.standardError)")
        #expect(await serve.line(timeout: 30) { $0.hasPrefix("admin on unix:") } != nil, "\(serve.standardError)")
        let made = try await Self.run(["admin", "project", "create", "museum", "--server", "unix:" + socket], environment: ["SOTTO_ADMIN_SECRET": secret])
        #expect(made.0 == 0, "\(made.2)")

        let client = GRPCClient(transport: try HTTP2ClientTransport.Posix(target: .unixDomainSocket(path: grpcSocket), transportSecurity: .plaintext))
        let running = Task { try? await client.runConnections() }
        let admin = Sotto_Admin_V1_Admin.Client(wrapping: client)
        let projects = try await admin.listProjects(Sotto_Admin_V1_ListProjectsRequest(), metadata: ["authorization": "Bearer \(secret)"]).projects
        #expect(projects.map(\.name) == ["museum"], "the project made over HTTP, listed over gRPC")
        var create = Sotto_Admin_V1_CreateKeyRequest()
        create.project = try #require(projects.first).id
        create.label = "kiosk"
        let key = try await admin.createKey(create, metadata: ["authorization": "Bearer \(secret)"])
        #expect(key.secret.hasPrefix("sotto_") && key.key.label == "kiosk")
        await #expect(throws: RPCError.self) { _ = try await admin.listProjects(Sotto_Admin_V1_ListProjectsRequest(), metadata: ["authorization": "Bearer \(key.secret)"]) }
        client.beginGracefulShutdown()
        running.cancel()

        await serve.interrupt()
        #expect(serve.process.terminationStatus == 0, "\(serve.standardError)")
        let audit = try await Self.run(["admin", "audit", "--store", store, "--limit", "50"])
        #expect(audit.1.contains { $0.contains("operator:alice\tkey.create\t") }, "the key made over gRPC is audited as the operator: \(audit.1)")
    }
}
