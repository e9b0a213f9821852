/// What one app (a project of the service) holds in the matcher now: read by the service's live views.
public struct AppCensus: Sendable, Hashable {
    /// Open sessions (attached or within their grace period).
    public var sessions = 0
    /// Live publications, by `namespace/type`.
    public var publications: [String: Int] = [:]
    /// Live subscriptions.
    public var subscriptionCount = 0
    /// Live subscriptions, by what their filters include (`namespace/type`, `*` for all the app's own types,
    /// `beacon IDs`, `audio bytes`); a subscription counts once under each of its includes.
    public var subscriptions: [String: Int] = [:]

    /// A census of nothing.
    public init() {}
}

extension MatcherCore {
    /// Per app: its sessions, and its publications and subscriptions by namespace and type. Costs a pass over
    /// the sessions and their operations.
    public func census() -> [String: AppCensus] {
        var apps: [String: AppCensus] = [:]
        for session in sessions.values {
            var census = apps[session.appID] ?? AppCensus()
            census.sessions += 1
            for publication in session.publications.values {
                census.publications["\(publication.message.namespace)/\(publication.message.type)", default: 0] += 1
            }
            census.subscriptionCount += session.subscriptions.count
            for subscription in session.subscriptions.values {
                for include in subscription.filter.includes {
                    let name: String
                    switch include {
                    case .allMyTypes: name = "*"
                    case .namespacedType(let namespace, let type): name = "\(namespace)/\(type)"
                    case .audioBytes: name = "audio bytes"
                    case .beaconIDs: name = "beacon IDs"
                    }
                    census.subscriptions[name, default: 0] += 1
                }
            }
            apps[session.appID] = census
        }
        return apps
    }
}
