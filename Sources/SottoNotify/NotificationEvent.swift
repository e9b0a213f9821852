import Foundation

/// One thing a subscription saw, as the notification sinks receive it: a message found or lost, or the
/// subscription expired. The find time is the caller's wall clock, taken when the message was heard (seed 002:
/// the time shown is the find time, not the time a media download finished).
public struct NotificationEvent: Sendable, Equatable {
    /// What happened.
    public enum Kind: String, Sendable, Equatable {
        /// A message was heard (first or again).
        case found
        /// A message is no longer heard.
        case lost
        /// The subscription ended (its TTL elapsed or it was stopped).
        case expired
    }

    /// What happened.
    public var kind: Kind
    /// The group this event's notification collapses into (the subscription id by default, or `--group KEY`).
    public var groupKey: String
    /// The subscription that saw the message.
    public var subscriptionID: String
    /// The notification's title (for example the app or the subscription's name).
    public var title: String
    /// The message's namespace (empty when none).
    public var namespace: String
    /// The message's type (empty when none).
    public var type: String
    /// The message's content bytes (at most 100 KiB in practice).
    public var content: [UInt8]
    /// When the message was found (wall clock).
    public var foundAt: Date

    /// An event; `groupKey` defaults to the subscription id.
    /// - Parameters:
    ///   - kind: found, lost or expired.
    ///   - groupKey: the group to collapse into; nil means one group per subscription.
    ///   - subscriptionID: the subscription that saw the message.
    ///   - title: the notification title.
    ///   - namespace: the message namespace.
    ///   - type: the message type.
    ///   - content: the message content bytes.
    ///   - foundAt: when the message was heard (wall clock).
    public init(kind: Kind, groupKey: String? = nil, subscriptionID: String, title: String = "Sotto",
                namespace: String = "", type: String = "", content: [UInt8], foundAt: Date) {
        self.kind = kind
        self.groupKey = groupKey ?? subscriptionID
        self.subscriptionID = subscriptionID
        self.title = title
        self.namespace = namespace
        self.type = type
        self.content = content
        self.foundAt = foundAt
    }

    /// The content as text when it is valid UTF-8 without control characters other than tab and newline.
    public var text: String? {
        guard let string = String(validating: content, as: UTF8.self) else { return nil }
        let printable = string.unicodeScalars.allSatisfy { $0 == "\n" || $0 == "\t" || !($0.properties.generalCategory == .control) }
        return printable ? string : nil
    }

    /// The content itself when it is one http(s) URL (surrounding white space ignored).
    public var webURL: String? {
        guard let text = text?.trimmingCharacters(in: .whitespacesAndNewlines), !text.contains(where: \.isWhitespace) else { return nil }
        return Self.isWebURL(text) ? text : nil
    }

    /// The first http(s) URL the content is or carries (in text content), for media.
    public var carriedURL: String? {
        guard let text else { return nil }
        for word in text.split(whereSeparator: { $0.isWhitespace || $0 == "\"" || $0 == "<" || $0 == ">" }) {
            let candidate = String(word)
            if Self.isWebURL(candidate) { return candidate }
        }
        return nil
    }

    /// Whether `string` parses as an absolute http or https URL with a host (never file:// or another scheme).
    public static func isWebURL(_ string: String) -> Bool {
        guard let components = URLComponents(string: string), let scheme = components.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty else { return false }
        return true
    }

    /// The content's lower-case hexadecimal form.
    public var contentHex: String { content.map { String(format: "%02x", $0) }.joined() }
}
