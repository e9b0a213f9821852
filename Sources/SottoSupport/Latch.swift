import Dispatch
import Synchronization

/// A one-shot gate between threads: closed until ``open()``, then open for good. Every ``wait()`` returns
/// once it is open, however many threads wait and whether they wait before or after it opened: the end of
/// a capture or playback thread that a signal handler (stopping it) and the command (joining it) both
/// wait for. A semaphore signalled once would let only one of them through and block the other for ever.
public final class Latch: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let opened = Atomic<Bool>(false)

    public init() {}

    /// True once ``open()`` was called.
    public var isOpen: Bool { opened.load(ordering: .acquiring) }

    /// Opens the gate (from any thread); opening it again does nothing.
    public func open() {
        if !opened.exchange(true, ordering: .acquiringAndReleasing) { semaphore.signal() }
    }

    /// Blocks the calling thread until the gate is open (not for Swift's cooperative pool, except for a
    /// wait known to be short).
    public func wait() {
        semaphore.wait()
        semaphore.signal()  // passes the gate on to the next waiter
    }
}
