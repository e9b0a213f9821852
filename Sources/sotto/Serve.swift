import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import SottoTools

/// `--store sqlite:PATH | PATH | postgres://...`: where the service keeps projects, keys and beacons.
struct StoreOption: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Store: sqlite:PATH (default: the XDG data dir's sotto/exchange.sqlite), or PostgreSQL shared by several nodes: postgres://USER:PASSWORD@HOST:PORT/DATABASE or postgres://USER@/DATABASE?host=/socket/dir.",
        discussion: "A PostgreSQL host other than loopback needs ?sslmode=require (TLS, certificate verified; sslrootcert=FILE for a private CA).")) var store: String?

    /// Opens the store (a PostgreSQL store also brings its schema up to date). With `service`, a SQLite
    /// store is locked for this process: one `sotto serve` per SQLite file.
    func open(service: Bool = false) async throws -> OpenedStore {
        do { return try await OpenedStore.open(store, service: service) } catch {
            switch error {
            case .usage(let message): throw ValidationError(message)
            case .unavailable(let message): throw CommandError(message)
            }
        }
    }

    /// Runs `body` with the open store, then closes it (a PostgreSQL store's connections end cleanly). What
    /// `body` does is written to the store's audit log, as done by `local:USER`.
    func withStore<Value>(_ body: (any ExchangeStore) async throws -> Value) async throws -> Value {
        let opened = try await open()
        do {
            let value = try await body(AuditedStore(opened.store, actor: AuditedStore.localActor()))
            await opened.close()
            return value
        } catch {
            await opened.close()
            throw error
        }
    }
}

