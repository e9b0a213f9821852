import Foundation
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

    /// Moves the clocks forward to a total shift of `seconds` (no change if they are there already or beyond).
    /// - Parameter seconds: the total shift (s); not a finite number: no change.
    /// - Returns: whether the clocks moved.
    @discardableResult
    public func advance(to seconds: Double) -> Bool {
        guard seconds.isFinite else { return false }
        return shift.withLock { current in
            guard seconds > current else { return false }
            current = seconds
            return true
        }
    }

    /// Follows the total shift (s, a decimal number) written in the file at `path`, read every `interval` s
    /// until the task is cancelled: how a test outside the process moves the clocks of `sotto serve` (its
    /// hidden `--time-shift-file`). A missing or unreadable file, or a number below the current shift, is no
    /// change.
    /// - Parameters:
    ///   - path: the file a test writes.
    ///   - interval: seconds between reads.
    ///   - onChange: called with the new total shift (s) each time the clocks move.
    public func follow(file path: String, every interval: Double = 0.1,
                       onChange: @escaping @Sendable (Double) -> Void = { _ in }) -> Task<Void, Never> {
        Task { [self] in
            while !Task.isCancelled {
                if let data = FileManager.default.contents(atPath: path),
                   let text = String(data: data, encoding: .utf8), let seconds = Double(text.trimmingCharacters(in: .whitespacesAndNewlines)),
                   advance(to: seconds) {
                    onChange(seconds)
                }
                try? await Task.sleep(for: .seconds(interval))
            }
        }
    }
}
