import ArgumentParser
import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeWire
import SottoSupport

/// `--server URL --api-key K`: use a matcher service (`sotto serve`); `--server` again for more nodes of it.
struct ServerOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Matcher service: HOST:PORT, unix:PATH, sotto://HOST:PORT or sottos://HOST:PORT (TLS).",
        discussion: "Repeat for the nodes of one service (sharing a PostgreSQL): they are tried in turn, the next one when one fails."))
    var server: [String] = []
    @Option(help: "API key of a project (default: $SOTTO_API_KEY).") var apiKey: String?
    @Option(help: "CA certificate (PEM) to verify the service with (implies TLS).") var ca: String?
    @Flag(help: "TLS with the system's trust roots.") var tls = false
    @Flag(help: "Allow sending the API key in plaintext to a service beyond loopback or a Unix socket.") var insecure = false

    /// Whether a service was given.
    var given: Bool { !server.isEmpty }

    private var secure: Bool { tls || ca != nil || server.contains { $0.hasPrefix("sottos://") } }

    /// Refuses, before anything runs, to send the key in plaintext beyond loopback and Unix sockets (a usage
    /// error naming --insecure).
    func validate() throws {
        var addresses: [MatcherAddress] = []
        for text in server {
            do { addresses.append(try MatcherAddress(parsing: text)) } catch { throw ValidationError("--server \(text): \(error)") }
        }
        guard !addresses.isEmpty else { return }
        var options = RemoteMatcher.Options(endpoints: addresses, apiKey: "", tls: secure ? .init(trustRoots: ca) : nil)
        options.insecure = insecure
        do { try options.checkKeyTransport() } catch { throw ValidationError("--server: \(error)") }
    }

    /// Says on stderr what is tried, then probes every node (``MatcherProbe``).
    func probe() async throws {
        try await MatcherProbe.run(server.compactMap { try? MatcherAddress(parsing: $0) }, tls: secure, trustRoots: ca)
    }

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
        if let ca, !FileManager.default.isReadableFile(atPath: ca) { throw CommandError("cannot read \(ca)") }
        var options = RemoteMatcher.Options(endpoints: addresses, apiKey: key, tls: secure ? .init(trustRoots: ca) : nil,
                                            broadcasts: broadcasts, clientVersion: "sotto-cli")
        options.backoff = 0.2...5
        options.insecure = insecure
        do { try options.checkKeyTransport() } catch { throw ValidationError("--server: \(error)") }
        do { return try RemoteMatcher(options: options) } catch { throw CommandError("--server: \(error)") }
    }
}

/// The first contact with a matcher service's nodes, for every command that uses one (publish, subscribe,
/// beacon, load, daemon): says on stderr what is tried, then probes every node (``EndpointProbe``; with TLS, a
/// handshake that verifies the certificate, ``TLSCheck``) so that a failure is reported at once with its cause:
/// a run-time failure when no node answers as a sotto service, a warning for each node that does not when
/// another does.
enum MatcherProbe {
    static func run(_ addresses: [MatcherAddress], tls: Bool, trustRoots: String?) async throws {
        printError("matcher: connecting to \(addresses.map(\.description).joined(separator: ", ")) (\(tls ? "TLS" : "plaintext"))")
        let failures = await withTaskGroup(of: (Int, String?).self) { group in
            for (index, address) in addresses.enumerated() {
                group.addTask {
                    let outcome = await EndpointProbe.probe(address, greeting: .grpc(tls: tls))
                    guard outcome.isReachable else { return (index, outcome.description) }
                    guard tls, let failure = await TLSCheck.failure(address, trustRoots: trustRoots) else { return (index, nil) }
                    return (index, "\(address): \(failure)")
                }
            }
            var failures = [String?](repeating: nil, count: addresses.count)
            for await (index, failure) in group { failures[index] = failure }
            return failures.compactMap { $0 }
        }
        if failures.count == addresses.count, !failures.isEmpty {
            throw CommandError("matcher: " + failures.joined(separator: "; "))
        }
        for failure in failures { printError("warning: matcher: \(failure); trying the other nodes") }
    }
}

/// Capture and playback devices of an exchange session on a sound card.
struct RadioDevices: ParsableArguments {
    @Option(help: "ALSA capture PCM (default: --device).") var captureDevice: String?
    @Option(help: "ALSA playback PCM of the session's own token (default: --device).") var playbackDevice: String?
}

/// Exchange sessions through a matcher service, for `publish` and `subscribe` with `--server`.
enum RemoteExchange {
    /// Probes the service's nodes (``ServerOptions/probe()``), then connects a manager to it.
    static func manager(server: ServerOptions, broadcasts: Bool, lostTimeout: Double = 10,
                        onNotice: @escaping @Sendable (MatcherNotice) -> Void = { _ in }) async throws -> MessageManager {
        let link = try server.link(broadcasts: broadcasts)
        try await server.probe()
        return try await manager(link: link, lostTimeout: lostTimeout, onNotice: onNotice)
    }

    /// Connects a manager to the service; connection changes go to stderr.
    static func manager(link: RemoteMatcher, lostTimeout: Double = 10,
                        onNotice: @escaping @Sendable (MatcherNotice) -> Void = { _ in }) async throws -> MessageManager {
        let manager = MessageManager(link: link, appID: "sotto-cli", lostTimeout: lostTimeout) { notice in
            onNotice(notice)
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
}
