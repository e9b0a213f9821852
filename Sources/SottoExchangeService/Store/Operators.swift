import Foundation
import SottoSupport

/// An operator of the service: someone (or a tool) who manages projects and keys through the admin API
/// (`sotto serve --admin`). An operator's credential is never a project key: each is refused where the
/// other is expected. Only the secret's SHA-256 is stored.
public struct OperatorRecord: Sendable, Hashable {
    /// The public part of the credential (`sottoadmin_<id>_<secret>`), used to find the record.
    public let id: String
    /// Who the operator is (1 to 100 characters, no control characters), as the audit log names them.
    public let name: String
    /// SHA-256 of the secret part.
    public let secretHash: [UInt8]
    /// A revoked operator can no longer log in; its open console sessions end at their next request.
    public let revoked: Bool

    /// Makes a record (as a store reads it back).
    /// - Parameters:
    ///   - id: the credential's public id.
    ///   - name: the operator's name.
    ///   - secretHash: SHA-256 of the secret part.
    ///   - revoked: whether the credential was revoked.
    public init(id: String, name: String, secretHash: [UInt8], revoked: Bool) {
        self.id = id
        self.name = name
        self.secretHash = secretHash
        self.revoked = revoked
    }

    /// Checks an operator's name: as a project's, 1 to 100 characters, no '/' and no control characters.
    /// - Parameter name: the name to check.
    /// - Throws: `StoreError.invalid` saying what a name may be.
    public static func checkName(_ name: String) throws(StoreError) {
        guard !name.isEmpty, name.count <= 100, !name.contains("/"), !StoreText.hasControlCharacters(name) else {
            throw .invalid("an operator name is 1 to 100 characters, no '/' and no control characters (newline, tab)")
        }
    }
}

/// Operators' credentials: `sottoadmin_<id>_<secret>`, 8 bytes of id and 32 bytes of secret from the system
/// CSPRNG, hex. As API keys (``APIKeys``): only the secret's SHA-256 is stored, compared in constant time.
/// The prefix differs from a project key's (`sotto_`), so neither parses as the other.
public enum OperatorCredentials {
    static let prefix = "sottoadmin_"

    /// A new credential: its public id, full text (shown once) and the hash to store.
    public static func generate() -> (id: String, secret: String, secretHash: [UInt8]) {
        var generator = SystemRandomNumberGenerator()
        let id = Hex.encode((0..<8).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let secret = Hex.encode((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        return (id, prefix + id + "_" + secret, APIKeys.hash(secret))
    }

    /// The id and secret of a credential's text, or nil when it is not shaped like one (a project key is not).
    /// - Parameter text: the presented credential.
    public static func parse(_ text: String) -> (id: String, secret: String)? {
        guard text.hasPrefix(prefix), text.utf8.count < 200 else { return nil }
        let parts = text.dropFirst(prefix.count).split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    /// The operator whose credential `text` is, or nil for an unknown, malformed or revoked one (a project
    /// key included). The work done is the same whether the id exists or not.
    /// - Parameters:
    ///   - text: the presented credential.
    ///   - store: where operators are kept.
    public static func authenticate(_ text: String, in store: any ExchangeStore) async throws(StoreError) -> OperatorRecord? {
        let parsed = parse(text)
        var record: OperatorRecord?
        if let parsed { record = try await store.operatorRecord(id: parsed.id) }
        let presented = APIKeys.hash(parsed?.secret ?? text)
        let expected = record?.secretHash ?? [UInt8](repeating: 0, count: presented.count)
        guard APIKeys.constantTimeEqual(presented, expected), let record, !record.revoked else { return nil }
        return record
    }
}

/// One line of the audit log: who did what to what, when, and how it ended. Every admin operation writes
/// one, whether through the admin API or `sotto admin` on the store.
public struct AuditEntry: Sendable, Hashable, Codable {
    /// When, in seconds since 1970 (UTC).
    public let time: Double
    /// Who: `operator:NAME` through the admin API, `local:USER` for `sotto admin` on the store.
    public let actor: String
    /// What, as `noun.verb` (`key.create`, `project.list`, `login`).
    public let action: String
    /// On what: a project, key or operator id or name ('' when none).
    public let target: String
    /// `ok`, or why it failed.
    public let outcome: String

    /// Makes an entry.
    /// - Parameters:
    ///   - time: seconds since 1970.
    ///   - actor: who acted.
    ///   - action: what they did.
    ///   - target: on what.
    ///   - outcome: `ok` or the failure.
    public init(time: Double, actor: String, action: String, target: String, outcome: String) {
        self.time = time
        self.actor = Self.clip(actor)
        self.action = Self.clip(action)
        self.target = Self.clip(target)
        self.outcome = Self.clip(outcome)
    }

    /// At most 300 characters, control characters replaced (an entry is one line, whatever a client sent).
    static func clip(_ text: String) -> String {
        let cleaned = String(String.UnicodeScalarView(text.unicodeScalars.map { $0.properties.generalCategory == .control ? "?" : $0 }))
        return cleaned.count <= 300 ? cleaned : String(cleaned.prefix(300)) + "..."
    }
}
