import Foundation
import Synchronization
@testable import SottoNotify

/// A private dbus-daemon for one test: its own configuration (no service activation, so nothing on this
/// machine answers unless the test registers it) listening on a Unix socket in a temporary directory.
final class TestBus: @unchecked Sendable {
    let directory: URL
    let address: String
    private let process: Process

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("sotto-bus-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let socket = directory.appendingPathComponent("bus").path
        address = "unix:path=\(socket)"
        let config = directory.appendingPathComponent("bus.conf")
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>\(address)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """.write(to: config, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(config.path)", "--nofork", "--print-address"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(5)
        // Ready once it accepts a client (the socket file appears a moment before the daemon listens).
        while (try? DBusConnection(address: address)) == nil {
            guard Date() < deadline, process.isRunning else {
                stop()
                throw DBusFailure(name: "test", message: "dbus-daemon did not start")
            }
            usleep(5_000)
        }
    }

    func stop() {
        if process.isRunning {
            // SIGKILL: the test runner blocks SIGTERM and its children inherit that mask.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }
}

/// A service a test registers on its bus: answers method calls with `handler` on a thread of its own.
class TestService: @unchecked Sendable {
    let connection: DBusConnection
    private let stopped = Mutex(false)
    private let exited = DispatchSemaphore(value: 0)

    /// `handler` returns the reply's arguments, or nil to answer with an UnknownMethod error.
    init(address: String, name: String) throws {
        connection = try DBusConnection(address: address)
        try connection.requestName(name)
    }

    func start() {
        let thread = Thread { [self] in
            defer { exited.signal() }
            while !stopped.withLock({ $0 }) {
                guard let message = try? connection.nextMessage(timeout: 0.1) else {
                    if !connection.isConnected { return }
                    continue
                }
                guard message.kind == .methodCall else { continue }
                if let reply = handle(message) {
                    try? connection.reply(to: message, arguments: reply)
                } else {
                    try? connection.replyError(to: message, name: "org.freedesktop.DBus.Error.UnknownMethod",
                                               message: "\(message.member ?? "") is not handled by this test service")
                }
            }
        }
        thread.start()
    }

    /// Override: the reply to `message`.
    func handle(_ message: DBusMessage) -> [DBusValue]? { nil }

    func stop() {
        guard !stopped.withLock({ let was = $0; $0 = true; return was }) else { return }
        _ = exited.wait(timeout: .now() + 2)
        connection.close()
    }

    deinit { stop() }
}

/// A recording org.freedesktop.Notifications server (spec 1.2): ids from 1, replaces_id honoured,
/// CloseNotification answered with NotificationClosed(reason 3).
final class RecordingNotificationServer: TestService, @unchecked Sendable {
    struct Notify: Sendable {
        let appName: String
        let replacesID: UInt32
        let summary: String
        let body: String
        let actions: [String]
        let hints: [String: DBusValue]
        let expireTimeout: Int32
        let assignedID: UInt32
    }

    struct Record: Sendable {
        var notifies: [Notify] = []
        var closes: [UInt32] = []
        var nextID: UInt32 = 1
    }

    let record = Mutex(Record())
    let capabilities: [String]

    init(address: String, capabilities: [String] = ["actions", "body", "persistence"]) throws {
        self.capabilities = capabilities
        try super.init(address: address, name: "org.freedesktop.Notifications")
        start()
    }

    override func handle(_ message: DBusMessage) -> [DBusValue]? {
        let a = message.arguments
        switch message.member {
        case "GetServerInformation":
            return [.string("sotto-test"), .string("sotto"), .string("1"), .string("1.2")]
        case "GetCapabilities":
            return [.array(element: "s", capabilities.map { .string($0) })]
        case "Notify":
            guard a.count == 8, case .string(let app) = a[0], case .uint32(let replaces) = a[1], case .string(let summary) = a[3],
                  case .string(let body) = a[4], case .array(_, let actions) = a[5], case .dictionary(let hints) = a[6],
                  case .int32(let expire) = a[7] else { return nil }
            let id = record.withLock { (r: inout Record) -> UInt32 in
                let id = replaces != 0 ? replaces : r.nextID
                if replaces == 0 { r.nextID += 1 }
                r.notifies.append(Notify(appName: app, replacesID: replaces, summary: summary, body: body,
                                         actions: actions.compactMap(\.stringValue), hints: hints, expireTimeout: expire, assignedID: id))
                return id
            }
            return [.uint32(id)]
        case "CloseNotification":
            guard case .uint32(let id)? = a.first else { return nil }
            record.withLock { $0.closes.append(id) }
            try? emit("NotificationClosed", [.uint32(id), .uint32(3)])
            return []
        default:
            return nil
        }
    }

    func emit(_ member: String, _ arguments: [DBusValue]) throws {
        try connection.emitSignal(path: "/org/freedesktop/Notifications", interface: "org.freedesktop.Notifications",
                                  member: member, arguments: arguments)
    }

    var notifies: [Notify] { record.withLock { $0.notifies } }
    var closes: [UInt32] { record.withLock { $0.closes } }

    /// Waits (at most `timeout` seconds) until `condition` holds on the record.
    func wait(timeout: Double = 3, until condition: (Record) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if record.withLock({ condition($0) }) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return record.withLock { condition($0) }
    }
}

/// A NetworkManager stand-in: answers Properties.Get(org.freedesktop.NetworkManager, Metered).
final class NetworkManagerStandIn: TestService, @unchecked Sendable {
    let metered: UInt32
    let asked = Mutex(0)

    init(address: String, metered: UInt32) throws {
        self.metered = metered
        try super.init(address: address, name: "org.freedesktop.NetworkManager")
        start()
    }

    override func handle(_ message: DBusMessage) -> [DBusValue]? {
        guard message.interface == "org.freedesktop.DBus.Properties", message.member == "Get",
              message.arguments == [.string("org.freedesktop.NetworkManager"), .string("Metered")] else { return nil }
        asked.withLock { $0 += 1 }
        return [.variant(.uint32(metered))]
    }
}

/// Polls `condition` every 10 ms for at most `timeout` seconds.
func eventually(timeout: Double = 3, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}
