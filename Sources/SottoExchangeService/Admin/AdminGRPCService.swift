import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import NIOCore
import NIOPosix
import NIOSSL
import SottoExchangeWire
import SwiftProtobuf
import Synchronization

/// The admin API over gRPC (`sotto.admin.v1.Admin`, `admin.proto`), served by ``AdminGRPCListener`` beside the
/// HTTP/JSON API of ``AdminListener``. Each call is the HTTP/JSON endpoint of the same operation, answered by the same ``AdminAPI``:
/// the request message, in its JSON form (whose names are the HTTP API's; fields at their default value are left
/// out, so an empty string the API requires reads as missing), is the endpoint's body, and the answer's
/// JSON is read back into the response message. So authentication (the operator's credential in the metadata
/// `authorization: Bearer CREDENTIAL`; never a project key), the failed-credential limit per peer, validation with
/// the exchange's limits and the audit entry are those of the HTTP API, defined once. HTTP statuses become gRPC
/// codes (``code(forStatus:)``); the error's message is the API's.
struct AdminGRPCService: Sotto_Admin_V1_Admin.ServiceProtocol {
    let api: AdminAPI

    typealias Request<M: Sendable> = ServerRequest<M>
    typealias Response<M: Sendable> = ServerResponse<M>

    // MARK: Projects

