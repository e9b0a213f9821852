import Foundation
@testable import SottoDaemon
import SottoExchange
import SottoExchangeCore
import SottoTools
import Testing

/// The daemon's bookkeeping as a pure state machine: what each input does to the operations and which actions
/// it asks of the actor (no daemon, devices or files).
@Suite struct OperationBookTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let a = "00000000000a", b = "00000000000b"

    @Test func aClientsOperationStartsRunsAndIsCancelled() {
        var book = OperationBook(consentGranted: true)
        #expect(book.step(.start(id: a, spec: OperationSpec(kind: .subscribe, group: "door"), now: t0)) == [])
        #expect(book.entries[a]?.phase == .starting(waitingFor: nil))
        #expect(OperationBook.record(book.entries[a]!, deviceFault: nil, now: t0).status == "starting")
        #expect(book.step(.activated(id: a, now: t0 + 1)) == [])
        #expect(book.entries[a]?.phase == .running && book.entries[a]?.started == t0 + 1)
        #expect(OperationBook.record(book.entries[a]!, deviceFault: "gone", now: t0).status == "waiting: device: gone")
        #expect(book.step(.cancel(id: a, now: t0 + 2))
                == [.stopHandles(a), .emit(.operation(status: "ended", detail: "cancelled"), operation: a, group: "door")])
        #expect(book.entries.isEmpty && book.order.isEmpty)
        #expect(book.step(.cancel(id: a, now: t0 + 3)) == [])
    }

    @Test func persistentOperationsAreSavedAndAFailedSaveForgetsIt() {
        var book = OperationBook(consentGranted: true)
        let spec = OperationSpec(kind: .beacon, content: "0102", ttl: 60, persistent: true)
        #expect(book.step(.start(id: a, spec: spec, now: t0)) == [.save([SavedOperation(id: a, spec: spec, expiresAt: (t0 + 60).timeIntervalSince1970)])])
        #expect(book.step(.saveFailed(id: a)) == [])
        #expect(book.entries.isEmpty)
        // A client's start that fails for another reason than the device: ended, and the file follows.
        _ = book.step(.start(id: b, spec: spec, now: t0))
        #expect(book.step(.activationFailed(id: b, reason: "bad", device: false, forClient: true)) == [.save([])])
        #expect(book.entries.isEmpty)
    }

    /// The race the phase closes: while an operation is being started (the actor awaits the engine), ticks do
    /// not start it again; a device failure makes it wait and the next retry starts it, once.
    @Test func anOperationBeingStartedIsNeverStartedTwice() {
        var book = OperationBook(consentGranted: true)
        _ = book.step(.start(id: a, spec: OperationSpec(kind: .subscribe), now: t0))
        #expect(!book.step(.tick(now: t0, retry: true)).contains(.activate(a)))
        #expect(book.step(.activationFailed(id: a, reason: "device: busy", device: true, forClient: true)) == [.log("operation \(a) waits: device: busy")])
        #expect(book.entries[a]?.phase == .waiting("device: busy"))
        #expect(book.step(.tick(now: t0 + 1, retry: false)) == [])
        #expect(book.step(.tick(now: t0 + 2, retry: true)) == [.activate(a)])
        #expect(book.entries[a]?.phase == .starting(waitingFor: "device: busy"))
        #expect(book.step(.tick(now: t0 + 3, retry: true)) == [])
        // The same reason again: waiting, not logged twice.
        #expect(book.step(.activationFailed(id: a, reason: "device: busy", device: true, forClient: false)) == [])
        _ = book.step(.tick(now: t0 + 4, retry: true))
        #expect(book.step(.activated(id: a, now: t0 + 5)) == [])
        #expect(book.entries[a]?.phase == .running)
        // A stale report (it is not starting any more) changes nothing.
        #expect(book.step(.activationFailed(id: a, reason: "x", device: true, forClient: false)) == [])
        #expect(book.entries[a]?.phase == .running)
    }

    @Test func revocationStopsEverythingAndHandlesMadeMeanwhileAreStopped() {
        var book = OperationBook(consentGranted: true)
        let kept = OperationSpec(kind: .subscribe, persistent: true, group: "g")
        _ = book.step(.start(id: a, spec: kept, now: t0))
        _ = book.step(.start(id: b, spec: OperationSpec(kind: .publish, content: "01", ttl: 60), now: t0))
        _ = book.step(.activated(id: b, now: t0))
        #expect(book.step(.consent(granted: true)) == [])
        #expect(book.step(.consent(granted: false)) == [
            .emit(.permission(granted: false), operation: nil, group: nil), .log("consent revoked: every operation stops"),
            .stopHandles(a), .emit(.operation(status: "paused", detail: "consent revoked"), operation: a, group: "g"),
            .stopHandles(b), .emit(.operation(status: "ended", detail: "consent revoked"), operation: b, group: b), .teardownEngine])
        #expect(book.order == [a] && book.entries[a]?.phase == .paused)
        // a was still starting: the handles made for it go, and it stays paused.
        #expect(book.step(.activated(id: a, now: t0 + 1)) == [.stopHandles(a)])
        #expect(book.entries[a]?.phase == .paused)
        #expect(!book.step(.tick(now: t0 + 2, retry: true)).contains(.activate(a)))
        #expect(book.step(.consent(granted: true)) == [
            .emit(.permission(granted: true), operation: nil, group: nil), .log("consent granted: resuming paused operations"), .activate(a)])
        #expect(book.entries[a]?.phase == .starting(waitingFor: nil))
    }

    @Test func expiriesEndOperationsAndTheIdleEngineCloses() {
        var book = OperationBook(consentGranted: true)
        _ = book.step(.start(id: a, spec: OperationSpec(kind: .subscribe, ttl: 5, persistent: true), now: t0))
        _ = book.step(.activated(id: a, now: t0 + 1))
        #expect(book.step(.tick(now: t0 + 4, retry: false)) == [])
        #expect(book.step(.tick(now: t0 + 5, retry: false)) == [
            .stopHandles(a), .save([]), .emit(.subscription(.expired, time: 4), operation: a, group: a),
            .emit(.operation(status: "expired", detail: nil), operation: a, group: a), .teardownEngine])
        // A beacon alone needs no engine.
        _ = book.step(.start(id: b, spec: OperationSpec(kind: .beacon, content: "01"), now: t0))
        #expect(book.step(.tick(now: t0 + 6, retry: false)) == [.teardownEngine])
    }

    @Test func savedOperationsAreRestoredWithTheirTimeOrPausedWithoutConsent() {
        let spec = OperationSpec(kind: .subscribe, persistent: true)
        let list = [SavedOperation(id: a, spec: spec, expiresAt: (t0 + 100).timeIntervalSince1970),
                    SavedOperation(id: b, spec: spec, expiresAt: (t0 - 1).timeIntervalSince1970),
                    SavedOperation(id: "../x", spec: spec, expiresAt: nil)]
        var book = OperationBook(consentGranted: true)
        #expect(book.step(.restore(list, now: t0)) == [
            .log("warning: a saved operation is not valid and was not restored: ../x"),
            .log("1 saved operation(s) expired while the daemon was not running"), .save([list[0]]),
            .log("restored 1 persistent operation(s)"), .activate(a), .emit(.operation(status: "restored", detail: nil), operation: a, group: a)])
        #expect(book.entries[a]?.phase == .starting(waitingFor: "restoring") && book.entries[a]?.expiresAt == t0 + 100)

        var paused = OperationBook(consentGranted: false)
        #expect(paused.step(.restore([list[0]], now: t0)) == [.log("restored 1 persistent operation(s) (paused: no consent)")])
        #expect(paused.entries[a]?.phase == .paused)
        #expect(OperationBook.record(paused.entries[a]!, deviceFault: nil, now: t0 + 40).remaining == 60)
    }
}
