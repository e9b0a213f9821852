import Foundation

/// What a notification shows of a message's media (seed 002's limits already applied by ``MediaFetcher``).
public enum NotificationMedia: Sendable, Equatable {
    /// A downloaded image (JPG/JPEG/PNG/GIF, at most 10 MB) shown as the notification's image.
    case image(path: String)
    /// A downloaded video (MP4/AVI, at most 50 MB): a link in the body, an action opens the local copy.
    case video(path: String, url: String)
    /// Media not downloaded (metered connection, audio, over a limit, failed): only a link in the body.
    case link(url: String)
}

/// How the grouped notifications behave. Times in seconds.
public struct NotificationPolicy: Sendable, Equatable {
    /// What a lost message (or an expired subscription) does to its group's notification.
    public enum LostBehaviour: String, Sendable, Equatable {
        /// Close the notification.
        case withdraw
        /// Keep it, marked "no longer heard".
        case mark
        /// Leave it as it is.
        case ignore
    }

    /// Finds of one group closer together than this (seconds) are coalesced into one summary update.
    public var coalesceWindow: Double
    /// What lost and expired do.
    public var lost: LostBehaviour
    /// The freedesktop urgency of found messages (0 low, 1 normal, 2 critical).
    public var urgency: UInt8
    /// The freedesktop category hint.
    public var category: String
    /// The desktop-entry hint (the .desktop file name without its extension).
    public var desktopEntry: String
    /// The application name sent with each notification.
    public var appName: String
    /// The expiry time-out sent with each notification in milliseconds (-1: the server's default, 0: never).
    public var expireTimeout: Int32
    /// The time zone the find time is shown in.
    public var timeZone: TimeZone

    /// A policy.
    /// - Parameters:
    ///   - coalesceWindow: seconds within which finds of a group coalesce into one update.
    ///   - lost: what lost and expired do.
    ///   - urgency: 0 low, 1 normal, 2 critical.
    ///   - category: the category hint.
    ///   - desktopEntry: the desktop-entry hint.
    ///   - appName: the application name.
    ///   - expireTimeout: milliseconds, -1 for the server's default.
    ///   - timeZone: the zone the find time is shown in.
    public init(coalesceWindow: Double = 2, lost: LostBehaviour = .mark, urgency: UInt8 = 1,
                category: String = "im.received", desktopEntry: String = "sotto", appName: String = "Sotto",
                expireTimeout: Int32 = -1, timeZone: TimeZone = .current) {
        self.coalesceWindow = coalesceWindow
        self.lost = lost
        self.urgency = urgency
        self.category = category
        self.desktopEntry = desktopEntry
        self.appName = appName
        self.expireTimeout = expireTimeout
        self.timeZone = timeZone
    }
}

/// One Notify call to make: what the pure core decided, before D-Bus.
public struct NotificationRequest: Sendable, Equatable {
    /// The group this notification shows.
    public var groupKey: String
    /// The notification to replace in place (0: a new one).
    public var replacesID: UInt32
    /// The summary line.
    public var summary: String
    /// The body text (plain; the sink escapes it for servers that take markup).
    public var body: String
    /// Action keys and labels, in order ("default" is the click on the notification).
    public var actions: [(key: String, label: String)]
    /// The urgency hint (0 low, 1 normal, 2 critical).
    public var urgency: UInt8
    /// The category hint.
    public var category: String
    /// A local image file shown as the notification's image (image-path hint), if any.
    public var imagePath: String?

    public static func == (a: Self, b: Self) -> Bool {
        a.groupKey == b.groupKey && a.replacesID == b.replacesID && a.summary == b.summary && a.body == b.body
            && a.actions.map(\.key) == b.actions.map(\.key) && a.actions.map(\.label) == b.actions.map(\.label)
            && a.urgency == b.urgency && a.category == b.category && a.imagePath == b.imagePath
    }
}

/// The grouping state machine: one notification per group key, updated in place, bursts coalesced, lost
/// withdrawn or marked, actions turned into opening or copying. Pure: the caller passes the time (seconds on a
/// monotonic clock) and performs the actions (D-Bus calls, timers, commands).
public struct NotificationGrouper: Sendable {
    /// An input to the machine.
    public enum Input: Sendable, Equatable {
        /// An event from a subscription, with its media if any was fetched.
        case event(NotificationEvent, media: NotificationMedia?)
        /// The server answered a ``Action/post(_:)`` of `groupKey` with this id.
        case posted(groupKey: String, notificationID: UInt32)
        /// The server closed a notification (NotificationClosed; reason 1 expired, 2 dismissed, 3 closed, 4 other).
        case closed(notificationID: UInt32, reason: UInt32)
        /// The user chose an action (ActionInvoked).
        case actionInvoked(notificationID: UInt32, actionKey: String)
        /// Time passed: coalesced bursts whose window ended are shown.
        case tick
    }

