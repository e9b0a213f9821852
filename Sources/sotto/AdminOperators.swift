import ArgumentParser
import Foundation
import SottoExchangeService
import SottoTools

/// `sotto admin operator`: the credentials of the admin API (`sotto serve --admin`), made on the store.
struct AdminOperator: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "operator", abstract: "Create, list and revoke operators (admin API credentials).",
                                                    subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create",
            abstract: "Create an operator; prints its credential once (only its hash is kept).",
            discussion: "The credential logs in to the admin API (sotto serve --admin); it is not a project key, and is refused by the exchange.")
        @OptionGroup var store: StoreOption
        @Argument(help: "Operator name (who, as the audit log says).") var name: String

        func run() async throws {
            do {
                // Shown once: when it cannot be printed, the operator is revoked so no credential stays usable unseen.
                try await store.withStore { store in
                    let (record, secret) = try await store.createOperator(name: name)
                    do { try Output.lineOrThrow(secret) } catch {
                        try await store.revokeOperator(record.id)
                        throw CommandError("\(error); the operator \(record.name) was revoked, since its credential could not be shown")
                    }
                }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List operators (ids and names, never secrets).")
        @OptionGroup var store: StoreOption
        func run() async throws {
            do {
                for record in try await store.withStore({ try await $0.operators() }) {
                    Output.line("\(record.id)\t\(record.revoked ? "revoked" : "active")\t\(record.name)")
                }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke an operator: it can no longer log in, and its console sessions end.")
        @OptionGroup var store: StoreOption
        @Argument(help: "Operator name or id.") var name: String
        func run() async throws {
            do { try await store.withStore { try await $0.revokeOperator(name) } } catch let error as StoreError { throw CommandError(error.description) }
        }
    }
}

/// `sotto admin audit`: the audit log of admin operations, newest first.
struct AdminAudit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "audit", abstract: "Show the audit log of admin operations, newest first (time, who, what, target, outcome).")
    @OptionGroup var store: StoreOption
    @Option(parsing: .unconditional, help: "Most lines to show (1-10000).") var limit: Int = 50

    func validate() throws { try NumericOption("--limit", 1...10_000).check(limit) }

    func run() async throws {
        do {
            let entries = try await store.withStore { try await $0.auditEntries(limit: limit) }
            let format = ISO8601DateFormatter()
            for entry in entries {
                Output.line("\(format.string(from: Date(timeIntervalSince1970: entry.time)))\t\(entry.actor)\t\(entry.action)\t\(entry.target)\t\(entry.outcome)")
            }
        } catch let error as StoreError { throw CommandError(error.description) }
    }
}
