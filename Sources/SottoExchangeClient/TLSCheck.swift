import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import SottoExchangeWire

/// A TLS handshake with a service's address, verifying its certificate as ``RemoteMatcher`` would (the trust
/// roots of ``RemoteMatcher/TLSOptions``, the host name or IP address), so that a certificate the client does
/// not trust is reported at once with the verifier's reason, instead of the client's retries ending in a
/// time-out. Run after `EndpointProbe` found a TLS server there.
public enum TLSCheck {
    /// Why the handshake failed, in words for a person; nil when it completed.
    /// - Parameters:
    ///   - address: the service's address (TCP; a Unix socket is not checked: nil).
    ///   - trustRoots: PEM file of the certificates to trust, or nil for the system's.
    ///   - timeout: longest wait for the connection and the handshake (s).
    /// - Returns: nil when the certificate is verified, else what failed.
    public static func failure(_ address: MatcherAddress, trustRoots: String?, timeout: Double = 5) async -> String? {
        guard case .tcp(let host, let port) = address else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let trustRoots { configuration.trustRoots = .file(trustRoots) }
        configuration.applicationProtocols = ["h2"]
        let context: NIOSSLContext
        do { context = try NIOSSLContext(configuration: configuration) } catch { return "cannot use the trust roots: \(error)" }
        // An IP address is verified against the certificate's IP addresses (SNI carries names only).
        let isAddress = host.contains(":") || host.split(separator: ".").count == 4 && host.allSatisfy { $0.isNumber || $0 == "." }
        let group = MultiThreadedEventLoopGroup.singleton
        let done = group.next().makePromise(of: Void.self)
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.milliseconds(Int64(timeout * 1000)))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host))
                    try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(done: done))
                }
            }
        let channel: any Channel
        do { channel = try await bootstrap.connect(host: host, port: port).get() } catch {
            done.fail(error)
            return "cannot connect: \(error)"
        }
        let timer = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(timeout * 1000))) {
            done.fail(TimedOutError())
        }
        defer { timer.cancel(); channel.close(promise: nil) }
        do {
            try await done.futureResult.get()
            return nil
        } catch is TimedOutError {
            return "no TLS handshake within \(Int(timeout)) s"
        } catch {
            return describe(error)
        }
    }

    /// The verifier's words for the usual failures.
    static func describe(_ error: any Error) -> String {
        let text = "\(error)"
        if let extra = error as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return "its certificate failed verification: it is not for this host name or address"
        }
        if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
            return "its certificate failed verification: not signed by a trusted CA (give the service's CA with --ca)"
        }
        return "the TLS handshake failed: \(text)"
    }

    private struct TimedOutError: Error {}

    /// Completes `done` when the handshake completes, fails it on an error or when the connection closes first.
    private final class HandshakeWatcher: ChannelInboundHandler, Sendable {
        typealias InboundIn = NIOAny
        let done: EventLoopPromise<Void>
        init(done: EventLoopPromise<Void>) { self.done = done }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case TLSUserEvent.handshakeCompleted = event { done.succeed(()) }
            context.fireUserInboundEventTriggered(event)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            done.fail(error)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            done.fail(ChannelError.eof)
            context.fireChannelInactive()
        }
    }
}