    /// What the caller must do.
    public enum Action: Sendable, Equatable {
        /// Call Notify, then feed ``Input/posted(groupKey:notificationID:)`` back.
        case post(NotificationRequest)
        /// Call CloseNotification.
        case close(notificationID: UInt32)
        /// Feed ``Input/tick`` at this time (seconds, the caller's monotonic clock) or later.
        case wake(at: Double)
        /// Open an http(s) URL or a local media file with the configured opener.
        case open(String)
        /// Copy these bytes with the configured copy command.
        case copy([UInt8])
    }

    /// One group's notification.
    struct Entry: Sendable, Equatable {
        var notificationID: UInt32 = 0
        /// Finds since the notification appeared.
        var count = 0
        var latest: NotificationEvent
        var media: NotificationMedia?
        /// The contents found and not lost since.
        var present: [[UInt8]] = []
        var lastPostedAt: Double
    }

    /// A group's state.
    enum GroupState: Sendable, Equatable {
        /// Shown and up to date.
        case shown(Entry)
        /// Shown; finds arrived within the window and wait for one summary update at `flushAt`.
        case holding(Entry, pending: Int, flushAt: Double)
        /// Marked lost (or expired): shown until dismissed, updated again by the next find.
        case marked(Entry)

        var entry: Entry {
            switch self { case .shown(let e), .holding(let e, _, _), .marked(let e): e }
        }
    }

    /// The policy in force.
    public let policy: NotificationPolicy
    private(set) var groups: [String: GroupState] = [:]

    /// A machine with no notification shown.
    /// - Parameter policy: window, lost behaviour and hints.
    public init(policy: NotificationPolicy = NotificationPolicy()) {
        self.policy = policy
    }

    /// The notification id shown for a group (0 while its Notify call has not answered), nil when none.
    public func notificationID(ofGroup key: String) -> UInt32? { groups[key]?.entry.notificationID }

    /// Advances the machine by one input at time `now` (seconds, monotonic) and returns what to do.
    /// - Parameters:
    ///   - input: the event, server answer, signal or tick.
    ///   - now: the caller's monotonic time in seconds.
    public mutating func step(_ input: Input, now: Double) -> [Action] {
        switch input {
        case .event(let event, let media):
            switch event.kind {
            case .found: return found(event, media: media, now: now)
            case .lost: return lost(event, now: now)
            case .expired: return expired(event, now: now)
            }
        case .posted(let key, let id):
            guard var state = groups[key] else { return [] }
            state.setID(id)
            groups[key] = state
            return []
        case .closed(let id, _):
            guard id != 0, let key = groupKey(for: id) else { return [] }
            groups[key] = nil
            return []
        case .actionInvoked(let id, let actionKey):
            guard id != 0, let key = groupKey(for: id), let entry = groups[key]?.entry else { return [] }
            if actionKey == "open-media", case .video(let path, _) = entry.media { return [.open(path)] }
            guard actionKey == "default" || actionKey == "open" || actionKey == "copy" else { return [] }
            if let url = entry.latest.webURL { return [.open(url)] }
            return [.copy(entry.latest.content)]
        case .tick:
            var actions: [Action] = []
            for key in groups.keys.sorted() {
                guard case .holding(var entry, let pending, let flushAt) = groups[key], flushAt <= now else { continue }
                entry.lastPostedAt = now
                actions.append(.post(request(for: entry, key: key, coalesced: pending)))
                groups[key] = .shown(entry)
            }
            return actions
        }
    }

    private mutating func found(_ event: NotificationEvent, media: NotificationMedia?, now: Double) -> [Action] {
        let key = event.groupKey
        guard let state = groups[key] else {
            let entry = Entry(count: 1, latest: event, media: media, present: [event.content], lastPostedAt: now)
            groups[key] = .shown(entry)
            return [.post(request(for: entry, key: key, coalesced: 0))]
        }
        var entry = state.entry
        entry.count += 1
        entry.latest = event
        entry.media = media
        if !entry.present.contains(event.content) { entry.present.append(event.content) }
        switch state {
        case .holding(_, let pending, let flushAt):
            groups[key] = .holding(entry, pending: pending + 1, flushAt: flushAt)
            return []
        case .shown, .marked:
            if case .shown = state, now - entry.lastPostedAt < policy.coalesceWindow {
                let flushAt = entry.lastPostedAt + policy.coalesceWindow
                groups[key] = .holding(entry, pending: 1, flushAt: flushAt)
                return [.wake(at: flushAt)]
            }
            entry.lastPostedAt = now
            groups[key] = .shown(entry)
            return [.post(request(for: entry, key: key, coalesced: 0))]
        }
    }

