import Foundation
import SottoExchange
import SottoExchangeCore
import SottoTools

/// The daemon's operations as a pure state machine (no devices, matcher, files or clock of its own): each
/// operation's phase, consent, expiries, what is saved, and what is reported. ``step(_:)`` takes what
/// happened and returns what the ``Daemon`` actor must do (start or stop an operation's handles, save the
/// persistent operations, emit an event, log), in order; the actor does the I/O and reports the outcome of
/// each activation back as an input.
struct OperationBook: Sendable {
    /// Where an operation is in its life.
    enum Phase: Sendable, Equatable {
        /// Being started by the actor (devices, matcher: awaited): nothing starts it a second time meanwhile.
        /// Holds the reason it was waiting for, if it was.
        case starting(waitingFor: String?)
        /// Its handles run.
        case running
        /// Not running yet or any more for a reason that may pass (device, matcher): retried.
        case waiting(String)
        /// Consent is revoked: resumes when it is granted again (persistent operations only).
        case paused
    }

    /// One operation.
    struct Entry: Sendable, Equatable {
        let id: String
        let spec: OperationSpec
        /// When its time to live runs out (nil: never).
        let expiresAt: Date?
        /// When it last started running (subscription event times count from here).
        var started: Date
        var phase: Phase
        /// Its notification group key: the spec's, else its id.
        var group: String { spec.group ?? id }
        /// Running, starting or waiting to run (not paused for want of consent).
        var isLive: Bool { phase != .paused }
    }

    /// What happened.
    enum Input: Sendable {
        /// A client's operation, accepted by the actor (consent granted, spec checked): it starts at once.
        case start(id: String, spec: OperationSpec, now: Date)
        /// Saving a client's new persistent operation failed: it is forgotten (the client gets the error).
        case saveFailed(id: String)
        /// The saved operations, at the daemon's start.
        case restore([SavedOperation], now: Date)
        /// The actor made the operation's handles.
        case activated(id: String, now: Date)
        /// The actor could not make them: `device` when the device failed (it may come back); `forClient` when
        /// a client's start waits for the answer (then any other failure ends the operation).
        case activationFailed(id: String, reason: String, device: Bool, forClient: Bool)
        /// A client cancelled it.
        case cancel(id: String, now: Date)
        /// Once a second: expiries; with `retry`, waiting operations are started again.
        case tick(now: Date, retry: Bool)
        /// The stored consent now says `granted`.
        case consent(granted: Bool)
    }

    /// What the actor must do, in order.
    enum Action: Sendable, Equatable {
        /// Make the operation's handles, then report ``Input/activated(id:now:)`` or ``Input/activationFailed(id:reason:device:forClient:)``.
        case activate(String)
        /// Stop the operation's handles, if it has any.
        case stopHandles(String)
        /// Save these persistent operations (the whole file).
        case save([SavedOperation])
        /// Report an event of an operation.
        case emit(DaemonEvent.Kind, operation: String?, group: String?)
        /// A log line.
        case log(String)
        /// No publication or subscription is live: close the shared engine (radio and matcher).
        case teardownEngine
    }

    private(set) var entries: [String: Entry] = [:]
    /// Ids in the order the operations were started or restored.
    private(set) var order: [String] = []
    private(set) var consentGranted: Bool

    /// - Parameter consentGranted: the stored consent at the start.
    init(consentGranted: Bool) { self.consentGranted = consentGranted }

    /// The operations, in order.
    var operations: [Entry] { order.compactMap { entries[$0] } }

    /// The persistent operations as saved.
    var saved: [SavedOperation] {
        operations.filter(\.spec.persistent).map { SavedOperation(id: $0.id, spec: $0.spec, expiresAt: $0.expiresAt?.timeIntervalSince1970) }
    }

