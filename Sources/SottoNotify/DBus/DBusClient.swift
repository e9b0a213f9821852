import Foundation
import Synchronization

/// A bus connection pumped by one thread of its own: method calls awaited without blocking a thread, and the
/// signals this connection receives handed to a closure. One thread reads everything, so a reply is never taken
/// by a signal reader (libdbus keeps a blocking call's reply in the shared incoming queue, where another
/// thread's pop would steal it).
final class DBusClient: @unchecked Sendable {
    private struct Pending {
        let continuation: CheckedContinuation<[DBusValue], any Error>
        let deadline: Date
    }

    private struct State {
        var pending: [UInt32: Pending] = [:]
        var stopped = false
    }

    let connection: DBusConnection
    private let state = Mutex(State())
    private let exited = DispatchSemaphore(value: 0)

    /// Starts pumping `connection`; `onSignal` runs on the pump thread for each signal received.
    init(connection: DBusConnection, onSignal: @escaping @Sendable (DBusMessage) -> Void) {
        self.connection = connection
        let thread = Thread { [self] in
            defer { exited.signal() }
            pump(onSignal)
        }
        thread.name = "sotto.dbus"
        thread.start()
    }

    /// Calls a method; fails with NoReply after `timeout` seconds.
    func call(destination: String, path: String, interface: String, member: String, arguments: [DBusValue] = [],
              timeout: Double) async throws -> [DBusValue] {
        try await withCheckedThrowingContinuation { continuation in
            let failure: (any Error)? = state.withLock { state in
                guard !state.stopped else { return DBusFailure.disconnected }
                do {
                    let serial = try connection.sendCall(destination: destination, path: path, interface: interface,
                                                         member: member, arguments: arguments)
                    state.pending[serial] = Pending(continuation: continuation, deadline: Date().addingTimeInterval(timeout))
                    return nil
                } catch {
                    return error
                }
            }
            if let failure { continuation.resume(throwing: failure) } else { connection.flush() }
        }
    }

    /// Stops the pump (waiting for it at most a second) and fails the calls still waiting.
    func stop() {
        let wasStopped = state.withLock { let was = $0.stopped; $0.stopped = true; return was }
        guard !wasStopped else { return }
        _ = exited.wait(timeout: .now() + 1)
        failAll(.disconnected)
    }

    private func pump(_ onSignal: @Sendable (DBusMessage) -> Void) {
        while !state.withLock({ $0.stopped }) {
            let message: DBusMessage?
            do { message = try connection.nextMessage(timeout: 0.05) } catch {
                state.withLock { $0.stopped = true }
                failAll(error)
                return
            }
            if let message {
                switch message.kind {
                case .methodReturn, .error:
                    if let pending = state.withLock({ $0.pending.removeValue(forKey: message.replySerial) }) {
                        if message.kind == .error {
                            pending.continuation.resume(throwing: DBusFailure(name: message.errorName ?? "org.freedesktop.DBus.Error.Failed",
                                                                              message: message.arguments.first?.stringValue ?? ""))
                        } else {
                            pending.continuation.resume(returning: message.arguments)
                        }
                    }
                case .signal:
                    onSignal(message)
                default:
                    break
                }
            }
            let now = Date()
            let expired = state.withLock { state in
                let keys = state.pending.filter { $0.value.deadline <= now }.map(\.key)
                return keys.compactMap { state.pending.removeValue(forKey: $0) }
            }
            for pending in expired {
                pending.continuation.resume(throwing: DBusFailure(name: "org.freedesktop.DBus.Error.NoReply", message: "no reply in time"))
            }
        }
    }

    private func failAll(_ error: DBusFailure) {
        let pending = state.withLock { state in
            defer { state.pending = [:] }
            return Array(state.pending.values)
        }
        for call in pending { call.continuation.resume(throwing: error) }
    }
}
