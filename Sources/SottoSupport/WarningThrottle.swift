import Synchronization

/// Repeated warnings rate-limited with counts: the first warning of a kind is said at once, the next ones
/// within ``interval`` of it are held back and counted, and the next one said after that names how many
/// were held back. ``finish()`` gives the last held-back warning of each kind with its count, so that
/// nothing is lost without a word (a pure value: the caller gives the clock and prints).
public struct WarningThrottle: Sendable {
    /// Shortest time between two warnings of one kind said (s).
    public let interval: Double
    private var kinds: [String: Kind] = [:]
    /// Kinds in the order first seen, for ``finish()``.
    private var order: [String] = []

    private struct Kind: Sendable {
        var lastSaid: Double
        var held: Int
        var lastHeld: String?
    }

    /// A throttle saying at most one warning of each kind every `interval` seconds.
    /// - Parameter interval: Shortest time between two warnings of one kind said (s).
    public init(interval: Double = 30) {
        self.interval = interval
    }

    /// What to say for `message` of `kind` at `time`, or nil to hold it back.
    /// - Parameters:
    ///   - message: The warning as it would be said.
    ///   - kind: What makes two warnings the same (e.g. "own token not heard", a device error's text).
    ///   - time: Now, on any clock that does not go back (s).
    /// - Returns: The warning to say (with the count held back since the last one said), or nil.
    public mutating func admit(_ message: String, kind: String, at time: Double) -> String? {
        guard var state = kinds[kind] else {
            kinds[kind] = Kind(lastSaid: time, held: 0)
            order.append(kind)
            return message
        }
        if time - state.lastSaid < interval {
            state.held += 1
            state.lastHeld = message
            kinds[kind] = state
            return nil
        }
        let said = state.held == 0 ? message : message + Self.suffix(state.held, since: time - state.lastSaid)
        kinds[kind] = Kind(lastSaid: time, held: 0)
        return said
    }

    /// The last warning held back of each kind, with how many were, in the order the kinds were first
    /// seen; afterwards nothing is held.
    /// - Returns: The warnings to say at the end.
    public mutating func finish() -> [String] {
        var lines: [String] = []
        for kind in order {
            guard var state = kinds[kind], state.held > 0, let last = state.lastHeld else { continue }
            lines.append(last + " (\(state.held) like it since the last said, held back)")
            state.held = 0
            state.lastHeld = nil
            kinds[kind] = state
        }
        return lines
    }

    private static func suffix(_ held: Int, since seconds: Double) -> String {
        " (\(held) more like it in the last \(Int(seconds.rounded())) s, held back)"
    }
}

/// A ``WarningThrottle`` shared by the callbacks of a long-running command: warnings are said through
/// `say` on the monotonic clock.
public final class WarningGate: Sendable {
    private let throttle: Mutex<WarningThrottle>
    private let say: @Sendable (String) -> Void
    private let origin = ContinuousClock.now

    /// A gate saying at most one warning of each kind every `interval` seconds through `say`.
    /// - Parameters:
    ///   - interval: Shortest time between two warnings of one kind said (s).
    ///   - say: Prints a warning (e.g. to standard error).
    public init(interval: Double = 30, say: @escaping @Sendable (String) -> Void) {
        throttle = Mutex(WarningThrottle(interval: interval))
        self.say = say
    }

    /// Says `message` now, or holds it back and counts it.
    /// - Parameters:
    ///   - message: The warning.
    ///   - kind: What makes two warnings the same (default: the message itself).
    public func warn(_ message: String, kind: String? = nil) {
        let elapsed = ContinuousClock.now - origin
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        if let line = throttle.withLock({ $0.admit(message, kind: kind ?? message, at: seconds) }) { say(line) }
    }

    /// Says the last warning held back of each kind, with its count (at the end of the command).
    public func finish() {
        for line in throttle.withLock({ $0.finish() }) { say(line) }
    }
}