    private mutating func lost(_ event: NotificationEvent, now: Double) -> [Action] {
        let key = event.groupKey
        guard var entry = groups[key]?.entry else { return [] }
        entry.present.removeAll { $0 == event.content }
        guard entry.present.isEmpty else {
            groups[key] = groups[key]!.replacing(entry)
            return []
        }
        return endGroup(key, entry: entry, note: "no longer heard", now: now)
    }

    private mutating func expired(_ event: NotificationEvent, now: Double) -> [Action] {
        var actions: [Action] = []
        for key in groups.keys.sorted() {
            guard let entry = groups[key]?.entry,
                  key == event.groupKey || entry.latest.subscriptionID == event.subscriptionID else { continue }
            actions += endGroup(key, entry: entry, note: "subscription ended", now: now)
        }
        return actions
    }

    private mutating func endGroup(_ key: String, entry: Entry, note: String, now: Double) -> [Action] {
        switch policy.lost {
        case .ignore:
            groups[key] = .shown(entry)
            return []
        case .withdraw:
            groups[key] = nil
            return entry.notificationID == 0 ? [] : [.close(notificationID: entry.notificationID)]
        case .mark:
            var marked = entry
            marked.present = []
            marked.lastPostedAt = now
            groups[key] = .marked(marked)
            var update = self.request(for: marked, key: key, coalesced: 0)
            update.summary += " (\(note))"
            update.urgency = 0
            return [.post(update)]
        }
    }

    private func groupKey(for id: UInt32) -> String? {
        groups.first { $0.value.entry.notificationID == id }?.key
    }

    /// The Notify request showing `entry`; `coalesced` finds arrived since the last update.
    func request(for entry: Entry, key: String, coalesced: Int) -> NotificationRequest {
        let event = entry.latest
        var summary = event.title
        if !event.namespace.isEmpty || !event.type.isEmpty {
            summary += ": " + [event.namespace, event.type].filter { !$0.isEmpty }.joined(separator: "/")
        }
        if entry.count > 1 { summary += " (\(entry.count))" }
        var lines: [String] = []
        if coalesced > 0 { lines.append("\(coalesced) new messages; latest:") }
        lines.append(Self.preview(event))
        switch entry.media {
        case .video(_, let url), .link(let url): if url != event.webURL && url != event.text { lines.append(url) }
        case .image, nil: break
        }
        lines.append("found at " + Self.clockTime(event.foundAt, in: policy.timeZone))
        var actions: [(key: String, label: String)] = [("default", event.webURL != nil ? "Open" : "Copy")]
        if case .video = entry.media { actions.append(("open-media", "Play video")) }
        var imagePath: String? = nil
        if case .image(let path) = entry.media { imagePath = path }
        return NotificationRequest(groupKey: key, replacesID: entry.notificationID, summary: summary,
                                   body: lines.joined(separator: "\n"), actions: actions, urgency: policy.urgency,
                                   category: policy.category, imagePath: imagePath)
    }

    /// The content as text (at most 200 characters), or its first 32 bytes in hexadecimal.
    static func preview(_ event: NotificationEvent) -> String {
        if let text = event.text {
            return text.count > 200 ? String(text.prefix(200)) + "…" : text
        }
        let hex = event.content.prefix(32).map { String(format: "%02x", $0) }.joined()
        return "\(event.content.count) bytes: \(hex)" + (event.content.count > 32 ? "…" : "")
    }

    /// HH:mm:ss of `date` in `zone`.
    static func clockTime(_ date: Date, in zone: TimeZone) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.hour, .minute, .second], from: date)
        return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }
}

extension NotificationGrouper.GroupState {
    mutating func setID(_ id: UInt32) {
        var entry = entry
        entry.notificationID = id
        self = replacing(entry)
    }

    func replacing(_ entry: NotificationGrouper.Entry) -> Self {
        switch self {
        case .shown: .shown(entry)
        case .holding(_, let pending, let flushAt): .holding(entry, pending: pending, flushAt: flushAt)
        case .marked: .marked(entry)
        }
    }
}