/// `sotto serve`: the matcher as a network service.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the matcher service that resolves tokens heard over the air into messages.",
        discussion: """
        Clients (`sotto publish/subscribe --server`, or any gRPC client of exchange.proto) hold one stream per \
        session and authenticate with an API key of a project (`sotto admin`). Plaintext is allowed on loopback \
        and Unix sockets only; any other address needs --tls-cert and --tls-key. Prints the bound address on \
        stdout ("listening on HOST:PORT") and runs until SIGINT or SIGTERM: then it stops accepting, tells every \
        session with UNAVAILABLE that the service is going away (clients move to another node), waits at most \
        --drain seconds for the streams to end, and exits with 0. A second signal exits at once.
        """)

    @Option(help: "Address to listen on, HOST:PORT (port 0: any free port).") var listen: String?
    @Option(help: "Unix-domain socket to listen on instead.") var unix: String?
    @OptionGroup var store: StoreOption
    @Option(help: "TLS certificate chain (PEM).") var tlsCert: String?
    @Option(help: "TLS private key (PEM).") var tlsKey: String?
    @Option(help: "HTTP address for /metrics, /ready and /health (HOST:PORT).") var metrics: String?
    @Option(help: ArgumentHelp(
        "Address for browsers (HOST:PORT or unix:PATH): the page at /, the exchange on a WebSocket at /session.",
        discussion: "Same sessions, keys and limits as the gRPC listener; only keys made with --origin, used from a page of one of those origins. TLS (--tls-cert) beyond loopback."))
    var web: String?
    @Option(help: ArgumentHelp(
        "Address of the admin API (HOST:PORT or unix:PATH): operators (sotto admin operator create) manage projects and keys over HTTP/JSON.",
        discussion: "Every call is audited in the store (sotto admin audit). TLS (--tls-cert) beyond loopback."))
    var admin: String?
    @Option(help: ArgumentHelp(
        "Address of the admin API over gRPC (HOST:PORT or unix:PATH; sotto.admin.v1.Admin, Sources/SottoExchangeWire/admin.proto), beside --admin.",
        discussion: "The same operations, credentials (metadata authorization: Bearer CREDENTIAL) and audit as --admin. TLS (--tls-cert) beyond loopback."))
    var adminGrpc: String?
    @Option(help: "Directory of the page's index.html and app.js (default: share/sotto/web beside the program, or bindings/web of the source tree).")
    var webPage: String?
    @Option(help: "Directory of the JavaScript modem the page loads (index.js, core.js, worklet.js, sotto.wasm; default: share/sotto/js, or bindings/js).")
    var webModem: String?
    @Option(parsing: .unconditional, help: "Seconds a session outlives its connection, to be resumed.") var sessionGrace: Double = 15
    @Option(parsing: .unconditional, help: "Seconds between client heartbeats (a session silent for three is cut off).") var heartbeat: Double = 5
    @Option(parsing: .unconditional, help: "Shared store: seconds a node may append nothing before the others declare it dead.") var nodeTimeout: Double = 5
    @Option(parsing: .unconditional, help: "Shared store: seconds a node keeps its clients waiting without its database before it cuts them off.")
    var databaseGrace: Double = 10
    @Option(parsing: .unconditional, help: "Shared store: seconds between snapshots of the shared state (the log before them is deleted).")
    var snapshotInterval: Double = 60
    @Option(parsing: .unconditional, help: "Work units (frames; a report of n sightings counts n) per second one project's keys may send together; nodes of a shared store share it (and each key's --requests-per-second) through the log, so it holds over the cluster.")
    var projectRate: Double = 20_000
    @Option(parsing: .unconditional, help: "Work units one project may send at once above --project-rate.") var projectBurst: Double = 40_000
    @Option(parsing: .unconditional, help: "Bytes (namespace, type and content) one project's live publications may hold; the same on every node of a shared store.")
    var projectPublicationBytes: Int = ServiceConfiguration.defaultProjectPublicationBytes
    @Option(parsing: .unconditional, help: "Seconds the streams get to end on SIGINT or SIGTERM, once told the service is going away, before the connections left are closed.")
    var drain: Double = 5
    @Option(parsing: .unconditional, help: "In-band SNR (dB, \(fixed(ServiceConfiguration.earshotSNRRange.lowerBound, 0))-\(fixed(ServiceConfiguration.earshotSNRRange.upperBound, 0))) from which a sighting counts for earshot publications and subscriptions; the same on every node of a shared store.")
    var earshotSnr: Double = MatcherCore.defaultEarshotSNR
    @Option(parsing: .unconditional, help: .hidden) var clockSkew: Double = 0
    /// Test hook: a file whose number (s) moves the service's clocks forward while it runs (`ServiceTimeShift`).
    @Option(help: .hidden) var timeShiftFile: String?
    @OptionGroup(title: "Transport bounds") var transport: TransportOptions
    @Flag(inversion: .prefixedNo, help: ArgumentHelp(
        "Give sessions that hear each other turns to broadcast in (those whose radio asks for them).",
        discussion: "Every node of a shared store must agree. Without turns each device keeps its own sender's rules."))
    var broadcastTurns = true
    @Flag(inversion: .prefixedNo, help: ArgumentHelp(
        "Tell sessions heard weakly to play their token in the robust profile, and the default one once heard well.",
        discussion: "Link adaptation; every node of a shared store must agree. Without it each device keeps its profile."))
    var linkAdaptation = true
    @Flag(help: "Log every session.") var verbose = false

    func validate() throws {
        guard listen == nil || unix == nil else { throw ValidationError("give --listen or --unix, not both") }
        if unix?.isEmpty == true { throw ValidationError("--unix needs a socket path") }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard sessionGrace.isFinite, (0...3600).contains(sessionGrace) else { throw ValidationError("--session-grace must be 0 to 3600 s") }
        guard heartbeat.isFinite, (0.5...600).contains(heartbeat) else { throw ValidationError("--heartbeat must be 0.5 to 600 s") }
        try NumericOption("--node-timeout", above: 0.2, upTo: 600, unit: "s").check(nodeTimeout)
        try NumericOption("--database-grace", above: 0, upTo: 3_600, unit: "s").check(databaseGrace)
        try NumericOption("--drain", 0...3_600, unit: "s").check(drain)
        try NumericOption("--snapshot-interval", above: 0.1, upTo: 86_400, unit: "s").check(snapshotInterval)
        try NumericOption("--project-rate", above: 0, upTo: 1e9, unit: "per s").check(projectRate)
        try NumericOption("--project-burst", above: 0, upTo: 1e9, unit: "units").check(projectBurst)
        try NumericOption("--earshot-snr", ServiceConfiguration.earshotSNRRange, unit: "dB").check(earshotSnr)
        guard (1_024...(1 << 40)).contains(projectPublicationBytes) else { throw ValidationError("--project-publication-bytes must be 1024 to 2^40") }
        guard clockSkew.isFinite, abs(clockSkew) <= 86_400 else { throw ValidationError("--clock-skew must be within a day") }
        try transport.check()
    }

    func run() async throws {
        let endpoint: MatcherAddress
        do {
            if let unix { endpoint = .unix(path: unix) } else { endpoint = try MatcherAddress(parsing: listen ?? "127.0.0.1:7457") }
        } catch { throw ValidationError("\(error)") }
        let metricsEndpoint: MatcherAddress?
        do { metricsEndpoint = try metrics.map { try MatcherAddress(parsing: $0) } } catch { throw ValidationError("\(error)") }
        var webOptions: WebOptions?
        if let web {
            do { webOptions = WebOptions(endpoint: try MatcherAddress(parsing: web)) } catch { throw ValidationError("--web: \(error)") }
            let found = WebPage.installed(executable: CommandLine.arguments[0])
            if let directory = webPage ?? found?.page, let modem = webModem ?? found?.modem {
                do { webOptions?.page = try WebPage(directory: directory, modem: modem) } catch { throw CommandError(error.description) }
            } else {
                printError("warning: no web page found (--web-page, --web-modem): serving the WebSocket transport only")
            }
            webOptions?.onListening = { address in Output.line("web on \(address)") }
        }
        var adminOptions: AdminOptions?
        if let admin {
            do { adminOptions = AdminOptions(endpoint: try MatcherAddress(parsing: admin)) { address in Output.line("admin on \(address)") } } catch {
                throw ValidationError("--admin: \(error)")
            }
        }
        if let adminGrpc {
            guard adminOptions != nil else { throw ValidationError("--admin-grpc goes with --admin (the console and the HTTP/JSON API)") }
            do { adminOptions?.grpcEndpoint = try MatcherAddress(parsing: adminGrpc) } catch { throw ValidationError("--admin-grpc: \(error)") }
            adminOptions?.onGRPCListening = { address in Output.line("admin grpc on \(address)") }
        }
        let tls = tlsCert.map { MatcherServer.TLS(certificateChain: $0, privateKey: tlsKey ?? "") }
        for file in [tlsCert, tlsKey].compactMap({ $0 }) where !FileManager.default.isReadableFile(atPath: file) {
            throw CommandError("cannot read \(file)")
        }
        var configuration = ServiceConfiguration()
        configuration.sessionGrace = sessionGrace
        configuration.heartbeatInterval = heartbeat
        configuration.nodeTimeout = nodeTimeout
        configuration.databaseGrace = databaseGrace
        configuration.snapshotInterval = snapshotInterval
        configuration.clockSkew = clockSkew
        configuration.drainTimeout = drain
        configuration.projectRate = projectRate
        configuration.projectBurst = projectBurst
        configuration.projectPublicationBytes = projectPublicationBytes
        if !broadcastTurns { configuration.broadcastTurns = nil }
        if !linkAdaptation { configuration.linkAdaptation = nil }
        configuration.earshotSNR = earshotSnr
        let following = timeShiftFile.map { file in
            let shift = ServiceTimeShift()
            configuration.timeShift = shift
            return shift.follow(file: file) { seconds in printError("clocks moved forward by \(fixed(seconds, 1)) s since the start (test hook)") }
        }
        defer { following?.cancel() }
        var logger = Logger(label: "sotto.serve")
        logger.logLevel = verbose ? .debug : .notice
        let opened = try await store.open(service: true)
        let server: MatcherServer
        do {
            server = try MatcherServer(endpoint: endpoint, tls: tls, store: opened.store, replication: opened.replication,
                                       metricsEndpoint: metricsEndpoint, configuration: configuration, limits: transport.limits,
                                       web: webOptions, admin: adminOptions, logger: logger) { service, http in
                Output.line("listening on \(service)")
                if let http { Output.line("http on \(http)") }
            }
        } catch {
            await opened.close()
            throw CommandError(error.description)
        }
        // The signals are the process's (Interruption): the first starts the graceful shutdown, a second exits at once.
        let group = ServiceGroup(services: [server], gracefulShutdownSignals: [], logger: logger)
        let drain = self.drain
        let stopping = Interruption.onStop {
            printError("shutting down: no new connections; sessions told to move to another node; draining for at most \(fixed(drain, 1)) s (signal again to stop now)")
            Task { await group.triggerGracefulShutdown() }
        }
        defer { stopping.cancel() }
        do { try await group.run() } catch {
            await opened.close()
            throw CommandError("the service stopped: \(error)")
        }
        await opened.close()
    }
}

