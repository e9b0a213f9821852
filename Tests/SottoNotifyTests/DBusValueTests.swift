import Foundation
import Testing
@testable import SottoNotify

/// The libdbus binding's marshalling, through a real dbus-daemon: every value type goes out and comes back.
@Suite(.timeLimit(.minutes(1))) struct DBusValueTests {
    /// Answers "Echo" with its arguments.
    final class EchoService: TestService, @unchecked Sendable {
        init(address: String) throws {
            try super.init(address: address, name: "org.sotto.Echo")
            start()
        }

        override func handle(_ message: DBusMessage) -> [DBusValue]? {
            message.member == "Echo" ? message.arguments : nil
        }
    }

    @Test func everyValueTypeRoundTripsThroughTheBus() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let echo = try EchoService(address: bus.address)
        defer { echo.stop() }
        let values: [DBusValue] = [
            .byte(255), .bool(true), .bool(false), .int32(-7), .uint32(4_000_000_000), .int64(-1 << 40), .uint64(1 << 63),
            .double(-2.5), .string("héllo \u{1F50A}"), .string(""), .objectPath("/org/sotto/x"), .bytes([0, 1, 2, 255]), .bytes([]),
            .array(element: "s", [.string("a"), .string("b")]), .array(element: "u", []),
            .dictionary(["urgency": .byte(2), "image": .structure([.int32(1), .int32(1), .int32(3), .bool(false), .int32(8), .int32(3),
                                                                 .bytes([1, 2, 3])])]),
            .structure([.string("x"), .variant(.uint32(5))]), .variant(.array(element: "i", [.int32(1)])),
        ]
        let connection = try DBusConnection(address: bus.address)
        defer { connection.close() }
        let reply = try connection.call(destination: "org.sotto.Echo", path: "/", interface: "org.sotto.Echo", member: "Echo",
                                        arguments: values, timeout: 2)
        #expect(reply == values)
        #expect(values.map(\.signature).joined() == "ybbiuxtdssoayayasaua{sv}(sv)v")

        // The pumped client: the same, and an unknown method is an error, not a hang.
        let client = DBusClient(connection: try DBusConnection(address: bus.address)) { _ in }
        defer { client.stop() }
        #expect(try await client.call(destination: "org.sotto.Echo", path: "/", interface: "org.sotto.Echo", member: "Echo",
                                      arguments: values, timeout: 2) == values)
        await #expect(throws: DBusFailure.self) {
            try await client.call(destination: "org.sotto.Echo", path: "/", interface: "org.sotto.Echo", member: "Nope", timeout: 2)
        }
    }

    @Test func anInvalidObjectPathIsRefusedBeforeLibdbusAborts() throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let connection = try DBusConnection(address: bus.address)
        defer { connection.close() }
        #expect(throws: DBusFailure.self) {
            try connection.emitSignal(path: "/ok", interface: "org.sotto.X", member: "Y", arguments: [.objectPath("not a path")])
        }
    }
}
