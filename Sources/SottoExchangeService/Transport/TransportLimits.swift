import Foundation

/// What a peer can make the service's transport hold before it has authenticated: connections (in all and
/// per source address), time without an HTTP/2 preface, idle time, streams per connection and streams that
/// have not said Hello yet. Every bound is a number an attacker meets first; the defaults fit a node serving
/// 10 000 sessions over a few hundred connections.
public struct TransportLimits: Sendable, Equatable {
    /// Most connections held at once, gRPC and web together. The process's descriptor limit (`RLIMIT_NOFILE`)
    /// lowers it, leaving ``reservedDescriptors`` for the store, the metrics listener and the runtime.
    public var maxConnections = 4_096
    /// Most connections from one IP address (Unix-socket peers are not counted per address).
    public var maxConnectionsPerAddress = 256
    /// Descriptors kept free of connections (counted below the descriptor limit).
    public var reservedDescriptors = 64
    /// Seconds a new connection has to complete its TLS handshake (if any) and send the 24-byte HTTP/2
    /// preface; a connection that has not is closed.
    public var prefaceTimeout = 5.0
    /// Seconds a connection may hold no stream before it is closed (HTTP/2 GOAWAY).
    public var idleTimeout = 30.0
    /// Streams a connection may have open at once (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`).
    public var maxStreamsPerConnection = 2_048
    /// Seconds a new stream has to say Hello (with a valid key) before it is ended.
    public var helloTimeout = 5.0
    /// Streams that have not said Hello yet, per connection and over the whole node; more are refused at once
    /// with RESOURCE_EXHAUSTED.
    public var maxStreamsWithoutHelloPerConnection = 8
    public var maxStreamsWithoutHello = 256
    /// Seconds the metrics listener (`/metrics`, `/ready`, `/health`) gives a connection to send its request
    /// and receive the answer; an incomplete request is closed then.
    public var httpRequestTimeout = 5.0
    /// Connections the metrics listener holds at once; more are closed at once.
    public var maxHTTPConnections = 64

    public init() {}

    /// The connection cap once the descriptor limit is counted: `maxConnections`, or the soft
    /// `RLIMIT_NOFILE` minus ``reservedDescriptors`` if lower (at least 1).
    /// - Parameter descriptorLimit: the soft descriptor limit; nil reads the process's own.
    public func effectiveMaxConnections(descriptorLimit: Int? = nil) -> Int {
        let limit = descriptorLimit ?? Self.descriptorLimit()
        return max(1, min(maxConnections, limit - reservedDescriptors))
    }

    /// The process's soft `RLIMIT_NOFILE` (descriptors it may open).
    public static func descriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1_024 }
        return limit.rlim_cur == rlim_t.max ? Int.max / 2 : Int(clamping: limit.rlim_cur)  // RLIM_INFINITY
    }
}
