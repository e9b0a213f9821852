import CSottoShims
import Foundation
import SottoSupport
import Synchronization

/// SIGINT and SIGTERM, caught once for the process: a long-running command stops cleanly on the first
/// (its ``onStop(_:)`` handlers run, ``stop`` is set; it prints what it did and exits as the exit-status
/// table says), and a second signal ends the process at once with 128 + the signal, whatever the first is
/// waiting for (a drain, a device that does not come back).
///
/// The signals are caught by a C handler that writes to a pipe (``sotto_catch_stop_signals``), read by a
/// thread of its own, so a signal reaches the command whichever thread the kernel hands it to. The handler
/// is installed first thing (``prepare()``); until a command uses ``stop`` or ``onStop(_:)``, a signal does
/// what it would without it.
enum Interruption {
    /// Installs the handler (first thing in `main`); a short command keeps the default actions.
    static func prepare() { _ = sotto_prepare_stop_signals() }

    private static let flag = StopFlag()
    /// The handlers to run on the first signal, by registration number.
    private static let handlers = Mutex<(all: [Int: @Sendable () -> Void], next: Int)>(([:], 0))

    /// Installs the handler and starts the thread that reads the pipe (once; catching starts with the first use).
    nonisolated(unsafe) private static let installed: Bool = {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return false }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let reader = fds[0]
        let thread = Thread {
            var byte: UInt8 = 0
            while read(reader, &byte, 1) < 0 && errno == EINTR {}
            let all = handlers.withLock { state in
                flag.set()  // under the lock: a handler registered from now on runs at once instead
                return Array(state.all.values)
            }
            // Each on a thread of its own: one that waits (a capture thread ending) must not hold back another.
            for handler in all { Thread.detachNewThread(handler) }
        }
        thread.name = "sotto-signals"
        thread.start()
        return sotto_catch_stop_signals(fds[1]) == 0
    }()

    /// A handler registered with ``onStop(_:)``; `cancel()` removes it.
    struct Registration: Sendable {
        fileprivate let id: Int
        func cancel() { _ = Interruption.handlers.withLock { $0.all.removeValue(forKey: id) } }
    }

    /// Runs `handler` (on a thread of its own) on the first SIGINT or SIGTERM, until cancelled; at once when
    /// one already came.
    static func onStop(_ handler: @escaping @Sendable () -> Void) -> Registration {
        _ = installed
        let id = handlers.withLock { state -> Int? in
            if flag.isSet { return nil }
            state.next += 1
            state.all[state.next] = handler
            return state.next
        }
        guard let id else {
            Thread.detachNewThread(handler)
            return Registration(id: 0)
        }
        return Registration(id: id)
    }

    /// Set once SIGINT or SIGTERM arrives (catching them starts with the first use).
    static var stop: StopFlag {
        _ = installed
        return flag
    }
}
