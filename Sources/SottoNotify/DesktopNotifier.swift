import Foundation
import Logging
import Synchronization

/// Why desktop notifications cannot be shown.
public enum NotifyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No session bus address (`DBUS_SESSION_BUS_ADDRESS` unset and no `$XDG_RUNTIME_DIR/bus`).
    case noSessionBus
    /// The bus could not be reached.
    case busUnavailable(String)
    /// Nothing on the bus answers org.freedesktop.Notifications.
    case noNotificationServer(String)

    public var description: String {
        switch self {
        case .noSessionBus:
            "no session bus (DBUS_SESSION_BUS_ADDRESS is unset and $XDG_RUNTIME_DIR/bus does not exist): desktop notifications are off; use --exec for a headless machine"
        case .busUnavailable(let reason): "cannot connect to the session bus: \(reason)"
        case .noNotificationServer(let reason):
            "no desktop notification server on the session bus (org.freedesktop.Notifications): \(reason)"
        }
    }
}

/// Shows events as grouped freedesktop desktop notifications (Desktop Notifications spec 1.2) over libdbus: the
/// I/O around ``NotificationGrouper``. One connection both calls Notify/CloseNotification and hears the
/// server's ActionInvoked/NotificationClosed signals (GNOME sends them to the caller only); the chosen action runs
/// the configured opener or copy command by posix_spawn, never through a shell.
public actor DesktopNotifier {
    /// Commands and policy.
    public struct Configuration: Sendable {
        /// Grouping, coalescing, lost behaviour, hints.
        public var policy: NotificationPolicy
        /// Opens an http(s) URL or a downloaded video; the target is appended as the last argument.
        public var openCommand: [String]
        /// Copies content, given on its standard input.
        public var copyCommand: [String]
        /// How long one D-Bus call may take (seconds).
        public var callTimeout: Double

        /// A configuration.
        /// - Parameters:
        ///   - policy: grouping, coalescing, lost behaviour and hints.
        ///   - openCommand: the opener (`xdg-open` by default); the URL or file is appended.
        ///   - copyCommand: the clipboard command, content on its standard input.
        ///   - callTimeout: seconds one D-Bus call may take.
        public init(policy: NotificationPolicy = NotificationPolicy(), openCommand: [String] = ["xdg-open"],
                    copyCommand: [String] = ["xclip", "-selection", "clipboard"], callTimeout: Double = 2) {
            self.policy = policy
            self.openCommand = openCommand
            self.copyCommand = copyCommand
            self.callTimeout = callTimeout
        }
    }

    /// The server's name and version (GetServerInformation).
    public nonisolated let serverName: String
    /// The server's capabilities (GetCapabilities), such as "actions" and "body-markup".
    public nonisolated let capabilities: Set<String>

    private let configuration: Configuration
    private let connection: DBusConnection
    private let media: MediaFetcher?
    private let logger: Logger
    private var grouper: NotificationGrouper
    private let inputs: AsyncStream<NotificationGrouper.Input>
    private let feed: AsyncStream<NotificationGrouper.Input>.Continuation
    private let start = ContinuousClock.now
    private let client: DBusClient
    private var loop: Task<Void, Never>?
    private var timers: [Task<Void, Never>] = []
    /// Per group, the last delivery still on its way to the machine.
    private var tails: [String: Task<Void, Never>] = [:]

    /// Connects to the session bus (or `busAddress`) and checks that a notification server answers.
    /// - Parameters:
    ///   - busAddress: a D-Bus address; nil for the session bus.
    ///   - configuration: commands and policy.
    ///   - media: the media fetcher; nil shows no media.
    ///   - logger: where fallbacks and failures are logged.
    public init(busAddress: String? = nil, configuration: Configuration = Configuration(), media: MediaFetcher? = nil,
                logger: Logger = Logger(label: "sotto.notify")) throws(NotifyError) {
        guard let address = busAddress ?? DBusConnection.sessionBusAddress(environment: ProcessInfo.processInfo.environment) else {
            throw .noSessionBus
        }
        let connection: DBusConnection
        do { connection = try DBusConnection(address: address) } catch { throw .busUnavailable("\(error)") }
        do {
            let information = try connection.call(destination: Self.service, path: Self.path, interface: Self.service,
                                                  member: "GetServerInformation", timeout: configuration.callTimeout)
            serverName = information.prefix(2).compactMap(\.stringValue).joined(separator: " ")
            let capabilityList = try connection.call(destination: Self.service, path: Self.path, interface: Self.service,
                                                     member: "GetCapabilities", timeout: configuration.callTimeout)
            if case .array(_, let items)? = capabilityList.first {
                capabilities = Set(items.compactMap(\.stringValue))
            } else {
                capabilities = []
            }
            try connection.addMatch("type='signal',interface='\(Self.service)',path='\(Self.path)'")
        } catch {
            connection.close()
            throw .noNotificationServer("\(error)")
        }
        self.connection = connection
        self.configuration = configuration
        self.media = media
        self.logger = logger
        grouper = NotificationGrouper(policy: configuration.policy)
        let (stream, continuation) = AsyncStream.makeStream(of: NotificationGrouper.Input.self)
        inputs = stream
        feed = continuation
        client = DBusClient(connection: connection) { message in Self.signal(message, into: continuation) }
    }

    static let service = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"

    /// Shows (or updates, withdraws, marks) the notification of `event`'s group. Media is fetched first, within
    /// its limits; the time shown stays the event's find time.
    /// - Parameter event: the found, lost or expired event.
    public func deliver(_ event: NotificationEvent) async {
        startLoop()
        // Events of one group reach the machine in delivery order even when a download holds one back (a lost
        // right after a found must not overtake it); downloads themselves run concurrently.
        let previous = tails[event.groupKey]
        let media = event.kind == .found ? media : nil
        let (feed, logger) = (feed, logger)
        let task = Task {
            let result = await media?.media(for: event)
            await previous?.value
            if let reason = result?.fallbackReason { logger.info("notification media not shown", metadata: ["reason": "\(reason)"]) }
            feed.yield(.event(event, media: result?.media))
        }
        tails[event.groupKey] = task
        await task.value
        if tails[event.groupKey] == task { tails[event.groupKey] = nil }
    }

    /// Stops hearing signals, cancels pending summaries and closes the bus connection. Shown notifications stay.
    public func close() async {
        feed.finish()
        timers.forEach { $0.cancel() }
        await loop?.value
        loop = nil
        client.stop()
        connection.close()
    }

    private func startLoop() {
        guard loop == nil else { return }
        loop = Task { await self.run() }
    }

    private func run() async {
        for await input in inputs {
            var pending = grouper.step(input, now: now())
            while !pending.isEmpty {
                let action = pending.removeFirst()
                pending += await perform(action)
            }
        }
    }

    private func now() -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }

    /// Does one action; returns what the machine says after the server's answer.
    private func perform(_ action: NotificationGrouper.Action) async -> [NotificationGrouper.Action] {
        switch action {
        case .post(let request):
            let arguments = Self.notifyArguments(request, policy: configuration.policy, capabilities: capabilities)
            do {
                let reply = try await call("Notify", arguments)
                if let id = reply.first?.uint32Value { return grouper.step(.posted(groupKey: request.groupKey, notificationID: id), now: now()) }
            } catch {
                logger.warning("desktop notification failed", metadata: ["error": "\(error)"])
            }
            return []
        case .close(let id):
            do { _ = try await call("CloseNotification", [.uint32(id)]) } catch {
                logger.warning("closing a desktop notification failed", metadata: ["error": "\(error)"])
            }
            return []
        case .wake(let at):
            let deadline = start + .milliseconds(Int64(at * 1000) + 1)
            let feed = feed
            timers.removeAll { $0.isCancelled }
            timers.append(Task {
                try? await Task.sleep(until: deadline, clock: .continuous)
                if !Task.isCancelled { feed.yield(.tick) }
            })
            return []
        case .open(let target):
            runDetached(configuration.openCommand + [target], stdin: nil)
            return []
        case .copy(let bytes):
            runDetached(configuration.copyCommand, stdin: bytes)
            return []
        }
    }

    private func runDetached(_ argv: [String], stdin: [UInt8]?) {
        let logger = logger
        Task.detached {
            do {
                let status = try await Spawn.run(argv, environment: ProcessInfo.processInfo.environment, stdin: stdin, timeout: 60)
                if status != 0 { logger.warning("notification action exited with \(status)", metadata: ["command": "\(argv.first ?? "")"]) }
            } catch {
                logger.warning("notification action failed: \(error)")
            }
        }
    }

    private func call(_ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
        try await client.call(destination: Self.service, path: Self.path, interface: Self.service, member: member,
                              arguments: arguments, timeout: configuration.callTimeout)
    }

    /// Turns a server's ActionInvoked or NotificationClosed signal into the machine's input.
    private static func signal(_ message: DBusMessage, into feed: AsyncStream<NotificationGrouper.Input>.Continuation) {
        guard message.interface == service else { return }
        let arguments = message.arguments
        switch message.member {
        case "ActionInvoked":
            if let id = arguments.first?.uint32Value, arguments.count >= 2, let key = arguments[1].stringValue {
                feed.yield(.actionInvoked(notificationID: id, actionKey: key))
            }
        case "NotificationClosed":
            if let id = arguments.first?.uint32Value {
                feed.yield(.closed(notificationID: id, reason: arguments.count >= 2 ? arguments[1].uint32Value ?? 4 : 4))
            }
        default:
            break
        }
    }

    /// The Notify call's arguments for `request` (spec 1.2: app_name, replaces_id, app_icon, summary, body,
    /// actions, hints, expire_timeout). Body markup is escaped when the server takes markup.
    static func notifyArguments(_ request: NotificationRequest, policy: NotificationPolicy, capabilities: Set<String>) -> [DBusValue] {
        var hints: [String: DBusValue] = [
            "urgency": .byte(request.urgency),
            "category": .string(request.category),
            "desktop-entry": .string(policy.desktopEntry),
            // dunst replaces by this tag; GNOME and KDE group by desktop-entry, the id does the rest.
            "x-dunst-stack-tag": .string("sotto-" + request.groupKey),
        ]
        if let image = request.imagePath { hints["image-path"] = .string(URL(fileURLWithPath: image).absoluteString) }
        let body = capabilities.contains("body-markup") ? escapeMarkup(request.body) : request.body
        let actions = capabilities.contains("actions") ? request.actions.flatMap { [DBusValue.string($0.key), .string($0.label)] } : []
        return [.string(policy.appName), .uint32(request.replacesID), .string(""), .string(request.summary), .string(body),
                .array(element: "s", actions), .dictionary(hints), .int32(policy.expireTimeout)]
    }

    /// `&`, `<` and `>` as entities (the spec's body markup is a small XML subset).
    static func escapeMarkup(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}