/// What peers can make `sotto serve` hold: connections, streams and the time they get to say something.
struct TransportOptions: ParsableArguments {
    @Option(parsing: .unconditional, help: "Most connections at once, gRPC and --web together (lowered to the descriptor limit, ulimit -n, less 64).")
    var maxConnections: Int = TransportLimits().maxConnections
    @Option(parsing: .unconditional, help: "Most connections at once from one IP address, gRPC and --web together.")
    var maxConnectionsPerAddress: Int = TransportLimits().maxConnectionsPerAddress
    @Option(parsing: .unconditional, help: "Seconds a new connection has to send the HTTP/2 preface (after TLS) before it is closed.")
    var prefaceTimeout: Double = TransportLimits().prefaceTimeout
    @Option(parsing: .unconditional, help: "Seconds a connection may hold no stream before it is closed.")
    var idleTimeout: Double = TransportLimits().idleTimeout
    @Option(parsing: .unconditional, help: "Seconds a new stream has to say Hello before it is ended.")
    var helloTimeout: Double = TransportLimits().helloTimeout
    @Option(parsing: .unconditional, help: "Most streams open at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).")
    var maxStreamsPerConnection: Int = TransportLimits().maxStreamsPerConnection
    @Option(parsing: .unconditional, help: "Most streams that have not said Hello yet, over the node (8 per connection).")
    var maxStreamsWithoutHello: Int = TransportLimits().maxStreamsWithoutHello

