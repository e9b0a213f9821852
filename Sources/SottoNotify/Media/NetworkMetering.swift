import Foundation

/// Whether the connection is metered, from NetworkManager's `Metered` property on the system bus
/// (org.freedesktop.NetworkManager; NMMetered: 0 unknown, 1 yes, 2 no, 3 guess yes, 4 guess no).
public struct NetworkMetering: Sendable {
    /// The system bus address asked (injectable so tests use a bus of their own).
    public let systemBusAddress: String
    /// How long the question may take (seconds).
    public let timeout: Double

    /// A probe of the bus at `systemBusAddress` (nil: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket).
    /// - Parameters:
    ///   - systemBusAddress: a D-Bus address; nil for the system bus.
    ///   - timeout: seconds the question may take.
    public init(systemBusAddress: String? = nil, timeout: Double = 1) {
        self.systemBusAddress = systemBusAddress ?? DBusConnection.systemBusAddress(environment: ProcessInfo.processInfo.environment)
        self.timeout = timeout
    }

    /// True when NetworkManager says (or guesses) the connection is metered; false when it says not, does not
    /// know, or cannot be asked (no NetworkManager, no system bus: a wired desktop, most likely).
    public func isMetered() async -> Bool {
        let address = systemBusAddress
        let timeout = timeout
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: Self.ask(address: address, timeout: timeout) ?? false)
            }
        }
    }

    /// The NMMetered answer meaning metered (1 yes, 3 guess yes), nil when it could not be had.
    static func ask(address: String, timeout: Double) -> Bool? {
        guard let connection = try? DBusConnection(address: address) else { return nil }
        defer { connection.close() }
        guard let reply = try? connection.call(destination: "org.freedesktop.NetworkManager", path: "/org/freedesktop/NetworkManager",
                                               interface: "org.freedesktop.DBus.Properties", member: "Get",
                                               arguments: [.string("org.freedesktop.NetworkManager"), .string("Metered")],
                                               timeout: timeout),
              let value = reply.first?.uint32Value else { return nil }
        return value == 1 || value == 3
    }
}
