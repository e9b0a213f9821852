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
