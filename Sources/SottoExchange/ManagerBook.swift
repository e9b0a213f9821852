import SottoExchangeCore

/// What a ``MessageManager`` knows, as a value: its operations, the link's state and the tokens to ignore.
/// The matcher's notices change it through ``receive(_:now:)``, which returns what the manager must do
/// (deliver events, answer waiting callers, call its handlers); it does no I/O and reads no clock, so
/// found/lost bookkeeping across reconnections is tested on its own.
struct ManagerBook {
    /// Every operation the manager made, by id: one record each (ended ones keep their final status).
    var operations: [OperationID: OperationRecord] = [:]
    /// The linked backend's state (unused by an embedded core).
    var link = LinkState()
    /// Tokens the matcher called invalid, ignored until the time (s) given.
    var invalidTokens: [[UInt8]: Double] = [:]
    /// The profile the matcher directs this session to play its token frames in (link adaptation).
    var broadcastProfile = BroadcastProfile.standard

    /// The linked backend's state.
    struct LinkState {
        /// The token the matcher issued to this session.
        var token: [UInt8]?
        var connected = false
        /// Whether the last connection resumed the session (then what is gone is lost at once).
        var resumed = false
        /// Set by the manager's `close`: the link's end is not news to report, and nothing is found any more.
        var closing = false
        /// The link gave up for good (a wrong API key, a session quota).
        var failure: ExchangeError?
        /// When each payload was last reported (s), so that a payload still heard is reported at intervals.
        var lastReported: [Payload: Double] = [:]
    }

    /// What the manager does for the book, in order.
    enum Action {
        /// Yield `event` to the subscription's reader and handler (unless it was cancelled meanwhile).
        case deliver(SubscriptionEvent, SubscriptionRecord)
        /// No more events for this subscription.
        case finish(AsyncStream<SubscriptionEvent>.Continuation)
        /// Answer the sender waiting for an operation's acceptance (nil: accepted or no answer; else refused).
        case answer(Waiter, ExchangeError?)
        /// Answer every caller of `connect` (nil: connected).
        case wakeConnectionWaiters(ExchangeError?)
        /// Tell the app: connected, disconnected or failed.
        case connectionChanged(MatcherNotice)
        /// Hand the matcher's turns to the radio (with the room alias to play in the slots, if any).
        case turns(slotOffsets: [Double], followFor: Double, alias: UInt16?)
        case debug(String)
    }

    /// One notice from the matcher (embedded events are turned into notices too).
    /// - Parameters:
    ///   - notice: what the matcher said.
    ///   - now: the manager's time (s): its clock with a link, the caller's last `now` embedded.
    mutating func receive(_ notice: MatcherNotice, now: Double) -> [Action] {
        var actions: [Action] = []
        receive(notice, now: now, into: &actions)
        return actions
    }

