import Foundation
import NIOCore
import NIOPosix
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import Synchronization
import Testing

/// A TCP relay on 127.0.0.1 in front of the service, whose connections can be cut (a network drop the
/// service only notices as a closed connection) and which can refuse new ones for a while.
final class DroppingProxy: Sendable {
    private let listener: any Channel
    final class State: Sendable {
        let box = Mutex<(channels: [any Channel], refusing: Bool)>(([], false))
        func withLockedValue<T>(_ body: (inout (channels: [any Channel], refusing: Bool)) -> T) -> T { box.withLock { body(&$0) } }
    }
    private let state: State
    let port: Int

    final class Relay: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        /// Set on the inbound channel's event loop; what arrives before is held.
        var peer: (any Channel)? {
            didSet { if let peer { for buffer in pending { peer.write(buffer, promise: nil) }; peer.flush(); pending = [] } }
        }
        var pending: [ByteBuffer] = []
        init(peer: (any Channel)? = nil) { self.peer = peer }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            if let peer { peer.writeAndFlush(buffer, promise: nil) } else { pending.append(buffer) }
        }
        func channelInactive(context: ChannelHandlerContext) {
            peer?.close(promise: nil)
            context.fireChannelInactive()
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }

    init(to targetPort: Int) async throws {
        let state = State()
        self.state = state
        listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                let refusing = state.withLockedValue { box in
                    if !box.refusing { box.channels.append(inbound) }
                    return box.refusing
                }
                if refusing { return inbound.close() }
                let relay = Relay()
                return inbound.pipeline.addHandler(relay).flatMap {
                    ClientBootstrap(group: inbound.eventLoop)
                        .channelInitializer { outbound in outbound.pipeline.addHandler(Relay(peer: inbound)) }
                        .connect(host: "127.0.0.1", port: targetPort)
                        .map { outbound in
                            relay.peer = outbound
                            state.withLockedValue { $0.channels.append(outbound) }
                        }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = listener.localAddress?.port ?? 0
    }

    /// Closes every relayed connection; with `refuse`, new ones are closed at once until `accept()`.
    func drop(refuse: Bool) {
        let channels = state.withLockedValue { box in
            box.refusing = refuse
            defer { box.channels = [] }
            return box.channels
        }
        for channel in channels { channel.close(promise: nil) }
    }

    func accept() { state.withLockedValue { $0.refusing = false } }

    func close() async {
        drop(refuse: true)
        try? await listener.close()
    }
}

/// A manager whose connection drops while the service keeps its session resumes it, and reconciles what
/// changed meanwhile.
@Suite(.timeLimit(.minutes(1))) struct ResumeTests {
    @Test func managerResumesItsSessionAfterANetworkDrop() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.sessionGrace = 10
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let proxy = try await DroppingProxy(to: service.port)
        defer { Task { await proxy.close() } }

        // A publishes two messages (raw, direct); B subscribes through the proxy.
        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let a = RawSession(client)
        #expect(await a.hello(key: service.apiKey) != nil)
        let leaving = try Message(namespace: "museum", type: "exhibit", content: Array("on loan".utf8))
        a.send(Frames.publish(1, content: exhibit.content))
        a.send(Frames.publish(2, content: leaving.content))
        #expect(await a.status(2)?.state == .active)
        guard let token = await a.frame(where: { $0.tokenDirective != nil })?.tokenDirective else { Issue.record("no token"); return }

        let log = ConnectionLog()
        let link = try RemoteMatcher(options: .init(endpoint: .tcp(host: "127.0.0.1", port: proxy.port), apiKey: service.apiKey))
        let b = MessageManager(link: link, lostTimeout: 30, onConnection: { log.append($0) })
        try await b.connect(timeout: 5)
        let recorder = EventRecorder()
        let subscription = try await b.subscribe(filter: exhibitFilter, now: 0, handler: recorder.handler)
        await heard(b, token: token)
        #expect(await recorder.waitFound(2))
        let tokenB = await b.token

        // The network drops; meanwhile one message goes away.
        proxy.drop(refuse: true)
        #expect(await eventually(5) { log.all.contains { if case .disconnected = $0 { return true } else { return false } } })
        a.send(Frames.unpublish(2))
        try await Task.sleep(for: .milliseconds(300))
        #expect(recorder.lost.isEmpty, "nothing is reported while disconnected")
        proxy.accept()

        #expect(await eventually(8) { log.all.contains(.connected(resumed: true)) }, "resumed: \(log.all)")
        #expect(!log.all.contains(.connected(resumed: false)) || log.all.firstIndex(of: .connected(resumed: false))! < log.all.firstIndex(of: .connected(resumed: true))!)
        #expect(await recorder.waitLost(1, 3), "the message that left meanwhile is lost on reconciliation")
        try await Task.sleep(for: .milliseconds(500))
        #expect(recorder.lost == [leaving])
        #expect(recorder.found.count == 2, "no found repeated: \(recorder.all)")
        #expect(await b.token == tokenB, "a resumed session keeps its token")
        #expect(service.metric("sotto_sessions_resumed_total") == 1)
        // Still live: the remaining message goes too.
        a.send(Frames.unpublish(1))
        #expect(await recorder.waitLost(2, 3))
        #expect(recorder.pattern == "FFLL")
        a.cancel()
        keep(subscription)
        await b.close(now: 0)
    }

    @Test
    func publicationCancelledWhileDisconnectedIsWithdrawnOnResume() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.sessionGrace = 10
        let service = try await TestServer(configuration: configuration)
        defer { Task { await service.stop() } }
        let proxy = try await DroppingProxy(to: service.port)
        defer { Task { await proxy.close() } }
        let log = ConnectionLog()
        let link = try RemoteMatcher(options: .init(endpoint: .tcp(host: "127.0.0.1", port: proxy.port), apiKey: service.apiKey))
        let publisher = MessageManager(link: link, lostTimeout: 30, onConnection: { log.append($0) })
        try await publisher.connect(timeout: 5)
        let publication = try await publisher.publish(exhibit, now: 0)
        let tokenP = try await token(of: publisher)

        let client = try RawClient(service.address)
        defer { Task { await client.close() } }
        let subscriber = RawSession(client)
        #expect(await subscriber.hello(key: service.apiKey, broadcasts: false) != nil)
        subscriber.send(Frames.subscribe(1, lostTimeoutMs: 30_000))
        #expect(await subscriber.status(1)?.state == .active)
        subscriber.send(Frames.observe(token: tokenP))
        #expect(await subscriber.frame { $0.isFound } != nil)

        proxy.drop(refuse: true)
        #expect(await eventually(5) { log.all.contains { if case .disconnected = $0 { return true } else { return false } } })
        await publication.cancel()
        #expect(await publication.status() == .inactive)
        proxy.accept()
        #expect(await eventually(8) { log.all.contains(.connected(resumed: true)) }, "resumed: \(log.all)")
        #expect(await subscriber.frame(3) { $0.isLost } != nil, "the publication cancelled while disconnected is withdrawn")
        subscriber.cancel()
        await publisher.close(now: 0)
    }
}
