import Foundation
import SottoExchange
import SottoExchangeCore

/// The rule every command that plays or listens follows before it touches a device (seed 000's
/// permission dialog): with consent it goes on; never asked and on an interactive terminal, it asks once;
/// otherwise it stops with ``hint`` and nothing is broadcast or scanned.
public enum ConsentGate {
    /// What the command does next.
    public enum Decision: Sendable, Equatable {
        /// Consent is granted: go on.
        case proceed
        /// Never asked, on a terminal: ask the user once and store the answer.
        case ask
        /// Stop with this message.
        case refuse(String)
    }

    /// The decision for a stored state.
    /// - Parameters:
    ///   - state: what the user answered so far.
    ///   - interactive: whether standard input and error are a terminal (a prompt can be answered).
    public static func decide(_ state: ConsentState, interactive: Bool) -> Decision {
        switch state {
        case .granted: return .proceed
        case .notAsked where interactive: return .ask
        case .notAsked: return .refuse("consent for nearby exchange has not been given: nothing was broadcast or scanned. \(hint)")
        case .denied: return .refuse("consent for nearby exchange is revoked: nothing was broadcast or scanned. \(hint)")
        }
    }

    /// How to grant consent.
    public static let hint = "Run 'sotto consent grant' to allow sotto to play and listen for nearby tokens."

    /// The question asked on a terminal.
    public static let question = "sotto plays and listens for near-ultrasonic tokens to find nearby devices. Allow it? [y/N] "

    /// Whether a reply to ``question`` says yes.
    /// - Parameter reply: the line the user typed (nil at end of input).
    public static func isYes(_ reply: String?) -> Bool {
        guard let reply = reply?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        return reply == "y" || reply == "yes"
    }
}
