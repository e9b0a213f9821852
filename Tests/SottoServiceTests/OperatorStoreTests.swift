import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoTestSupport
import Testing

/// Operators (admin API credentials) and the audit log, on every store (issue 34).
@Suite(.timeLimit(.minutes(1))) struct OperatorStoreTests {
    @Test(arguments: StoreKind.allCases)
    func operatorsAreCreatedHashedAuthenticatedAndRevoked(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let (alice, secret) = try await store.createOperator(name: "alice")
        #expect(secret.hasPrefix("sottoadmin_\(alice.id)_"))
        // Stored hashed: the record holds the SHA-256 of the secret part, never the text.
        let parsed = try #require(OperatorCredentials.parse(secret))
        #expect(alice.secretHash == APIKeys.hash(parsed.secret))
        #expect(try await store.operatorRecord(id: alice.id) == alice)
        #expect(try await OperatorCredentials.authenticate(secret, in: store)?.name == "alice")
        // A wrong secret with the right id, another shape, or a project key: refused.
        #expect(try await OperatorCredentials.authenticate("sottoadmin_\(alice.id)_" + String(repeating: "0", count: 64), in: store) == nil)
        #expect(try await OperatorCredentials.authenticate("", in: store) == nil)
        _ = try await store.createProject(name: "museum", maxSessions: 5)
        let (_, projectKey) = try await store.createKey(project: "museum", label: "", ratePerSecond: 1, burst: 1)
        #expect(try await OperatorCredentials.authenticate(projectKey, in: store) == nil)
        // And the operator's credential is not a project key.
        #expect(try await APIKeys.authenticate(secret, in: store) == nil)

        await #expect(throws: StoreError.duplicateOperator("alice")) { _ = try await store.createOperator(name: "alice") }
        await #expect(throws: StoreError.invalid("an operator name is 1 to 100 characters, no '/' and no control characters (newline, tab)")) {
            _ = try await store.createOperator(name: "two\nlines")
        }
        let (bob, _) = try await store.createOperator(name: "bob")
        #expect(try await store.operators().map(\.name) == ["alice", "bob"])
        try await store.revokeOperator("alice")
        try await store.revokeOperator(bob.id)
        #expect(try await store.operators().map(\.revoked) == [true, true])
        #expect(try await OperatorCredentials.authenticate(secret, in: store) == nil)
        await #expect(throws: StoreError.unknownOperator("carol")) { try await store.revokeOperator("carol") }
    }

    @Test(arguments: StoreKind.allCases)
    func everyAdminOperationIsAuditedWithItsOutcome(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let audited = AuditedStore(store, actor: "operator:alice", now: { 1_800_000_000 })
        let project = try await audited.createProject(name: "museum", maxSessions: 5)
        let (key, _) = try await audited.createKey(project: "museum", label: "<script>alert(1)</script>", ratePerSecond: 1, burst: 1)
        _ = try await audited.keys(project: project.id)
        try await audited.revokeKey(id: key.id)
        await #expect(throws: StoreError.unknownKey("nope")) { try await audited.revokeKey(id: "nope") }
        // Lookups made to authenticate are not admin operations.
        _ = try await audited.key(id: key.id)
        let entries = try await store.auditEntries(limit: 10)
        #expect(entries.map(\.action) == ["key.revoke", "key.revoke", "key.list", "key.create", "project.create"])
        #expect(entries.allSatisfy { $0.actor == "operator:alice" && $0.time == 1_800_000_000 })
        #expect(entries.map(\.outcome) == ["no API key 'nope'", "ok", "ok", "ok", "ok"])
        #expect(entries[3].target == "museum key \(key.id)")
        #expect(entries[1].target == key.id)
        #expect(try await store.auditEntries(limit: 2).map(\.target) == ["nope", key.id])
        // One line per entry, whatever the caller sent.
        await #expect(throws: StoreError.unknownOperator("evil\nforged line")) { try await audited.revokeOperator("evil\nforged line") }
        let forged = try #require(try await store.auditEntries(limit: 1).first)
        #expect(forged.target == "evil?forged line")
        #expect(!forged.outcome.contains("\n"))
    }

    @Test(arguments: StoreKind.allCases)
    func projectsAreRenamedAndDisabledAndKeysRotatedWithAnOverlap(_ kind: StoreKind) async throws {
        let (store, close) = try await kind.makeStore()
        defer { Task { await close() } }
        let museum = try await store.createProject(name: "museum", maxSessions: 5)
        _ = try await store.createProject(name: "shop", maxSessions: 5)
        let renamed = try await store.renameProject("museum", to: "gallery")
        #expect(renamed.id == museum.id && renamed.name == "gallery")
        #expect(try await store.project(id: museum.id)?.name == "gallery")
        await #expect(throws: StoreError.duplicateProject("shop")) { _ = try await store.renameProject("gallery", to: "shop") }
        await #expect(throws: StoreError.unknownProject("museum")) { _ = try await store.renameProject("museum", to: "x") }
        #expect(try await store.renameProject("gallery", to: "gallery").name == "gallery", "its own name again is no clash")

        let (old, oldKey) = try await store.createKey(project: "gallery", label: "kiosk", ratePerSecond: 7, burst: 9, origins: ["https://a.example"])
        #expect(old.lastUsed == nil)
        // Disabled: its keys open nothing; enabled again: they do.
        #expect(try await store.setProjectDisabled("gallery", true).disabled)
        #expect(try await store.projects().first { $0.id == museum.id }?.disabled == true)
        #expect(try await APIKeys.authenticate(oldKey, in: store) == nil)
        #expect(try await store.setProjectDisabled(museum.id, false).disabled == false)
        #expect(try await APIKeys.authenticate(oldKey, in: store) != nil)
        // Its use is noted (not waited for by the session).
        #expect(await eventually(5) { (try? await store.key(id: old.id))??.lastUsed != nil })

        // Rotated with an hour's overlap: both work, the new one with the old one's settings.
        let (new, newKey) = try await store.rotateKey(id: old.id, overlap: 3_600)
        #expect(new.id != old.id && new.label == "kiosk" && new.ratePerSecond == 7 && new.burst == 9 && new.origins == ["https://a.example"])
        #expect(try await APIKeys.authenticate(newKey, in: store)?.keyID == new.id)
        #expect(try await APIKeys.authenticate(oldKey, in: store)?.keyID == old.id)
        let expires = try #require(try await store.key(id: old.id)?.expires)
        #expect(abs(expires - (Date().timeIntervalSince1970 + 3_600)) < 60)
        // Rotated again with no overlap: the old one stops at once; a retired key cannot be rotated.
        let (newer, newerKey) = try await store.rotateKey(id: new.id, overlap: 0)
        #expect(try await APIKeys.authenticate(newKey, in: store) == nil)
        #expect(try await APIKeys.authenticate(newerKey, in: store)?.keyID == newer.id)
        await #expect(throws: StoreError.invalid("key \(new.id) is revoked or expired: create a new one")) { _ = try await store.rotateKey(id: new.id, overlap: 10) }
        await #expect(throws: StoreError.unknownKey("nope")) { _ = try await store.rotateKey(id: "nope", overlap: 10) }
        await #expect(throws: StoreError.invalid("the overlap is 0 to 2592000 s (30 days)")) { _ = try await store.rotateKey(id: newer.id, overlap: -1) }
    }
}
