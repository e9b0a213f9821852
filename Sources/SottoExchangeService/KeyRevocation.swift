import Foundation
import Logging
import ServiceLifecycle

extension MatcherServer {
    /// Cuts off the streams of keys revoked in the store (by `sotto admin key revoke`, on any machine):
    /// every ``ServiceConfiguration/revocationPollInterval`` while this node holds streams, one query for
    /// the keys, and the revoked ones among those in use go. Every node of a cluster does the same for its
    /// own streams, so a revocation bites everywhere within the interval plus a query.
    func followRevocations() async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: .seconds(configuration.revocationPollInterval))
            let inUse = await host.keyIDsInUse
            guard !inUse.isEmpty else { continue }
            let records: [APIKeyRecord]
            do { records = try await store.keys(project: nil) } catch {
                logger.debug("checking for revoked keys: \(error)")
                continue
            }
            // Revoked, rotated past their overlap, or of a disabled project (issue 34): all cut off alike.
            let now = Date().timeIntervalSince1970
            var disabled: Set<String> = []
            if records.contains(where: { inUse.contains($0.id) && !$0.isRetired(at: now) }) {
                guard let projects = try? await store.projects() else { continue }
                disabled = Set(projects.lazy.filter(\.disabled).map(\.id))
            }
            let revoked = Set(records.lazy.filter { inUse.contains($0.id) && ($0.isRetired(at: now) || disabled.contains($0.projectID)) }.map(\.id))
            if !revoked.isEmpty { await host.revoke(keys: revoked) }
        }
    }
}

/// What audit lines say about a presented key: its public id when it is shaped like one, never its secret
/// (nor text a client chose freely, which could forge log lines).
enum AuditText {
    /// The key's id (hexadecimal, at most 32 characters) or "malformed".
    static func keyID(of presented: String) -> String {
        guard let id = APIKeys.parse(presented)?.id, id.count <= 32, id.allSatisfy(\.isHexDigit) else { return "malformed" }
        return id
    }
}
