import CDBus
import Foundation

/// A D-Bus failure: the error name (such as `org.freedesktop.DBus.Error.ServiceUnknown`) and its message.
public struct DBusFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The D-Bus error name.
    public let name: String
    /// The human-readable message.
    public let message: String

    static let noMemory = DBusFailure(name: "org.freedesktop.DBus.Error.NoMemory", message: "out of memory")
    static let disconnected = DBusFailure(name: "org.freedesktop.DBus.Error.Disconnected", message: "the bus connection was closed")

    init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    /// Takes (and frees) a set libdbus error.
    init(_ error: inout DBusError) {
        name = error.name.map { String(cString: $0) } ?? "org.freedesktop.DBus.Error.Failed"
        message = error.message.map { String(cString: $0) } ?? ""
        dbus_error_free(&error)
    }

    public var description: String { "\(name): \(message)" }
}

/// A received D-Bus message (method call, reply, error or signal). Holds a reference to the libdbus message so
/// that a method call can be answered.
final class DBusMessage: @unchecked Sendable {
    enum Kind: Int32, Sendable { case invalid = 0, methodCall = 1, methodReturn = 2, error = 3, signal = 4 }

    let raw: OpaquePointer
    let kind: Kind
    let sender: String?
    let path: String?
    let interface: String?
    let member: String?
    let errorName: String?
    /// The serial of the call a reply or error answers.
    let replySerial: UInt32
    let arguments: [DBusValue]

    init(taking raw: OpaquePointer) {
        self.raw = raw
        kind = Kind(rawValue: dbus_message_get_type(raw)) ?? .invalid
        sender = dbus_message_get_sender(raw).map { String(cString: $0) }
        path = dbus_message_get_path(raw).map { String(cString: $0) }
        interface = dbus_message_get_interface(raw).map { String(cString: $0) }
        member = dbus_message_get_member(raw).map { String(cString: $0) }
        errorName = dbus_message_get_error_name(raw).map { String(cString: $0) }
        replySerial = dbus_message_get_reply_serial(raw)
        var iter = DBusMessageIter()
        arguments = dbus_message_iter_init(raw, &iter) != 0 ? DBusValue.readAll(&iter) : []
    }

    deinit { dbus_message_unref(raw) }
}

/// A private libdbus connection to one bus address (a test's bus, the session bus or the system bus).
///
/// Blocking calls are bounded by a time-out (seconds); libdbus's own locks make the connection usable from
/// several threads (one reading signals, others calling), which `dbus_threads_init_default` turns on.
final class DBusConnection: @unchecked Sendable {
    private let raw: OpaquePointer
    private let closeLock = NSLock()
    private var closed = false
    /// This connection's unique name on the bus (":1.42").
    let uniqueName: String

    private static let threads: Bool = dbus_threads_init_default() != 0

    /// Connects and registers with the bus at `address` (a D-Bus address such as `unix:path=/run/user/0/bus`).
    init(address: String) throws(DBusFailure) {
        _ = Self.threads
        var error = DBusError()
        dbus_error_init(&error)
        guard let connection = dbus_connection_open_private(address, &error) else { throw DBusFailure(&error) }
        dbus_connection_set_exit_on_disconnect(connection, 0)
        guard dbus_bus_register(connection, &error) != 0 else {
            let failure = DBusFailure(&error)
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
            throw failure
        }
        raw = connection
        uniqueName = dbus_bus_get_unique_name(connection).map { String(cString: $0) } ?? ""
    }

    deinit {
        close()
        dbus_connection_unref(raw)
    }

    /// Closes the connection (idempotent); blocked readers return.
    func close() {
        closeLock.lock()
        defer { closeLock.unlock() }
        guard !closed else { return }
        closed = true
        dbus_connection_close(raw)
    }

    var isConnected: Bool { dbus_connection_get_is_connected(raw) != 0 }

    /// The session bus address from `DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus` when that socket exists.
    static func sessionBusAddress(environment: [String: String]) -> String? {
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty { return address }
        if let runtime = environment["XDG_RUNTIME_DIR"], FileManager.default.fileExists(atPath: runtime + "/bus") {
            return "unix:path=\(runtime)/bus"
        }
        return nil
    }

    /// The system bus address from `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
    static func systemBusAddress(environment: [String: String]) -> String {
        if let address = environment["DBUS_SYSTEM_BUS_ADDRESS"], !address.isEmpty { return address }
        return "unix:path=/run/dbus/system_bus_socket"
    }

