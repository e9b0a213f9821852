import Foundation
import SottoDaemon
import SottoExchange
import SottoExchangeCore
import SottoNotify
import Synchronization

extension NotificationEvent {
    /// The notification of a daemon event: a subscription's found, lost or expired event (beacon attachments
    /// arrive as found messages), with its operation's group key and the time the daemon heard it; nil for
    /// every other event (signal changes, consent, device, operation and matcher notices).
    /// - Parameter event: the daemon's event.
    public init?(daemonEvent event: DaemonEvent) {
        guard case .subscription(let subscription, _) = event.kind, let operation = event.operation else { return nil }
        let kind: Kind
        let message: Message?
        switch subscription {
        case .found(let found): (kind, message) = (.found, found)
        case .lost(let lost): (kind, message) = (.lost, lost)
        case .expired: (kind, message) = (.expired, nil)
        case .signalChanged: return nil
        }
        self.init(kind: kind, groupKey: event.group, subscriptionID: operation, title: "Sotto",
                  namespace: message?.namespace ?? "", type: message?.type ?? "", content: message?.content ?? [],
                  foundAt: event.date)
    }
}

/// The daemon's notification sink: turns its subscription events into `NotificationEvent`s and hands them,
/// in order, to a desktop notifier and/or a per-event command. ``receive(_:)`` only queues (it runs on the
/// daemon's actor); one task of its own delivers. A failed delivery is logged, never fatal.
///
/// A desktop notifier that could not be had at start (the daemon started at login before the desktop's
/// notification server, or with no session bus yet) is asked for again when an event is to be shown, at most
/// once per ``reconnectInterval``, on a thread of its own (connecting blocks on the bus); the event that found
/// it is shown.
public final class DaemonNotifications: DaemonEventSink {
    /// The shortest time between two attempts to reach a missing notification server (s).
    public static let reconnectInterval = 2.0

    private let queue: AsyncStream<NotificationEvent>.Continuation
    private let worker: Task<Void, Never>
    private let parts: Parts

    /// The notifier and its media fetcher, once there are.
    private final class Parts: Sendable {
        private let parts: Mutex<(DesktopNotifier?, MediaFetcher?)>
        init(desktop: DesktopNotifier?, media: MediaFetcher?) { parts = Mutex((desktop, media)) }
        var current: (DesktopNotifier?, MediaFetcher?) { parts.withLock { $0 } }
        func set(_ desktop: DesktopNotifier, _ media: MediaFetcher?) { parts.withLock { $0 = (desktop, media) } }
    }

    /// A sink delivering to `desktop` and `exec` (either may be nil).
    /// - Parameters:
    ///   - desktop: the desktop notifier (its media fetcher, if any, in `media`).
    ///   - media: the notifier's media fetcher, shut down by ``finish()``.
    ///   - exec: the per-event command.
    ///   - connectDesktop: while there is no desktop notifier, makes one (with its media fetcher) when an event
    ///     is to be shown; it throws while no notification server answers. Nil: never.
    ///   - log: where failures of the command, and a notification server found late, are reported (one line each).
    public init(desktop: DesktopNotifier?, media: MediaFetcher? = nil, exec: ExecSink?,
                connectDesktop: (@Sendable () throws -> (DesktopNotifier, MediaFetcher?))? = nil,
                log: @escaping @Sendable (String) -> Void) {
        let (events, queue) = AsyncStream.makeStream(of: NotificationEvent.self)
        self.queue = queue
        let parts = Parts(desktop: desktop, media: media)
        self.parts = parts
        worker = Task {
            var lastAttempt: ContinuousClock.Instant?
            for await event in events {
                var (desktop, _) = parts.current
                if desktop == nil, let connectDesktop,
                   lastAttempt.map({ ContinuousClock.now - $0 >= .seconds(Self.reconnectInterval) }) ?? true {
                    lastAttempt = ContinuousClock.now
                    if let made = await Self.onThread(connectDesktop) {
                        parts.set(made.0, made.1)
                        desktop = made.0
                        log("desktop notifications on: a notification server answers (\(made.0.serverName))")
                    }
                }
                if let desktop { await desktop.deliver(event) }
                if let exec {
                    do {
                        let status = try await exec.deliver(event)
                        if status != 0 { log("warning: --exec \(exec.command[0]) exited with status \(status) for a \(event.kind.rawValue) event") }
                    } catch {
                        log("warning: --exec: \(error)")
                    }
                }
            }
        }
    }

    /// Runs `connect` on a thread of its own (it blocks on the bus); nil when it throws.
    private static func onThread(_ connect: @escaping @Sendable () throws -> (DesktopNotifier, MediaFetcher?)) async -> (DesktopNotifier, MediaFetcher?)? {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: try? connect()) }
            thread.name = "sotto-notify-connect"
            thread.start()
        }
    }

    /// Queues the notification of `event`, if it has one.
    /// - Parameter event: the daemon's event.
    public func receive(_ event: DaemonEvent) {
        if let notification = NotificationEvent(daemonEvent: event) { queue.yield(notification) }
    }

    /// Delivers what is queued, then closes the notifier and the media fetcher.
    public func finish() async {
        queue.finish()
        await worker.value
        let (desktop, media) = parts.current
        await desktop?.close()
        await media?.shutdown()
    }
}
