import Foundation

/// The headless sink: runs one command per event with the event's fields in environment variables (never
/// interpolated into a shell string) and the raw content bytes on standard input.
///
/// Variables: `SOTTO_EVENT` (found, lost, expired), `SOTTO_GROUP`, `SOTTO_SUBSCRIPTION`, `SOTTO_TITLE`,
/// `SOTTO_NAMESPACE`, `SOTTO_TYPE`, `SOTTO_CONTENT_SIZE` (bytes), `SOTTO_CONTENT_HEX` (omitted above
/// ``maxHexContent`` bytes, as Linux caps one variable at 128 KiB), `SOTTO_CONTENT` (only when the content is
/// text), `SOTTO_URL` (when it is an http(s) URL), `SOTTO_FOUND_AT` (ISO 8601, UTC, milliseconds) and
/// `SOTTO_FOUND_AT_UNIX` (seconds).
public struct ExecSink: Sendable {
    /// Content larger than this (bytes) is not put in `SOTTO_CONTENT_HEX`/`SOTTO_CONTENT`; standard input has it all.
    public static let maxHexContent = 60_000

    /// The command and its arguments.
    public let command: [String]
    /// How long one run may take (seconds) before it is killed.
    public let timeout: Double

    /// A sink running `command` (its first word found in PATH when it has no slash).
    /// - Parameters:
    ///   - command: the program and its arguments; must not be empty.
    ///   - timeout: seconds one run may take before it is killed.
    public init(command: [String], timeout: Double = 30) throws(SpawnFailure) {
        guard let first = command.first, !first.isEmpty else { throw SpawnFailure(program: "", reason: "empty command") }
        self.command = command
        self.timeout = timeout
    }

    /// Runs the command for `event` and returns its exit status (128 + signal when killed).
    /// - Parameter event: the event whose fields go into the environment.
    @discardableResult
    public func deliver(_ event: NotificationEvent) async throws(SpawnFailure) -> Int32 {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SOTTO_") }
        environment.merge(Self.variables(for: event)) { $1 }
        return try await Spawn.run(command, environment: environment, stdin: event.content, timeout: timeout)
    }

    /// The SOTTO_* variables describing `event`.
    /// - Parameter event: the event to describe.
    public static func variables(for event: NotificationEvent) -> [String: String] {
        var variables = [
            "SOTTO_EVENT": event.kind.rawValue,
            "SOTTO_GROUP": clean(event.groupKey),
            "SOTTO_SUBSCRIPTION": clean(event.subscriptionID),
            "SOTTO_TITLE": clean(event.title),
            "SOTTO_NAMESPACE": clean(event.namespace),
            "SOTTO_TYPE": clean(event.type),
            "SOTTO_CONTENT_SIZE": String(event.content.count),
            "SOTTO_FOUND_AT_UNIX": String(format: "%.3f", event.foundAt.timeIntervalSince1970),
        ]
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        variables["SOTTO_FOUND_AT"] = formatter.string(from: event.foundAt)
        if event.content.count <= maxHexContent {
            variables["SOTTO_CONTENT_HEX"] = event.contentHex
            if let text = event.text, !text.contains("\0") { variables["SOTTO_CONTENT"] = text }
        }
        if let url = event.webURL { variables["SOTTO_URL"] = url }
        return variables
    }

    /// Environment strings cannot hold NUL: cut there.
    private static func clean(_ string: String) -> String { String(string.prefix { $0 != "\0" }) }
}