    /// Calls a method and waits at most `timeout` seconds for its reply's arguments.
    func call(destination: String, path: String, interface: String, member: String, arguments: [DBusValue] = [],
              timeout: Double = 2) throws(DBusFailure) -> [DBusValue] {
        guard let message = dbus_message_new_method_call(destination, path, interface, member) else { throw .noMemory }
        defer { dbus_message_unref(message) }
        try Self.append(arguments, to: message)
        var error = DBusError()
        dbus_error_init(&error)
        guard let reply = dbus_connection_send_with_reply_and_block(raw, message, Int32(max(1, timeout * 1000)), &error) else {
            throw DBusFailure(&error)
        }
        return DBusMessage(taking: reply).arguments
    }

    /// Sends a method call without waiting and returns its serial (the reply's reply serial); see ``flush()``.
    func sendCall(destination: String, path: String, interface: String, member: String,
                  arguments: [DBusValue]) throws(DBusFailure) -> UInt32 {
        guard let message = dbus_message_new_method_call(destination, path, interface, member) else { throw .noMemory }
        defer { dbus_message_unref(message) }
        try Self.append(arguments, to: message)
        var serial: UInt32 = 0
        guard dbus_connection_send(raw, message, &serial) != 0 else { throw .noMemory }
        return serial
    }

    /// Writes out every queued outgoing message.
    func flush() { dbus_connection_flush(raw) }

    /// Sends a signal from `path`.
    func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue]) throws(DBusFailure) {
        guard let message = dbus_message_new_signal(path, interface, member) else { throw .noMemory }
        defer { dbus_message_unref(message) }
        try Self.append(arguments, to: message)
        try send(message)
    }

    /// Answers a method call with `arguments`.
    func reply(to call: DBusMessage, arguments: [DBusValue]) throws(DBusFailure) {
        guard let message = dbus_message_new_method_return(call.raw) else { throw .noMemory }
        defer { dbus_message_unref(message) }
        try Self.append(arguments, to: message)
        try send(message)
    }

    /// Answers a method call with an error.
    func replyError(to call: DBusMessage, name: String, message text: String) throws(DBusFailure) {
        guard let message = dbus_message_new_error(call.raw, name, text) else { throw .noMemory }
        defer { dbus_message_unref(message) }
        try send(message)
    }

    /// Asks the bus for a well-known name; fails when another connection owns it.
    func requestName(_ name: String) throws(DBusFailure) {
        var error = DBusError()
        dbus_error_init(&error)
        let result = dbus_bus_request_name(raw, name, UInt32(DBUS_NAME_FLAG_DO_NOT_QUEUE), &error)
        if result < 0 { throw DBusFailure(&error) }
        guard result == DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER || result == DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER else {
            throw DBusFailure(name: "org.freedesktop.DBus.Error.NameTaken", message: "\(name) is owned by another connection")
        }
    }

    /// Subscribes this connection to the messages a match rule selects (signals, typically).
    func addMatch(_ rule: String) throws(DBusFailure) {
        var error = DBusError()
        dbus_error_init(&error)
        dbus_bus_add_match(raw, rule, &error)
        if dbus_error_is_set(&error) != 0 { throw DBusFailure(&error) }
    }

    /// The next incoming message, waiting at most `timeout` seconds; nil when none came. Throws when the bus is gone.
    func nextMessage(timeout: Double) throws(DBusFailure) -> DBusMessage? {
        if let message = dbus_connection_pop_message(raw) { return DBusMessage(taking: message) }
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            let remaining = deadline.timeIntervalSinceNow
            guard dbus_connection_read_write(raw, Int32(max(0, min(remaining, 0.25)) * 1000)) != 0 else { throw .disconnected }
            if let message = dbus_connection_pop_message(raw) { return DBusMessage(taking: message) }
        } while deadline.timeIntervalSinceNow > 0
        return nil
    }

    private func send(_ message: OpaquePointer) throws(DBusFailure) {
        guard dbus_connection_send(raw, message, nil) != 0 else { throw .noMemory }
        dbus_connection_flush(raw)
    }

    private static func append(_ arguments: [DBusValue], to message: OpaquePointer) throws(DBusFailure) {
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for argument in arguments { try argument.append(to: &iter) }
    }
}
