import Foundation
import SottoDaemon
import SottoExchange
import SottoNotify

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
public final class DaemonNotifications: DaemonEventSink {
    private let queue: AsyncStream<NotificationEvent>.Continuation
    private let worker: Task<Void, Never>
    private let desktop: DesktopNotifier?
    private let media: MediaFetcher?

    /// A sink delivering to `desktop` and `exec` (either may be nil).
    /// - Parameters:
    ///   - desktop: the desktop notifier (its media fetcher, if any, in `media`).
    ///   - media: the notifier's media fetcher, shut down by ``finish()``.
    ///   - exec: the per-event command.
    ///   - log: where failures of the command are reported (one line each).
    public init(desktop: DesktopNotifier?, media: MediaFetcher? = nil, exec: ExecSink?, log: @escaping @Sendable (String) -> Void) {
        let (events, queue) = AsyncStream.makeStream(of: NotificationEvent.self)
        self.queue = queue
        self.desktop = desktop
        self.media = media
        worker = Task {
            for await event in events {
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

    /// Queues the notification of `event`, if it has one.
    /// - Parameter event: the daemon's event.
    public func receive(_ event: DaemonEvent) {
        if let notification = NotificationEvent(daemonEvent: event) { queue.yield(notification) }
    }

    /// Delivers what is queued, then closes the notifier and the media fetcher.
    public func finish() async {
        queue.finish()
        await worker.value
        await desktop?.close()
        await media?.shutdown()
    }
}
