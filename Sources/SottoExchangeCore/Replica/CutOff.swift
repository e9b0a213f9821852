/// Why a session's stream was ended by the service.
public enum CutOff: Sendable, Hashable {
    /// The client did not read its stream: more than the outbox holds was waiting.
    case slowReader
    /// No frame (not even a heartbeat) for three heartbeat intervals.
    case silent
    /// No Hello within the Hello timeout of the stream's start.
    case noHello
    /// Another connection resumed the session.
    case replaced
    /// The service is shutting down.
    case shutdown
    /// The session's API key was revoked.
    case revoked
    /// This node lost its database (or the other nodes declared it dead): the session moves to another node.
    case databaseUnreachable
}
