import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import NIOCore
import NIOPosix
import SottoExchangeCore
@testable import SottoExchangeService
import SottoExchangeWire
import SottoSupport
import SwiftProtobuf
import Synchronization
import Testing

/// The admin API over gRPC (`sotto.admin.v1.Admin`, ``AdminGRPCListener``): every operation, its errors as gRPC
/// codes, its audit entries, the live view and its stream; a project key refused; failed credentials limited; TLS;
/// the service absent from the exchange's port.
@Suite(.timeLimit(.minutes(1))) struct AdminGRPCTests {
    /// The admin API's gRPC listener (on a Unix socket, or on loopback over TLS) serving a fresh store with an
    /// operator, and a gRPC client of it.
    final class Fixture: Sendable {
        let directory: String
        let store: SQLiteStore
        let secret: String
        let serving: Task<Void, any Error>
        let feeding: Task<Void, Never>
        let live: LiveFeed
        let grpc: GRPCClient<HTTP2ClientTransport.Posix>
        let admin: Sotto_Admin_V1_Admin.Client<HTTP2ClientTransport.Posix>
        let running: Task<Void, Never>

        init(tls: Bool = false, live statistics: @escaping @Sendable () async -> ServiceStatistics = { ServiceStatistics(census: [:], counters: [:]) }) async throws {
            directory = try temporaryDirectory()
            store = try SQLiteStore(path: directory + "/exchange.sqlite")
            secret = try await store.createOperator(name: "alice").secret
            let live = LiveFeed(interval: 0.2, source: statistics)
            self.live = live
            feeding = Task { await live.run() }
            let security: HTTP2ClientTransport.Posix.TransportSecurity
            let listener: AdminGRPCListener
            if tls {
                let (certificate, key) = try selfSignedCertificate(in: directory)
                listener = try AdminGRPCListener(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: MatcherServer.TLS(certificateChain: certificate, privateKey: key))
                security = .tls { $0.trustRoots = .certificates([.file(path: certificate, format: .pem)]) }
            } else {
                listener = try AdminGRPCListener(endpoint: .unix(path: directory + "/admin-grpc.sock"), tls: nil)
                security = .plaintext
            }
            let api = AdminAPI(store: store, live: live)
            let bound = Mutex<String?>(nil)
            serving = Task { try await listener.serve(api: api) { address in bound.withLock { $0 = address } } }
            var address = ""
            for _ in 0..<200 where address.isEmpty {
                address = bound.withLock { $0 } ?? ""
                if address.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
            }
            try #require(!address.isEmpty, "the admin gRPC listener is bound within 10 s")
            let target: any ResolvableTarget = tls
                ? .dns(host: "localhost", port: Int(address.split(separator: ":").last ?? "") ?? 0)
                : .unixDomainSocket(path: directory + "/admin-grpc.sock")
            grpc = GRPCClient(transport: try HTTP2ClientTransport.Posix(target: target, transportSecurity: security))
            admin = Sotto_Admin_V1_Admin.Client(wrapping: grpc)
            let grpc = self.grpc
            running = Task { try? await grpc.runConnections() }
        }

        var credential: Metadata { ["authorization": "Bearer \(secret)"] }

        func close() async {
            grpc.beginGracefulShutdown()
            running.cancel()
            serving.cancel()
            feeding.cancel()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    /// The code of the RPC error `body` throws (nil: it did not throw one).
    func code(_ body: () async throws -> Void) async -> RPCError.Code? {
        do { try await body() } catch let error as RPCError { return error.code } catch { return nil }
        return nil
    }

    @Test func everyOperationWorksOverGRPCAndIsAuditedAsTheOperator() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let admin = fixture.admin, credential = fixture.credential

        // Projects.
        let project = try await admin.createProject(.with { $0.name = "museum"; $0.maxSessions = 50 }, metadata: credential).project
        #expect(project.name == "museum" && project.maxSessions == 50 && !project.disabled)
        let renamed = try await admin.renameProject(.with { $0.project = project.id; $0.name = "gallery" }, metadata: credential).project
        #expect(renamed.name == "gallery")
        #expect(try await admin.setProjectDisabled(.with { $0.project = project.id; $0.disabled = true }, metadata: credential).project.disabled)
        #expect(try await !admin.setProjectDisabled(.with { $0.project = project.id; $0.disabled = false }, metadata: credential).project.disabled)
        #expect(try await admin.listProjects(.init(), metadata: credential).projects.map(\.id) == [project.id])

        // Keys: made, with a browser origin and a quota; used by the store as a key; rotated; revoked.
        let made = try await admin.createKey(.with {
            $0.project = project.id; $0.label = "kiosk"; $0.requestsPerSecond = 5; $0.origins = ["https://museum.example"]; $0.maxSessions = 3
        }, metadata: credential)
        #expect(made.key.label == "kiosk" && made.key.requestsPerSecond == 5 && made.key.burst == 200)
        #expect(made.key.origins == ["https://museum.example"] && made.key.maxSessions == 3 && !made.key.hasLastUsed)
        #expect(try await APIKeys.authenticate(made.secret, in: fixture.store)?.keyID == made.key.id, "the secret given once is the key's")
        #expect(try await admin.listKeys(.with { $0.project = project.id }, metadata: credential).keys.map(\.id) == [made.key.id])
        #expect(try await admin.listKeys(.init(), metadata: credential).keys.count == 1)
        let quota = try await admin.setKeyQuota(.with { $0.key = made.key.id }, metadata: credential)
        #expect(quota.key == made.key.id && !quota.hasMaxSessions, "the key's own quota removed")
        let rotated = try await admin.rotateKey(.with { $0.key = made.key.id; $0.overlapSeconds = 60 }, metadata: credential)
        #expect(rotated.secret != made.secret && rotated.previousExpires > Date().timeIntervalSince1970 + 50)
        #expect(try await APIKeys.authenticate(rotated.secret, in: fixture.store) != nil)
        #expect(try await admin.revokeKey(.with { $0.key = rotated.key.id }, metadata: credential).revoked == rotated.key.id)
        #expect(try await APIKeys.authenticate(rotated.secret, in: fixture.store) == nil, "a revoked key no longer opens sessions")

        // Beacons: registered with an attachment, a rotating one provisioned here.
        let registered = try await admin.registerBeacon(.with {
            $0.project = project.id; $0.id = "0a0b0c0d"; $0.visibility = "public"
            $0.attachments = [.with { $0.namespace = "museum"; $0.type = "exhibit"; $0.text = "<b>Night Watch</b>" }]
        }, metadata: credential)
        #expect(registered.beacon.id == "0a0b0c0d" && registered.beacon.visibility == "public" && !registered.hasProvisioning)
        #expect(registered.beacon.attachments.map(\.text) == ["<b>Night Watch</b>"])
        let rotating = try await admin.registerBeacon(.with { $0.project = project.id; $0.id = "1112131415161718"; $0.rotationPeriod = 30 }, metadata: credential)
        #expect(rotating.beacon.rotating && rotating.beacon.rotationPeriod == 30 && rotating.hasProvisioning && !rotating.provisioning.isEmpty)
        let added = try await admin.addAttachment(.with {
            $0.beacon = "0a0b0c0d"; $0.attachment = .with { $0.namespace = "museum"; $0.type = "audio"; $0.hex = "00ff" }
        }, metadata: credential)
        #expect(added.attachment.hex == "00ff" && added.beacon == "0a0b0c0d")
        #expect(try await admin.deleteAttachment(.with { $0.beacon = "0a0b0c0d"; $0.index = 0 }, metadata: credential).deleted == 0)
        #expect(try await admin.setBeaconVisibility(.with { $0.beacon = "0a0b0c0d"; $0.visibility = "unlisted" }, metadata: credential).visibility == "unlisted")
        let beacon = try await admin.getBeacon(.with { $0.id = "0a0b0c0d" }, metadata: credential).beacon
        #expect(beacon.visibility == "unlisted" && beacon.attachments.map(\.type) == ["audio"] && beacon.attachments.first?.index == 0)
        #expect(try await admin.listBeacons(.with { $0.project = project.id }, metadata: credential).beacons.count == 2)
        #expect(try await admin.decommissionBeacon(.with { $0.beacon = "1112131415161718" }, metadata: credential).decommissioned == "1112131415161718")
        #expect(try await fixture.store.beacons().first { $0.id == Hex.decode("1112131415161718") }?.decommissioned == true)

        // The audit log, through gRPC too: every change above by operator:alice.
        let entries = try await admin.listAudit(.with { $0.limit = 200 }, metadata: credential).entries
        let actions = Set(entries.filter { $0.actor == "operator:alice" }.map(\.action))
        for action in ["project.create", "project.rename", "key.create", "key.rotate", "key.revoke", "beacon.register", "beacon.attach",
                       "beacon.detach", "beacon.decommission"] {
            #expect(actions.contains(action), "\(action) in \(actions.sorted())")
        }
        #expect(try await admin.listAudit(.with { $0.limit = 2 }, metadata: credential).entries.count == 2)
    }

    @Test func errorsAreGRPCCodesWithTheAPIsMessages() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        let admin = fixture.admin, credential = fixture.credential
        let project = try await fixture.store.createProject(name: "museum", maxSessions: 10)
        let key = try await fixture.store.createKey(project: project.id, label: "app", ratePerSecond: 10, burst: 10).key

        // No credential, a wrong one, a project key: unauthenticated, and nothing done.
        #expect(await code { _ = try await admin.listProjects(.init()) } == .unauthenticated)
        #expect(await code { _ = try await admin.listProjects(.init(), metadata: ["authorization": "Bearer sotto-op-00-nothing"]) } == .unauthenticated)
        do {
            _ = try await admin.createProject(.with { $0.name = "intruder" }, metadata: ["authorization": "Bearer \(key)"])
            Issue.record("a project key was accepted")
        } catch let error as RPCError {
            #expect(error.code == .unauthenticated && error.message.contains("a project key is not an admin credential"), "\(error)")
        }
        #expect(try await fixture.store.projects().map(\.name) == ["museum"])
        // Bad input, with the exchange's limits: invalid argument, saying what.
        do {
            _ = try await admin.createKey(.with { $0.project = project.id; $0.requestsPerSecond = -1 }, metadata: credential)
            Issue.record("a negative rate was accepted")
        } catch let error as RPCError {
            #expect(error.code == .invalidArgument && error.message.contains("requestsPerSecond"), "\(error)")
        }
        #expect(await code { _ = try await admin.addAttachment(.with { $0.beacon = "0a0b"; $0.attachment = .with { $0.type = "t"; $0.text = "x" } }, metadata: credential) } == .invalidArgument,
                "an attachment without its namespace")
        #expect(await code { _ = try await admin.listAudit(.with { $0.limit = 5_000 }, metadata: credential) } == .invalidArgument)
        #expect(await code { _ = try await admin.registerBeacon(.with { $0.project = project.id; $0.id = "zz" }, metadata: credential) } == .invalidArgument)
        // An id that would be a path of its own is refused before anything is asked.
        #expect(await code { _ = try await admin.revokeKey(.with { $0.key = "k/../quota" }, metadata: credential) } == .invalidArgument)
        #expect(await code { _ = try await admin.renameProject(.with { $0.name = "x" }, metadata: credential) } == .invalidArgument)
        // Unknown things, duplicates.
        #expect(await code { _ = try await admin.revokeKey(.with { $0.key = "nokey" }, metadata: credential) } == .notFound)
        #expect(await code { _ = try await admin.getBeacon(.with { $0.id = "0102" }, metadata: credential) } == .notFound)
        #expect(await code { _ = try await admin.getLiveView(.with { $0.project = "nobody" }, metadata: credential) } == .notFound)
        #expect(await code { _ = try await admin.createProject(.with { $0.name = "museum" }, metadata: credential) } == .alreadyExists)
        // The refused credential is in the audit log as its peer, never with the secret.
        let refused = try await fixture.store.auditEntries(limit: 50).filter { $0.actor.hasPrefix("peer:") }
        #expect(refused.count == 2 && refused.allSatisfy { $0.outcome == "refused" && !$0.target.contains(key) }, "\(refused)")
    }

    @Test func failedCredentialsFromOnePeerAreLimited() async throws {
        let fixture = try await Fixture()
        defer { Task { await fixture.close() } }
        for _ in 0..<AdminAPI.loginFailureLimit {
            #expect(await code { _ = try await fixture.admin.listProjects(.init(), metadata: ["authorization": "Bearer wrong"]) } == .unauthenticated)
        }
        // Now even the right credential is refused from this peer, for the window.
        do {
            _ = try await fixture.admin.listProjects(.init(), metadata: fixture.credential)
            Issue.record("the peer was not limited")
        } catch let error as RPCError {
            #expect(error.code == .unauthenticated && error.message.contains("too many failed logins"), "\(error)")
        }
    }

    @Test func theLiveViewAndItsStreamOverGRPC() async throws {
        // The service's statistics: the project counts a sighting more at every sample.
        let project = Mutex<String?>(nil), sightings = Mutex(0)
        let fixture = try await Fixture(live: {
            var statistics = ServiceStatistics(census: [:], counters: [:])
            if let id = project.withLock({ $0 }) {
                var counters = ProjectCounters()
                counters.sightings = sightings.withLock { $0 += 1; return $0 }
                statistics.counters[id] = counters
            }
            return statistics
        })
        defer { Task { await fixture.close() } }
        let made = try await fixture.store.createProject(name: "museum", maxSessions: 10)
        project.withLock { $0 = made.id }
        let projectID = made.id
        #expect(await eventually(5) { await fixture.live.view(project: projectID).history.count >= 3 })
        let view = try await fixture.admin.getLiveView(.with { $0.project = projectID }, metadata: fixture.credential)
        #expect(view.project == projectID && view.name == "museum" && abs(view.interval - 0.2) < 1e-9 && view.history.count >= 3, "\(view)")
        #expect(view.current.sightingsPerSecond > 0 && view.history.last?.time == view.current.time, "\(view)")
        // Three points from the stream, a sample apart, then the client cancels: the watcher is forgotten.
        let times = try await fixture.admin.watchLive(.with { $0.project = projectID }, metadata: fixture.credential) { response in
            var times: [Double] = []
            for try await point in response.messages {
                times.append(point.time)
                if times.count == 3 { break }
            }
            return times
        }
        #expect(times.count == 3 && zip(times, times.dropFirst()).allSatisfy { $1 > $0 }, "\(times)")
        #expect(await eventually(5) { await fixture.live.watcherCount == 0 }, "the watcher is forgotten once the call ended")
        let audit = try await fixture.store.auditEntries(limit: 20).map(\.action)
        #expect(audit.contains("live.view") && audit.contains("live.watch"), "\(audit)")
    }

    @Test func overTLSOnlyBeyondLoopbackAndNeverOnTheExchangesPort() async throws {
        let fixture = try await Fixture(tls: true)
        defer { Task { await fixture.close() } }
        // gRPC over TLS (ALPN h2) on loopback, verified against the certificate.
        #expect(try await fixture.admin.createProject(.with { $0.name = "museum" }, metadata: fixture.credential).project.name == "museum")
        // Beyond loopback, not without TLS.
        #expect(throws: MatcherServerError.self) { try AdminGRPCListener(endpoint: .tcp(host: "0.0.0.0", port: 0), tls: nil) }

        // The exchange's port serves no admin service, whatever the credential.
        let service = try await TestServer()
        defer { Task { await service.stop() } }
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let onExchange = Sotto_Admin_V1_Admin.Client(wrapping: client.grpc)
        let operatorSecret = try await service.store.createOperator(name: "bob").secret
        #expect(await code { _ = try await onExchange.listProjects(.init(), metadata: ["authorization": "Bearer \(operatorSecret)"]) } == .unimplemented)
    }
}
