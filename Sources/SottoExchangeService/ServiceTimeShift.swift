import Synchronization

/// Test hook: how far (s) a running service's clocks have been moved forward, both its monotonic clock (the
/// matcher's deadlines) and its wall clock (the time base of rotating beacons), so that a test runs a service
/// "minutes or hours after it started" without waiting. Shared by reference: the test keeps it and moves it
/// while the service runs. Streams' silence and the shared log's timings stay on the real clocks.
public final class ServiceTimeShift: Sendable {
    private let shift = Mutex<Double>(0)

    /// No shift yet.
    public init() {}

    /// Seconds the service's clocks have been moved forward so far.
    public var seconds: Double { shift.withLock { $0 } }

    /// Moves the service's clocks forward.
    /// - Parameter seconds: how far (s, finite, not negative: monotonic time never goes back).
    public func advance(by seconds: Double) {
        precondition(seconds.isFinite && seconds >= 0, "a time shift only moves forward")
        shift.withLock { $0 += seconds }
    }
}
