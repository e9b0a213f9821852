import Foundation
import SottoExchangeCore
import SottoSupport

/// A store whose admin operations are written to its audit log (who, what, when, outcome): the store that
/// `sotto admin` and the admin API work on. Creations, revocations, registrations and listings are audited,
/// succeeded or failed; the lookups the service makes to authenticate (``key(id:)``, ``project(id:)``,
/// ``operatorRecord(id:)``) and the audit log itself are not.
public struct AuditedStore: ExchangeStore {
    /// The store operated on.
    public let base: any ExchangeStore
    /// Who acts: `operator:NAME` or `local:USER`.
    public let actor: String
    /// The time of an entry, in seconds since 1970.
    let now: @Sendable () -> Double

    /// Wraps `base` so that `actor`'s operations are audited.
    /// - Parameters:
    ///   - base: the store operated on.
    ///   - actor: who acts, as the audit log names them.
    ///   - now: the clock of the entries (seconds since 1970).
    public init(_ base: any ExchangeStore, actor: String, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.base = base
        self.actor = actor
        self.now = now
    }

    /// `sotto admin` on the store: `local:` and the user running it.
    public static func localActor() -> String { "local:" + ProcessInfo.processInfo.userName }

    /// Runs `body`, then writes its outcome; a failure to audit fails the call (the operation is done but
    /// said unaudited).
    func audited<Value: Sendable>(_ action: String, _ target: String, target succeeded: ((Value) -> String)? = nil,
                                  _ body: () async throws(StoreError) -> Value) async throws(StoreError) -> Value {
        let result: Result<Value, StoreError>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        let outcome: String
        var target = target
        switch result {
        case .success(let value):
            outcome = "ok"
            if let succeeded { target = succeeded(value) }
        case .failure(let error): outcome = error.description
        }
        do {
            try await base.appendAudit(AuditEntry(time: now(), actor: actor, action: action, target: target, outcome: outcome))
        } catch {
            if case .success = result { throw .unavailable("\(action) \(target) was done but could not be audited: \(error)") }
        }
        return try result.get()
    }

    public func createProject(name: String, maxSessions: Int) async throws(StoreError) -> Project {
        try await audited("project.create", name) { () throws(StoreError) in try await base.createProject(name: name, maxSessions: maxSessions) }
    }

    public func projects() async throws(StoreError) -> [Project] {
        try await audited("project.list", "") { () throws(StoreError) in try await base.projects() }
    }

    public func createKey(project: String, label: String, ratePerSecond: Double, burst: Double, origins: [String]) async throws(StoreError)
        -> (APIKeyRecord, key: String) {
        // The target names the new key's id on success (never its secret).
        try await audited("key.create", project, target: { "\(project) key \($0.0.id)" }) { () throws(StoreError) in
            try await base.createKey(project: project, label: label, ratePerSecond: ratePerSecond, burst: burst, origins: origins)
        }
    }

    public func keys(project: String?) async throws(StoreError) -> [APIKeyRecord] {
        try await audited("key.list", project ?? "") { () throws(StoreError) in try await base.keys(project: project) }
    }

    public func revokeKey(id: String) async throws(StoreError) {
        try await audited("key.revoke", id) { () throws(StoreError) in try await base.revokeKey(id: id) }
    }

    public func key(id: String) async throws(StoreError) -> APIKeyRecord? { try await base.key(id: id) }
    public func project(id: String) async throws(StoreError) -> Project? { try await base.project(id: id) }

    public func registerBeacon(_ beacon: BeaconRecord) async throws(StoreError) {
        try await audited("beacon.register", Hex.encode(beacon.id)) { () throws(StoreError) in try await base.registerBeacon(beacon) }
    }

    public func addAttachment(beacon: [UInt8], _ attachment: Message) async throws(StoreError) {
        try await audited("beacon.attach", Hex.encode(beacon)) { () throws(StoreError) in try await base.addAttachment(beacon: beacon, attachment) }
    }

    public func beacons() async throws(StoreError) -> [BeaconRecord] {
        try await audited("beacon.list", "") { () throws(StoreError) in try await base.beacons() }
    }

    public func registryVersion() async throws(StoreError) -> Int64 { try await base.registryVersion() }

    public func removeAttachment(beacon: [UInt8], at index: Int) async throws(StoreError) {
        try await audited("beacon.detach", "\(Hex.encode(beacon)) attachment \(index)") { () throws(StoreError) in
            try await base.removeAttachment(beacon: beacon, at: index)
        }
    }

    public func setBeaconPublic(_ beacon: [UInt8], _ isPublic: Bool) async throws(StoreError) {
        try await audited(isPublic ? "beacon.public" : "beacon.unlisted", Hex.encode(beacon)) { () throws(StoreError) in
            try await base.setBeaconPublic(beacon, isPublic)
        }
    }

    public func decommissionBeacon(_ beacon: [UInt8]) async throws(StoreError) {
        try await audited("beacon.decommission", Hex.encode(beacon)) { () throws(StoreError) in try await base.decommissionBeacon(beacon) }
    }

    public func createOperator(name: String) async throws(StoreError) -> (OperatorRecord, secret: String) {
        try await audited("operator.create", name) { () throws(StoreError) in try await base.createOperator(name: name) }
    }

    public func operators() async throws(StoreError) -> [OperatorRecord] {
        try await audited("operator.list", "") { () throws(StoreError) in try await base.operators() }
    }

    public func operatorRecord(id: String) async throws(StoreError) -> OperatorRecord? { try await base.operatorRecord(id: id) }

    public func revokeOperator(_ nameOrID: String) async throws(StoreError) {
        try await audited("operator.revoke", nameOrID) { () throws(StoreError) in try await base.revokeOperator(nameOrID) }
    }

    public func renameProject(_ project: String, to name: String) async throws(StoreError) -> Project {
        try await audited("project.rename", "\(project) to \(name)") { () throws(StoreError) in try await base.renameProject(project, to: name) }
    }

    public func setProjectDisabled(_ project: String, _ disabled: Bool) async throws(StoreError) -> Project {
        try await audited(disabled ? "project.disable" : "project.enable", project) { () throws(StoreError) in
            try await base.setProjectDisabled(project, disabled)
        }
    }

    public func rotateKey(id: String, overlap: Double) async throws(StoreError) -> (APIKeyRecord, key: String) {
        try await audited("key.rotate", id, target: { "\(id) to \($0.0.id), overlap \(overlap) s" }) { () throws(StoreError) in
            try await base.rotateKey(id: id, overlap: overlap)
        }
    }

    public func setKeySessionQuota(id: String, maxSessions: Int?) async throws(StoreError) {
        try await audited("key.quota", "\(id) to \(maxSessions.map(String.init) ?? "the project's")") { () throws(StoreError) in
            try await base.setKeySessionQuota(id: id, maxSessions: maxSessions)
        }
    }

    public func recordKeyUse(id: String) async throws(StoreError) { try await base.recordKeyUse(id: id) }

    public func appendAudit(_ entry: AuditEntry) async throws(StoreError) { try await base.appendAudit(entry) }
    public func auditEntries(limit: Int) async throws(StoreError) -> [AuditEntry] { try await base.auditEntries(limit: limit) }
}