    func check() throws {
        try NumericOption("--max-connections", 1...1_000_000).check(maxConnections)
        try NumericOption("--max-connections-per-address", 1...1_000_000).check(maxConnectionsPerAddress)
        try NumericOption("--preface-timeout", above: 0, upTo: 600, unit: "s").check(prefaceTimeout)
        try NumericOption("--idle-timeout", above: 0, upTo: 86_400, unit: "s").check(idleTimeout)
        try NumericOption("--hello-timeout", above: 0, upTo: 600, unit: "s").check(helloTimeout)
        try NumericOption("--max-streams-per-connection", 1...1_000_000).check(maxStreamsPerConnection)
        try NumericOption("--max-streams-without-hello", 1...1_000_000).check(maxStreamsWithoutHello)
    }

    var limits: TransportLimits {
        var limits = TransportLimits()
        limits.maxConnections = maxConnections
        limits.maxConnectionsPerAddress = maxConnectionsPerAddress
        limits.prefaceTimeout = prefaceTimeout
        limits.idleTimeout = idleTimeout
        limits.helloTimeout = helloTimeout
        limits.maxStreamsPerConnection = maxStreamsPerConnection
        limits.maxStreamsWithoutHello = maxStreamsWithoutHello
        return limits
    }
}

/// `sotto admin`: projects, API keys and beacons in the service's store.
struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "Manage the matcher service's projects, API keys, beacons and operators (works on the store directly; audited).",
        subcommands: [AdminProject.self, AdminKey.self, AdminBeacon.self, AdminOperator.self, AdminAudit.self])
}

