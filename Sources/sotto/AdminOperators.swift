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
    @OptionGroup var store: AdminStoreOption
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

/// Where `sotto admin` works: on the store directly (`--store`, the default; audited as `local:USER`), or
/// through the admin API of a running `sotto serve --admin` (`--server`; audited there as the operator whose
/// credential is in `SOTTO_ADMIN_SECRET` or `--secret-file`, never on the command line).
struct AdminStoreOption: ParsableArguments {
    @OptionGroup var store: StoreOption
    @Option(help: ArgumentHelp("Work through the admin API of sotto serve --admin: http://HOST:PORT (loopback), https://HOST:PORT or unix:PATH.",
                               discussion: "The operator's credential (sotto admin operator create) is read from SOTTO_ADMIN_SECRET or --secret-file."))
    var server: String?
    @Option(help: "With --server: a file (not readable by others) holding the operator's credential, instead of SOTTO_ADMIN_SECRET.")
    var secretFile: String?

    func validate() throws {
        if server != nil && store.store != nil { throw ValidationError("give --server (the admin API) or --store (the store directly), not both") }
        if secretFile != nil && server == nil { throw ValidationError("--secret-file goes with --server") }
    }

    /// The operator's credential: the file's first line, or SOTTO_ADMIN_SECRET.
    func secret() throws -> String {
        if let secretFile {
            guard let permissions = (try? FileManager.default.attributesOfItem(atPath: secretFile))?[.posixPermissions] as? Int,
                  let data = FileManager.default.contents(atPath: secretFile) else {
                throw ValidationError("cannot read --secret-file \(secretFile)")
            }
            guard permissions & 0o077 == 0 else { throw ValidationError("\(secretFile) is readable by others: chmod 600 \(secretFile)") }
            let text = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
            guard !text.isEmpty else { throw ValidationError("\(secretFile) is empty") }
            return text.trimmingCharacters(in: .whitespaces)
        }
        guard let text = ProcessInfo.processInfo.environment["SOTTO_ADMIN_SECRET"], !text.isEmpty else {
            throw ValidationError("--server needs the operator's credential in SOTTO_ADMIN_SECRET or --secret-file (never on the command line)")
        }
        return text
    }

    /// Runs `body` on the store, or on the admin API with `--server`.
    func withStore<Value>(_ body: (any ExchangeStore) async throws -> Value) async throws -> Value {
        guard let server else { return try await store.withStore(body) }
        let remote: RemoteAdminStore
        do { remote = try RemoteAdminStore(server: server, secret: try secret()) } catch let error as StoreError { throw ValidationError(error.description) }
        return try await body(remote)
    }
}

extension AdminProject {
    struct Rename: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rename", abstract: "Rename a project (its id, keys and sessions stay).")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name or id.") var project: String
        @Argument(help: "Its new name.") var name: String
        func run() async throws {
            do {
                let renamed = try await store.withStore { try await $0.renameProject(project, to: name) }
                Output.line("\(renamed.id)\t\(renamed.name)")
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "disable", abstract: "Disable a project: its keys open no session, and its sessions end within a second.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name or id.") var project: String
        func run() async throws {
            do { _ = try await store.withStore { try await $0.setProjectDisabled(project, true) } } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "enable", abstract: "Enable a disabled project again.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name or id.") var project: String
        func run() async throws {
            do { _ = try await store.withStore { try await $0.setProjectDisabled(project, false) } } catch let error as StoreError { throw CommandError(error.description) }
        }
    }
}

extension AdminKey {
    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate",
            abstract: "Rotate a key: prints a new key (same project, label, limits and origins) once; the old one works for --overlap seconds more.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Key id (the part after sotto_, before the second _).") var id: String
        @Option(parsing: .unconditional, help: "Seconds the old key keeps working (0-2592000).") var overlap: Double = 3_600

        func validate() throws { try NumericOption("--overlap", 0...2_592_000, unit: "s").check(overlap) }

        func run() async throws {
            do {
                try await store.withStore { store in
                    let (record, key) = try await store.rotateKey(id: id, overlap: overlap)
                    do { try Output.lineOrThrow(key) } catch {
                        try await store.revokeKey(id: record.id)
                        throw CommandError("\(error); the new key \(record.id) was revoked, since its secret could not be shown; the old key still stops after the overlap")
                    }
                }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }
}

extension AdminBeacon {
    struct Detach: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "detach", abstract: "Delete a beacon's attachment (by its index in `beacon list`, from 0).")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Beacon ID as hex.") var id: String
        @Argument(help: "The attachment's index (0 is the first `beacon list` shows).") var index: Int

        func validate() throws { try NumericOption("index", 0...9_999).check(index) }

        func run() async throws {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            do { try await store.withStore { try await $0.removeAttachment(beacon: bytes, at: index) } } catch let error as StoreError {
                throw CommandError(error.description)
            }
        }
    }

    struct Visibility: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "visibility",
                                                        abstract: "Make a beacon's attachments public (every project receives them) or unlisted (its project only).")
        enum Value: String, ExpressibleByArgument, CaseIterable { case `public`, unlisted }
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Beacon ID as hex.") var id: String
        @Argument(help: "public or unlisted.") var visibility: Value

        func run() async throws {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            do { try await store.withStore { try await $0.setBeaconPublic(bytes, visibility == .public) } } catch let error as StoreError {
                throw CommandError(error.description)
            }
        }
    }

    struct Decommission: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "decommission",
                                                        abstract: "Decommission a beacon for good: its attachments and key are deleted, its ID resolves to nothing and is never registered again.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Beacon ID as hex.") var id: String

        func run() async throws {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            do { try await store.withStore { try await $0.decommissionBeacon(bytes) } } catch let error as StoreError {
                throw CommandError(error.description)
            }
        }
    }
}
