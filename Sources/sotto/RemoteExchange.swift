import ArgumentParser
import Foundation
import SottoExchange
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
        let addresses = server.compactMap { try? MatcherAddress(parsing: $0) }
        guard !addresses.isEmpty else { return }
        var options = RemoteMatcher.Options(endpoints: addresses, apiKey: "", tls: secure ? .init(trustRoots: ca) : nil)
        options.insecure = insecure
        do { try options.checkKeyTransport() } catch { throw ValidationError("--server: \(error)") }
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

/// Capture and playback devices of an exchange session on a sound card.
struct RadioDevices: ParsableArguments {
    @Option(help: "ALSA capture PCM (default: --device).") var captureDevice: String?
    @Option(help: "ALSA playback PCM of the session's own token (default: --device).") var playbackDevice: String?
}

/// Exchange sessions through a matcher service, for `publish` and `subscribe` with `--server`.
enum RemoteExchange {
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