    func listProjects(request: Request<Sotto_Admin_V1_ListProjectsRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ListProjectsResponse> {
        try await call("GET", ["projects"], request, context)
    }

    func createProject(request: Request<Sotto_Admin_V1_CreateProjectRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ProjectResponse> {
        try await call("POST", ["projects"], request, context)
    }

    func renameProject(request: Request<Sotto_Admin_V1_RenameProjectRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ProjectResponse> {
        try await call("POST", ["projects", request.message.project, "rename"], request, context)
    }

    func setProjectDisabled(request: Request<Sotto_Admin_V1_SetProjectDisabledRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ProjectResponse> {
        try await call("POST", ["projects", request.message.project, request.message.disabled ? "disable" : "enable"], request, context)
    }

    // MARK: Keys

    func listKeys(request: Request<Sotto_Admin_V1_ListKeysRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ListKeysResponse> {
        try await call("GET", request.message.hasProject ? ["projects", request.message.project, "keys"] : ["keys"], request, context)
    }

    func createKey(request: Request<Sotto_Admin_V1_CreateKeyRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_KeySecretResponse> {
        try await call("POST", ["projects", request.message.project, "keys"], request, context)
    }

    func setKeyQuota(request: Request<Sotto_Admin_V1_SetKeyQuotaRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_SetKeyQuotaResponse> {
        try await call("POST", ["keys", request.message.key, "quota"], request, context)
    }

    func rotateKey(request: Request<Sotto_Admin_V1_RotateKeyRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_KeySecretResponse> {
        try await call("POST", ["keys", request.message.key, "rotate"], request, context)
    }

    func revokeKey(request: Request<Sotto_Admin_V1_RevokeKeyRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_RevokeKeyResponse> {
        try await call("POST", ["keys", request.message.key, "revoke"], request, context)
    }

    // MARK: Beacons

    func listBeacons(request: Request<Sotto_Admin_V1_ListBeaconsRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ListBeaconsResponse> {
        try await call("GET", ["beacons"], request, context, query: request.message.hasProject ? request.message.project : nil)
    }

    func getBeacon(request: Request<Sotto_Admin_V1_GetBeaconRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_BeaconResponse> {
        try await call("GET", ["beacons", request.message.id], request, context)
    }

    func registerBeacon(request: Request<Sotto_Admin_V1_RegisterBeaconRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_BeaconResponse> {
        try await call("POST", ["projects", request.message.project, "beacons"], request, context)
    }

    func addAttachment(request: Request<Sotto_Admin_V1_AddAttachmentRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_AddAttachmentResponse> {
        // The endpoint's body is the attachment itself.
        try await call("POST", ["beacons", request.message.beacon, "attachments"], request, context, body: request.message.attachment)
    }

    func deleteAttachment(request: Request<Sotto_Admin_V1_DeleteAttachmentRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_DeleteAttachmentResponse> {
        try await call("POST", ["beacons", request.message.beacon, "attachments", String(request.message.index), "delete"], request, context)
    }

    func setBeaconVisibility(request: Request<Sotto_Admin_V1_SetBeaconVisibilityRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_SetBeaconVisibilityResponse> {
        try await call("POST", ["beacons", request.message.beacon, "visibility"], request, context)
    }

    func decommissionBeacon(request: Request<Sotto_Admin_V1_DecommissionBeaconRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_DecommissionBeaconResponse> {
        try await call("POST", ["beacons", request.message.beacon, "decommission"], request, context)
    }

    // MARK: Audit and live views

    func listAudit(request: Request<Sotto_Admin_V1_ListAuditRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_ListAuditResponse> {
        try await call("GET", ["audit"], request, context, query: request.message.hasLimit ? String(request.message.limit) : nil, queryName: "limit")
    }

    func getLiveView(request: Request<Sotto_Admin_V1_LiveViewRequest>, context: ServerContext) async throws -> Response<Sotto_Admin_V1_LiveView> {
        try await call("GET", ["projects", request.message.project, "live"], request, context)
    }

    func watchLive(request: Request<Sotto_Admin_V1_LiveViewRequest>, context: ServerContext) async throws -> StreamingServerResponse<Sotto_Admin_V1_LivePoint> {
        let response = try await answer("GET", ["projects", request.message.project, "live", "events"], request, context, body: nil, query: nil, queryName: "")
        guard let events = response.events else { throw RPCError(code: .internalError, message: "the live view gave no events") }
        return StreamingServerResponse { writer in
            do {
                for await point in events.points {
                    try Task.checkCancellation()
                    try await writer.write(Self.message(point))
                }
            } catch {
                await events.stop()
                throw error
            }
            await events.stop()
            return [:]
        }
    }

    // MARK: The HTTP API underneath

    /// Calls the endpoint `method /api/PATH` with the request (or `body`) as its JSON body, and reads its answer.
    private func call<In: SwiftProtobuf.Message, Out: SwiftProtobuf.Message>(
        _ method: String, _ path: [String], _ request: ServerRequest<In>, _ context: ServerContext,
        body: (any SwiftProtobuf.Message)? = nil, query: String? = nil, queryName: String = "project"
    ) async throws -> ServerResponse<Out> {
        let response = try await answer(method, path, request, context, body: method == "POST" ? (body ?? request.message) : nil,
                                        query: query, queryName: queryName)
        do {
            return ServerResponse(message: try Out(jsonUTF8Bytes: response.body, options: Self.decoding))
        } catch {
            throw RPCError(code: .internalError, message: "the admin API's answer does not fit \(Out.protoMessageName): \(error)")
        }
    }

    private func answer<In: SwiftProtobuf.Message>(_ method: String, _ path: [String], _ request: ServerRequest<In>, _ context: ServerContext,
                                                   body: (any SwiftProtobuf.Message)?, query: String?, queryName: String) async throws -> AdminResponse {
        guard let authorization = request.metadata[stringValues: "authorization"].first(where: { _ in true }) else {
            throw RPCError(code: .unauthenticated, message: "an operator's credential is needed in the metadata 'authorization: Bearer CREDENTIAL' (sotto admin operator create)")
        }
        // A path's variable parts are ids: one segment each, nothing a path or a query could be made of.
        for segment in path where segment.isEmpty || segment.contains(where: { "/?#%&".contains($0) }) || segment.utf8.count > 256 {
            throw RPCError(code: .invalidArgument, message: segment.isEmpty ? "an id is missing" : "'\(segment.prefix(64))' is not an id")
        }
        var target = "/api/" + path.joined(separator: "/")
        if let query {
            target += "?\(queryName)=" + (query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        }
        var json: [UInt8] = []
        if let body {
            do { json = try body.jsonUTF8Bytes() } catch {
                throw RPCError(code: .invalidArgument, message: "the request cannot be read: \(error)")
            }
        }
        let response = await api.handle(AdminRequest(method: method, target: target, headers: [("authorization", authorization)],
                                                     body: json, peer: Self.peer(context.remotePeer)))
        guard (200..<300).contains(response.status) else {
            let message = response.json?["error"] as? String ?? "HTTP status \(response.status)"
            let live = path.last == "events" && response.status == 503
            throw RPCError(code: live ? .resourceExhausted : Self.code(forStatus: response.status), message: message)
        }
        return response
    }

    static let decoding: JSONDecodingOptions = {
        var options = JSONDecodingOptions()
        options.ignoreUnknownFields = true
        return options
    }()

    /// The gRPC code of an HTTP status of the admin API.
    static func code(forStatus status: Int) -> RPCError.Code {
        switch status {
        case 400, 413: return .invalidArgument
        case 401: return .unauthenticated
        case 403: return .permissionDenied
        case 404: return .notFound
        case 409: return .alreadyExists
        case 429: return .resourceExhausted
        case 503: return .unavailable
        default: return .internalError
        }
    }

    /// A gRPC peer (`ipv4:127.0.0.1:50000`, `ipv6:[::1]:50000`, `unix:PATH`) as the HTTP API names peers: its address
    /// without the port, or `unix`.
    static func peer(_ remote: String) -> String {
        if remote.hasPrefix("ipv4:") {
            let address = remote.dropFirst(5)
            return String(address.split(separator: ":").first ?? address)
        }
        if remote.hasPrefix("ipv6:"), let open = remote.firstIndex(of: "["), let close = remote.firstIndex(of: "]"), open < close {
            return String(remote[remote.index(after: open)..<close])
        }
        return remote.hasPrefix("unix:") ? "unix" : remote
    }

    static func message(_ point: LivePoint) -> Sotto_Admin_V1_LivePoint {
        var message = Sotto_Admin_V1_LivePoint()
        message.time = point.time
        message.sessions = Int32(clamping: point.sessions)
        message.publications = Int32(clamping: point.publications)
        message.subscriptions = Int32(clamping: point.subscriptions)
        message.sightingsPerSecond = point.sightingsPerSecond
        message.foundPerSecond = point.foundPerSecond
        message.lostPerSecond = point.lostPerSecond
        message.invalidTokensPerSecond = point.invalidTokensPerSecond
        message.rateLimitedPerSecond = point.rateLimitedPerSecond
        if let snr = point.medianSNR { message.medianSnr = snr }
        return message
    }
}

/// The admin API's gRPC listener (`sotto serve --admin-grpc ADDR`): `AdminGRPCService` on its own address,
/// beside the HTTP/JSON listener of `--admin` (a page speaks HTTP/1.1, gRPC needs HTTP/2; Consul, for one, also
/// serves its HTTP and gRPC APIs on two ports). Loopback or a Unix socket by default, TLS beyond loopback (ALPN
/// `grpc-exp`, `h2`). A connection has ``TransportLimits/prefaceTimeout`` to send HTTP/2's preface; at most
/// ``TransportLimits/maxHTTPConnections`` are held at once; a connection idle for ``TransportLimits/idleTimeout``
/// is closed.
public struct AdminGRPCListener: HTTP2ServerTransport.ListenerFactory {
    /// Where it listens.
    public let endpoint: MatcherAddress
    let sslContext: NIOSSLContext?
    let limits: TransportLimits
    let held = AdminConnections()

    public var eventLoopGroup: any EventLoopGroup { MultiThreadedEventLoopGroup.singleton }

    /// - Parameters:
    ///   - endpoint: where to listen.
    ///   - tls: certificate and key; required beyond loopback.
    ///   - limits: the preface time-out, the connection cap and the idle time-out.
    /// - Throws: `MatcherServerError.tlsRequired` beyond loopback without TLS, or why the TLS files cannot be read.
    public init(endpoint: MatcherAddress, tls: MatcherServer.TLS?, limits: TransportLimits = TransportLimits()) throws {
        guard tls != nil || endpoint.isLocal else { throw MatcherServerError.tlsRequired(endpoint.description) }
        // Only a stale socket is removed to bind again.
        if case .unix(let path) = endpoint { try UnixSocketFile.claim(path) }
        self.endpoint = endpoint
        self.sslContext = try tls.map { try GuardedListener.sslContext($0) }
        self.limits = limits
    }

    /// Serves `api` over gRPC until cancelled (then its connections and calls end at once: a live view's stream
    /// would keep a graceful shutdown waiting); `onListening` gets the bound address (`HOST:PORT` or `unix:PATH`).
    /// - Throws: why it cannot bind.
    public func serve(api: AdminAPI, onListening: @escaping @Sendable (String) -> Void = { _ in }) async throws {
        var config = HTTP2ServerTransport.Custom<AdminGRPCListener>.Config.defaults
        config.rpc.maxRequestPayloadSize = AdminAPI.maxBodyBytes
        config.connection.maxIdleTime = .nanoseconds(Int64(limits.idleTimeout * 1e9))
        let transport = HTTP2ServerTransport.Custom(listenerFactory: self, config: config)
        let server = GRPCServer(transport: transport, services: [AdminGRPCService(api: api)])
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                do { try await server.serve() } catch where Task.isCancelled {}
            }
            group.addTask {
                guard let bound = await transport.listeningAddress else { return }
                if let ipv4 = bound.ipv4 { onListening("\(ipv4.host):\(ipv4.port)") }
                else if let ipv6 = bound.ipv6 { onListening("[\(ipv6.host)]:\(ipv6.port)") }
                else if let unix = bound.unixDomainSocket { onListening("unix:\(unix.path)") }
                else { onListening("\(bound)") }
            }
        }
    }

    public func makeListeningChannel(listenerConfigurator: HTTP2ServerTransport.ListenerConfigurator,
                                     connectionConfigurator: HTTP2ServerTransport.ConnectionConfigurator) async throws
        -> NIOAsyncChannel<HTTP2ServerTransport.ConnectionConfigurator.ConnectionChannel, Never> {
        let sslContext = self.sslContext, limits = self.limits, held = self.held
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelInitializer { channel in listenerConfigurator.configure(channel: channel) }
        let initializer: @Sendable (any Channel) -> EventLoopFuture<HTTP2ServerTransport.ConnectionConfigurator.ConnectionChannel> = { channel in
            channel.eventLoop.makeCompletedFuture {
                let (count, _) = held.count.add(1, ordering: .relaxed)
                channel.closeFuture.whenComplete { _ in held.count.subtract(1, ordering: .relaxed) }
                guard count <= limits.maxHTTPConnections else { throw ChannelError.inputClosed }
                if let sslContext { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext)) }
                try channel.pipeline.syncOperations.addHandler(PrefaceDeadlineHandler(timeout: limits.prefaceTimeout, onTimeout: {}))
            }.flatMap {
                connectionConfigurator.configure(channel: channel, tls: sslContext == nil ? .none : .configured(requireALPN: false))
            }.flatMapErrorThrowing { error in
                channel.close(promise: nil)
                throw error
            }
        }
        switch endpoint {
        case .tcp(let host, let port):
            return try await bootstrap.bind(host: host == "localhost" ? "127.0.0.1" : host, port: port, childChannelInitializer: initializer)
        case .unix(let path):
            return try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
        }
    }
}