    private mutating func receive(_ notice: MatcherNotice, now: Double, into actions: inout [Action]) {
        switch notice {
        case .token(let token):
            link.token = token
        case .accepted(let op, let visible):
            if operations[op]?.status == .starting { operations[op]?.status = .active }
            if operations[op]?.subscription != nil { reconcile(op, visible: visible, now: now, into: &actions) }
            actions += resolveAccept(op, with: nil)
        case .rejected(let op, let error):
            actions.append(.debug("operation \(op.value) refused: \(error)"))
            if operations[op]?.answer != nil {
                actions += resolveAccept(op, with: error)
            } else if operations[op]?.isLive == true {
                if let events = operations[op]?.fail() { actions.append(.finish(events)) }
            }
        case .found(let op, let message):
            operations[op]?.subscription?.unconfirmed[message] = nil
            guard !link.closing else { return }  // closing: everything was reported lost
            guard operations[op]?.subscription?.reported.contains(message) == false else { return }
            operations[op]?.subscription?.reported.insert(message)
            deliver(op, .found(message), into: &actions)
        case .lost(let op, let message):
            operations[op]?.subscription?.unconfirmed[message] = nil
            guard operations[op]?.subscription?.reported.remove(message) != nil else { return }
            deliver(op, .lost(message), into: &actions)
        case .signalChanged(let op, let message, let snr, let level):
            guard operations[op]?.subscription?.reported.contains(message) == true else { return }
            deliver(op, .signalChanged(message, snr: snr, level: level), into: &actions)
        case .expired(let op):
            if let subscription = operations[op]?.subscription {
                for message in subscription.reported.sorted(by: { $0.description < $1.description }) { deliver(op, .lost(message), into: &actions) }
                deliver(op, .expired, into: &actions)
            }
            operations[op]?.status = .expired
            operations[op]?.mode = nil
            operations[op]?.audio = nil
            if let events = operations[op]?.takeSubscription()?.continuation { actions.append(.finish(events)) }
        case .invalidToken(let token):
            invalidTokens[token] = now + MessageManager.invalidTokenCache
            actions.append(.debug("invalid token \(token)"))
        case .connected(let resumed):
            link.connected = true
            link.resumed = resumed
            if !resumed {
                // A new session starts in the default profile (a resumed one is told its profile again).
                broadcastProfile = .standard
                // A new session: what was found must be found again within the lost timeout, or it is lost.
                for (op, operation) in operations {
                    guard let subscription = operation.subscription, !subscription.reported.isEmpty else { continue }
                    let deadline = now + subscription.lostTimeout
                    operations[op]?.subscription?.unconfirmed = Dictionary(uniqueKeysWithValues: subscription.reported.map { ($0, deadline) })
                }
            }
            actions.append(.wakeConnectionWaiters(nil))
            actions.append(.connectionChanged(notice))
        case .disconnected:
            link.connected = false
            for op in waitingForAnswers { actions += resolveAccept(op, with: nil) }
            if !link.closing { actions.append(.connectionChanged(notice)) }
        case .turns(let offsets, let follow, let alias):
            actions.append(.turns(slotOffsets: offsets, followFor: follow, alias: alias))
        case .profile(let profile):
            if profile != broadcastProfile { actions.append(.debug("token frames in the \(profile) profile")) }
            broadcastProfile = profile
        case .failed(let error):
            link.connected = false
            link.failure = error
            actions.append(.wakeConnectionWaiters(error))
            for op in waitingForAnswers { actions += resolveAccept(op, with: error) }
            for (id, operation) in operations where operation.isLive { operations[id]?.status = .failed }
            actions.append(.connectionChanged(notice))
        }
    }

    /// The matcher answered operation `id` (nil: accepted, or no answer in time): its waiting sender gets
    /// the answer; one still sending it finds it when the send returns.
    mutating func resolveAccept(_ id: OperationID, with refusal: ExchangeError?) -> [Action] {
        switch operations[id]?.answer {
        case .waiting(let waiter)?:
            operations[id]?.answer = nil
            return [.answer(waiter, refusal)]
        case .sending?, .answeredWhileSending?:
            operations[id]?.answer = .answeredWhileSending(refusal)  // the last answer counts
            return []
        case nil:
            return []
        }
    }

    /// The operations whose sender waits for the matcher's answer.
    private var waitingForAnswers: [OperationID] {
        operations.compactMap { id, operation in if case .waiting = operation.answer { return id } else { return nil } }
    }

    /// A subscription the matcher (re)accepted with what it has found now: after a resumed session, what was
    /// reported and is gone is lost now; after a new session it has until its lost timeout to come back.
    private mutating func reconcile(_ op: OperationID, visible: [Message], now: Double, into actions: inout [Action]) {
        let found = Set(visible)
        if link.resumed {
            for message in (operations[op]?.subscription?.reported ?? []).subtracting(found).sorted(by: { $0.description < $1.description }) {
                operations[op]?.subscription?.reported.remove(message)
                deliver(op, .lost(message), into: &actions)
            }
        }
        for message in visible { receive(.found(op, message), now: now, into: &actions) }
    }

    /// Reports lost what a new session did not confirm by `now` (s).
    mutating func expireUnconfirmed(now: Double) -> [Action] {
        var actions: [Action] = []
        for (op, operation) in operations {
            guard let pending = operation.subscription?.unconfirmed, !pending.isEmpty else { continue }
            for (message, deadline) in pending.sorted(by: { $0.key.description < $1.key.description }) where deadline <= now {
                operations[op]?.subscription?.unconfirmed[message] = nil
                if operations[op]?.subscription?.reported.remove(message) != nil { deliver(op, .lost(message), into: &actions) }
            }
        }
        return actions
    }

    /// The manager closes its link: every found message is lost locally (the matcher forgets the session),
    /// and nothing more is found.
    mutating func closeLink() -> [Action] {
        link.closing = true
        var actions: [Action] = []
        for (op, operation) in operations {
            for message in (operation.subscription?.reported ?? []).sorted(by: { $0.description < $1.description }) {
                deliver(op, .lost(message), into: &actions)
            }
            operations[op]?.subscription?.reported = []
        }
        return actions
    }

    private func deliver(_ op: OperationID, _ event: SubscriptionEvent, into actions: inout [Action]) {
        guard let subscription = operations[op]?.subscription else { return }
        actions.append(.deliver(event, subscription))
    }
}
