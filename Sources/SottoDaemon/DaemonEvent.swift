import Foundation
import SottoExchange
import SottoExchangeCore
import SottoTools

/// Something the daemon reports to its clients and sinks: a subscription event of an operation, or a status
/// change (consent, device, operation, matcher). Carries the notification group key of its operation.
public struct DaemonEvent: Sendable, Equatable {
    /// What happened.
    public enum Kind: Sendable, Equatable {
        /// A subscription's found, lost, signal or expired event; `time` is seconds since the operation started.
        case subscription(SubscriptionEvent, time: Double)
        /// The user granted (true) or revoked (false) consent.
        case permission(granted: Bool)
        /// The audio device failed (with the error) or works again (nil).
        case device(fault: String?)
        /// An operation started, ended or expired (`status`), with why.
        case operation(status: String, detail: String?)
        /// The matcher connection changed (connected, disconnected, failed).
        case matcher(status: String, detail: String?)
    }

    /// What happened.
    public var kind: Kind
    /// The operation it concerns (nil for daemon-wide changes).
    public var operation: String?
    /// The operation's notification group key (nil for daemon-wide changes).
    public var group: String?
    /// When it happened (wall clock).
    public var date: Date

    /// - Parameters:
    ///   - kind: what happened.
    ///   - operation: the operation concerned.
    ///   - group: its group key.
    ///   - date: when.
    public init(kind: Kind, operation: String? = nil, group: String? = nil, date: Date = Date()) {
        self.kind = kind
        self.operation = operation
        self.group = group
        self.date = date
    }

    /// The event as the control protocol and `ops watch` carry it (the CLI's JSON Lines records).
    public var reply: ControlReply {
        var reply = ControlReply(reply: "event")
        let time = date.timeIntervalSince1970
        switch kind {
        case .subscription(let event, let at):
            var record = EventRecord(event, at: at)
            record.operation = operation
            record.group = group
            reply.event = record
        case .permission(let granted):
            reply.notice = NoticeRecord(time: time, notice: "permission", status: granted ? "granted" : "revoked")
        case .device(let fault):
            reply.notice = NoticeRecord(time: time, notice: "device", status: fault == nil ? "running" : "fault", detail: fault)
        case .operation(let status, let detail):
            reply.notice = NoticeRecord(time: time, notice: "operation", status: status, operation: operation, group: group, detail: detail)
        case .matcher(let status, let detail):
            reply.notice = NoticeRecord(time: time, notice: "matcher", status: status, detail: detail)
        }
        return reply
    }
}

/// Receives every event of the daemon as it happens (desktop notifications, a journal, `--exec` hooks).
/// Called on the daemon's actor: return quickly and do slow work elsewhere.
public protocol DaemonEventSink: Sendable {
    /// One event, in the order they happen.
    /// - Parameter event: what happened, with its operation and group key.
    func receive(_ event: DaemonEvent)
}
