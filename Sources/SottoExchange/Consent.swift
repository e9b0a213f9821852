import Foundation
import SottoSupport
import Synchronization

/// The user's consent to nearby exchange, persisted per user (`$XDG_CONFIG_HOME/sotto/consent`, else
/// `~/.config/sotto/consent`), with a handler called on every change (not initially), like Nearby's
/// permission object. Without consent, a `MessageManager` created with it refuses to publish or subscribe.
public final class Consent: Sendable {
    /// The file holding "granted" or "denied".
    public let file: URL
    /// The change handlers; the lock also serialises this process's reads and writes of the file.
    private let handlers = Mutex<[@Sendable (Bool) -> Void]>([])

    /// The default location for the current user.
    public static var defaultDirectory: URL {
        let environment = ProcessInfo.processInfo.environment
        if let xdg = environment["XDG_CONFIG_HOME"], !xdg.isEmpty { return URL(fileURLWithPath: xdg).appendingPathComponent("sotto") }
        return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".config/sotto")
    }

    public init(directory: URL = Consent.defaultDirectory) {
        file = directory.appendingPathComponent("consent")
    }

    /// Whether the user granted consent (false until they do).
    public var isGranted: Bool {
        handlers.withLock { _ in (try? String(contentsOf: file, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) == "granted" }
    }

    /// The user's answer as stored: granted, denied, or not asked yet (no file).
    public var state: ConsentState {
        handlers.withLock { _ in
            guard let text = try? String(contentsOf: file, encoding: .utf8) else { return .notAsked }
            return text.trimmingCharacters(in: .whitespacesAndNewlines) == "granted" ? .granted : .denied
        }
    }

    /// Records the user's choice and calls the change handlers when it changed.
    public func set(granted: Bool) throws {
        let changed = granted != isGranted
        try handlers.withLock { _ in
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            // By rename, but through a symbolic link (a dotfiles link stays a link) and never over a device.
            try OutputPath(file.path).write(Array((granted ? "granted\n" : "denied\n").utf8))
        }
        if changed { for handler in handlers.withLock({ $0 }) { handler(granted) } }
    }

    /// Calls `handler` whenever the consent changes.
    public func onChange(_ handler: @escaping @Sendable (Bool) -> Void) {
        handlers.withLock { $0.append(handler) }
    }
}

/// What the user answered to the consent question, as stored by ``Consent``.
public enum ConsentState: String, Sendable, Hashable, Codable {
    /// The user allowed broadcasting and scanning.
    case granted
    /// The user refused, or revoked an earlier grant.
    case denied
    /// The user was never asked (no answer stored).
    case notAsked = "not-asked"
}
