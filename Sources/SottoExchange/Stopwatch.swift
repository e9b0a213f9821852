/// Time on a clock since the stopwatch was made, and sleeping on that clock: how the exchange's actors
/// take an injected `Clock<Duration>` (a monotonic clock live, a manual one in tests) without being generic
/// (the clock is opened once, so that nothing stores an existential instant).
public struct Stopwatch: Sendable {
    /// Seconds since this value was made (s).
    public let elapsed: @Sendable () -> Double
    /// Sleeps this long (s) on the clock; throws when cancelled.
    public let sleep: @Sendable (Double) async throws -> Void

    /// A stopwatch started now on `clock`.
    /// - Parameter clock: the clock it reads and sleeps on.
    public init(_ clock: some Clock<Duration>) {
        let start = clock.now
        elapsed = { start.duration(to: clock.now).inSeconds }
        sleep = { seconds in try await clock.sleep(for: .seconds(seconds)) }
    }
}
