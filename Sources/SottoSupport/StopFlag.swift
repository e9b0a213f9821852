import Synchronization

/// A flag set once from any thread or task and read anywhere without locking: a real-time audio thread
/// polls it between periods, an async iterator checks it before delivering an event, a command's loop
/// checks it to end. Setting it twice is harmless; it is never cleared.
public final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    public init() {}
    /// True once ``set()`` was called (acquire: what the setter wrote before is visible).
    public var isSet: Bool { value.load(ordering: .acquiring) }
    /// Sets the flag (release).
    public func set() { value.store(true, ordering: .releasing) }
}

/// Process-wide facts about standard output, which every layer writing to it shares.
public enum StandardOutput {
    /// Set when a write to standard output failed with EPIPE: its reader went away (`sotto send - | head -c 10`).
    /// A command's error is then no failure to report: like other Unix tools, the program ends quietly.
    public static let readerClosed = StopFlag()
}