struct AdminProject: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "project", abstract: "Create and list projects.",
                                                    subcommands: [Create.self, List.self, Rename.self, Disable.self, Enable.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "create", abstract: "Create a project (prints its id).")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name.") var name: String
        @Option(parsing: .unconditional, help: "Most sessions the project may hold at once.") var maxSessions: Int = 100_000

        func run() async throws {
            do {
                let project = try await store.withStore { try await $0.createProject(name: name, maxSessions: maxSessions) }
                Output.line("\(project.id)\t\(project.name)")
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List projects.")
        @OptionGroup var store: AdminStoreOption
        func run() async throws {
            do {
                for project in try await store.withStore({ try await $0.projects() }) { Output.line("\(project.id)\t\(project.name)\tmax \(project.maxSessions) sessions\(project.disabled ? "\tdisabled" : "")") }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }
}

struct AdminKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "key", abstract: "Create, list and revoke API keys.",
                                                    subcommands: [Create.self, List.self, Revoke.self, Rotate.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "create", abstract: "Create an API key for a project; prints it once (only its hash is kept).")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name or id.") var project: String
        @Option(help: "A label for the key.") var label: String = ""
        @Option(parsing: .unconditional, help: "Requests per second over all the key's sessions, on every node together (default 50).")
        var requestsPerSecond: Double?
        /// The old spelling of --requests-per-second (--rate is a sample rate in Hz everywhere else).
        @Option(name: .customLong("rate"), parsing: .unconditional, help: ArgumentHelp(visibility: .hidden)) var deprecatedRate: Double?
        @Option(parsing: .unconditional, help: "Requests allowed at once above the rate.") var burst: Double = 200
        @Option(help: ArgumentHelp("A web origin (https://host[:port]) whose pages may use the key over `sotto serve --web`; repeatable.",
                                   discussion: "A key without --origin serves native clients only: the web transport refuses it."))
        var origin: [String] = []
        @Option(parsing: .unconditional, help: "Most sessions the key may hold at once, over every node (default: the project's quota only).")
        var maxSessions: Int?

        /// Requests per second over all the key's sessions.
        var rate: Double { requestsPerSecond ?? deprecatedRate ?? 50 }

        func validate() throws {
            try NumericOption("--max-sessions", 1...10_000_000).check(maxSessions)
            if deprecatedRate != nil {
                if requestsPerSecond != nil { throw ValidationError("--rate is the old spelling of --requests-per-second: give one") }
                Deprecated.note("--rate", use: "--requests-per-second", in: "admin key create", because: "--rate is a sample rate in Hz everywhere else")
            }
        }

        func run() async throws {
            do {
                // The secret is shown once: when it cannot be printed, the key is revoked (rolled back) so that
                // no key stays usable whose only copy was lost.
                try await store.withStore { store in
                    let (record, key) = try await store.createKey(project: project, label: label, ratePerSecond: rate, burst: burst, origins: origin)
                    if let maxSessions {
                        do { try await store.setKeySessionQuota(id: record.id, maxSessions: maxSessions) } catch {
                            try await store.revokeKey(id: record.id)
                            throw error
                        }
                    }
                    do { try Output.lineOrThrow(key) } catch {
                        try await store.revokeKey(id: record.id)
                        throw CommandError("\(error); the key \(record.id) was revoked, since its secret could not be shown")
                    }
                }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List keys (ids, never secrets).")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name or id (default: all).") var project: String?
        func run() async throws {
            do {
                for key in try await store.withStore({ try await $0.keys(project: project) }) {
                    Output.line("\(key.id)\t\(key.projectID)\t\(key.revoked ? "revoked" : "active")\t\(key.ratePerSecond)/s burst \(key.burst)\t\(key.label)\(key.origins.isEmpty ? "" : "\torigins " + key.origins.joined(separator: " "))\(key.maxSessions.map { "\tmax \($0) sessions" } ?? "")")
                }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke a key: its sessions end within a second (on every node, those waiting to be resumed too) and new ones are refused.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Key id (the part after sotto_, before the second _).") var id: String
        func run() async throws {
            do { try await store.withStore { try await $0.revokeKey(id: id) } } catch let error as StoreError { throw CommandError(error.description) }
        }
    }
}

struct AdminBeacon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "beacon", abstract: "Register beacons and their attachments.",
                                                    subcommands: [Register.self, Attach.self, List.self, Detach.self, Visibility.self, Decommission.self])

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "register", abstract: "Register (or replace) a beacon of a project.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Project name or id.") var project: String
        @Argument(help: "Beacon ID as hex (1-15 bytes; 8-15 for a rotating beacon).") var id: String
        @Flag(help: "Deliver its attachments to subscribers of every project.") var `public` = false
        @Option(parsing: .unconditional, help: "Rotating beacon (EID-like): seconds between ID changes (1-86400); generates its identity key.") var rotating: Double?
        @Option(help: "Rotating beacon: new file (mode 600) to write its key to, once, for `sotto beacon --key-file`.") var keyOut: String?

        func validate() throws {
            try NumericOption("--rotating", 1...86_400, unit: "s").check(rotating)
            if rotating != nil && keyOut == nil { throw ValidationError("--rotating needs --key-out FILE: the beacon's key is written there, once") }
            if rotating == nil && keyOut != nil { throw ValidationError("--key-out is for a rotating beacon (--rotating PERIOD)") }
        }

        func run() async throws {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            var rotation: BeaconRotation?
            if let rotating, let keyOut {
                // The key file first (created exclusively), so a registered key always has its one copy outside.
                let provisioning: BeaconProvisioning
                do {
                    provisioning = try BeaconProvisioning(id: bytes, rotation: try BeaconRotation(key: .generate(), period: rotating))
                } catch { throw CommandError(error.description) }
                do { try BeaconKeyFile.write(provisioning, to: keyOut) } catch { throw CommandError(error.description) }
                rotation = provisioning.rotation
            }
            do {
                try await store.withStore { try await $0.registerBeacon(BeaconRecord(id: bytes, projectID: project, isPublic: `public`, rotation: rotation)) }
            } catch let error as StoreError {
                if let keyOut { unlink(keyOut) }
                throw CommandError(error.description)
            }
            if let keyOut { printError("wrote the key of rotating beacon \(bytes.hex) to \(keyOut): keep it secret, it is not shown again") }
        }
    }

    struct Attach: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "attach", abstract: "Attach data (at most 1024 bytes) to a registered beacon.")
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "Beacon ID as hex.") var id: String
        @Option(help: "Attachment namespace (non-empty).") var namespace: String
        @Option(help: "Attachment type (at most 100 characters).") var type: String
        @Option(help: "Data as text.") var text: String?
        @Option(help: "Data as hex.") var hex: String?

        func run() async throws {
            let bytes = try TokenInput.bytes(hex: id, text: nil)
            let data = try TokenInput.bytes(hex: hex, text: text)
            do {
                let attachment = try BeaconAttachment.message(namespace: namespace, type: type, data: data)
                try await store.withStore { try await $0.addAttachment(beacon: bytes, attachment) }
            } catch let error as StoreError { throw CommandError(error.description) } catch let error as ExchangeError {
                throw CommandError(error.description)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List beacons and their attachments.")
        @OptionGroup var store: AdminStoreOption
        func run() async throws {
            do {
                for beacon in try await store.withStore({ try await $0.beacons() }) {
                    Output.line("\(beacon.id.hex)\t\(beacon.projectID)\t\(beacon.decommissioned ? "decommissioned" : beacon.isPublic ? "public" : "private")\(beacon.rotation.map { " rotating every \($0.period) s" } ?? "")\t\(beacon.attachments.map(\.description).joined(separator: ", "))")
                }
            } catch let error as StoreError { throw CommandError(error.description) }
        }
    }
}
