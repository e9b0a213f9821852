import Dispatch
import Foundation
import Synchronization
import SottoExchange
import SottoExchangeCore

/// The exchange over a recording: frames become observations at their end time on the sample clock,
/// and time advances in 50 ms steps between them, so lost and expired happen when they would have live.
public enum OfflineTimeline {
    /// Time step between ticks (s).
    public static let step = 0.05

    /// The events, with their time (s on the recording's clock), of a subscription with `filter`,
    /// `strategy` and `lostTimeout` (s) to the frames heard at their times over `duration` seconds.
    public static func run(frames: [(time: Double, token: [UInt8], snr: Double, level: Double)], duration: Double, filter: MessageFilter,
                           strategy: Strategy, lostTimeout: Double) async throws -> [(Double, SubscriptionEvent)] {
        let collector = EventCollector()
        do {
            let manager = MessageManager(appID: "sotto-cli", broadcasts: false, now: 0)
            let subscription = try await manager.subscribe(filter: filter, strategy: strategy, lostTimeout: lostTimeout, now: 0) { event in
                collector.append(event)
            }
            var now = 0.0
            for frame in frames {
                while now + step < frame.time { now += step; collector.time = now; await manager.tick(now: now) }
                now = frame.time
                collector.time = now
                await manager.heard(frame: frame.token, snr: frame.snr, level: frame.level, now: now)
            }
            while now + step < duration { now += step; collector.time = now; await manager.tick(now: now) }
            collector.time = duration
            await manager.close(now: duration)
            _ = subscription
        }
        return collector.events
    }
}

/// Gathers events with the time they happened.
final class EventCollector: Sendable {
    private let state = Mutex<(stored: [(Double, SubscriptionEvent)], current: Double)>(([], 0))
    var time: Double {
        get { state.withLock { $0.current } }
        set { state.withLock { $0.current = newValue } }
    }
    func append(_ event: SubscriptionEvent) { state.withLock { $0.stored.append(($0.current, event)) } }
    var events: [(Double, SubscriptionEvent)] { state.withLock { $0.stored } }
}

