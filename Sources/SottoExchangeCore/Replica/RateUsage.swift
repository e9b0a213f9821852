/// What a node's streams spent of the rate limits over a while: work units per key id and per project id,
/// session opens per key id. Nodes sharing a log report it to each other through the log (the service's
/// `RateLimiter.drainUsage()` and `debit(_:)`); the replica passes it on to every node.
package struct RateUsage: Sendable, Equatable {
    package var keys: [String: Double]
    package var projects: [String: Double]
    package var opens: [String: Double]

    package var isEmpty: Bool { keys.isEmpty && projects.isEmpty && opens.isEmpty }

    package init(keys: [String: Double] = [:], projects: [String: Double] = [:], opens: [String: Double] = [:]) {
        self.keys = keys
        self.projects = projects
        self.opens = opens
    }
}