    mutating func step(_ input: Input) -> [Action] {
        switch input {
        case .start(let id, let spec, let now):
            entries[id] = Entry(id: id, spec: spec, expiresAt: spec.ttl.map { now.addingTimeInterval(Double($0)) }, started: now,
                                phase: .starting(waitingFor: nil))
            order.append(id)
            return spec.persistent ? [.save(saved)] : []

        case .saveFailed(let id):
            remove(id)
            return []

        case .restore(let list, let now):
            var actions: [Action] = []
            var dropped = 0
            for saved in list {
                let expiresAt = saved.expiresAt.map { Date(timeIntervalSince1970: $0) }
                if let expiresAt, expiresAt <= now { dropped += 1; continue }
                guard (try? saved.spec.validate()) != nil, OperationID.isValid(saved.id), entries[saved.id] == nil else {
                    actions.append(.log("warning: a saved operation is not valid and was not restored: \(saved.id)"))
                    continue
                }
                entries[saved.id] = Entry(id: saved.id, spec: saved.spec, expiresAt: expiresAt, started: now,
                                          phase: consentGranted ? .waiting("restoring") : .paused)
                order.append(saved.id)
            }
            if dropped > 0 {
                actions += [.log("\(dropped) saved operation(s) expired while the daemon was not running"), .save(saved)]
            }
            if !order.isEmpty { actions.append(.log("restored \(order.count) persistent operation(s)\(consentGranted ? "" : " (paused: no consent)")")) }
            for id in order {
                guard let entry = entries[id], case .waiting = entry.phase else { continue }
                actions += [activate(id), .emit(.operation(status: "restored", detail: nil), operation: id, group: entry.group)]
            }
            return actions

        case .activated(let id, let now):
            guard var entry = entries[id], case .starting = entry.phase else {
                // Cancelled, or paused by a revocation, while it was starting: its new handles go.
                return [.stopHandles(id)]
            }
            entry.phase = .running
            entry.started = now
            entries[id] = entry
            return []

        case .activationFailed(let id, let reason, let device, let forClient):
            guard var entry = entries[id], case .starting(let previous) = entry.phase else { return [] }
            if forClient && !device {
                remove(id)
                return entry.spec.persistent ? [.save(saved)] : []
            }
            entry.phase = .waiting(reason)
            entries[id] = entry
            return previous == reason ? [] : [.log("operation \(id) waits: \(reason)")]

        case .cancel(let id, let now):
            return end(id, status: "ended", detail: "cancelled", now: now)

        case .tick(let now, let retry):
            var actions: [Action] = []
            for id in order {
                guard let entry = entries[id], let expiresAt = entry.expiresAt, expiresAt <= now else { continue }
                actions += end(id, status: "expired", detail: nil, now: now)
            }
            if retry && consentGranted {
                for id in order {
                    guard let entry = entries[id], case .waiting = entry.phase else { continue }
                    actions.append(activate(id))
                }
            }
            if !entries.values.contains(where: { $0.spec.kind != .beacon && $0.isLive }) { actions.append(.teardownEngine) }
            return actions

        case .consent(let granted):
            guard granted != consentGranted else { return [] }
            consentGranted = granted
            var actions: [Action] = [.emit(.permission(granted: granted), operation: nil, group: nil)]
            if granted {
                actions.append(.log("consent granted: resuming paused operations"))
                for id in order {
                    guard let entry = entries[id], case .paused = entry.phase else { continue }
                    actions.append(activate(id))
                }
                return actions
            }
            actions.append(.log("consent revoked: every operation stops"))
            for id in order {
                guard var entry = entries[id] else { continue }
                actions.append(.stopHandles(id))
                if entry.spec.persistent {
                    entry.phase = .paused
                    entries[id] = entry
                    actions.append(.emit(.operation(status: "paused", detail: "consent revoked"), operation: id, group: entry.group))
                } else {
                    entries.removeValue(forKey: id)
                    actions.append(.emit(.operation(status: "ended", detail: "consent revoked"), operation: id, group: entry.group))
                }
            }
            order.removeAll { entries[$0] == nil }
            actions.append(.teardownEngine)
            return actions
        }
    }

    /// Marks a waiting or paused operation as starting and asks the actor to start it.
    private mutating func activate(_ id: String) -> Action {
        if var entry = entries[id] {
            switch entry.phase {
            case .waiting(let reason): entry.phase = .starting(waitingFor: reason)
            case .paused: entry.phase = .starting(waitingFor: nil)
            case .starting, .running: break
            }
            entries[id] = entry
        }
        return .activate(id)
    }

    private mutating func remove(_ id: String) {
        entries.removeValue(forKey: id)
        order.removeAll { $0 == id }
    }

    /// Ends an operation (cancelled, expired): its handles stop, the saved file follows, clients are told.
    private mutating func end(_ id: String, status: String, detail: String?, now: Date) -> [Action] {
        guard let entry = entries[id] else { return [] }
        remove(id)
        var actions: [Action] = [.stopHandles(id)]
        if entry.spec.persistent { actions.append(.save(saved)) }
        if status == "expired" && entry.spec.kind == .subscribe {
            actions.append(.emit(.subscription(.expired, time: now.timeIntervalSince(entry.started)), operation: id, group: entry.group))
        }
        actions.append(.emit(.operation(status: status, detail: detail), operation: id, group: entry.group))
        return actions
    }

    /// What `ops list` shows of an operation.
    /// - Parameters:
    ///   - entry: the operation.
    ///   - deviceFault: the shared device's fault, if any (publications and subscriptions wait for it).
    ///   - now: the time its remaining time to live counts from.
    static func record(_ entry: Entry, deviceFault: String?, now: Date) -> OperationRecord {
        let status: String
        switch entry.phase {
        case .running where entry.spec.kind != .beacon && deviceFault != nil: status = "waiting: device: \(deviceFault ?? "")"
        case .running: status = "running"
        case .starting: status = "starting"
        case .waiting(let reason): status = "waiting: \(reason)"
        case .paused: status = "paused: no consent"
        }
        return OperationRecord(id: entry.id, kind: entry.spec.kind.rawValue, status: status,
                               remaining: entry.expiresAt.map { max(0, $0.timeIntervalSince(now)) }, persistent: entry.spec.persistent,
                               group: entry.group, summary: Daemon.summary(entry.spec))
    }
}
