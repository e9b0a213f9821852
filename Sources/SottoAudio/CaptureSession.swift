import Foundation
import SottoSupport
import Synchronization

/// Live capture on a dedicated thread with blocking reads.
///
/// The thread reads one period at a time into a buffer allocated once and hands it, with the index
/// of its first frame on the capture's sample clock, to `onBlock` on that thread: no allocation,
/// locking or logging per block. `onBlock` does the real-time work (the streaming decoder) and
/// publishes only its results (for example through an `AsyncStream`), so nothing blocks Swift's
/// cooperative pool. Errors end the session and are passed to `onEnd`.
public final class CaptureSession: @unchecked Sendable {
    /// What the device was opened with.
    public let negotiated: NegotiatedFormat
    private let capture: PCMCapture
    private let stopRequested = StopFlag()
    /// Opens when the capture thread has ended; stop() may be called from several threads at once (a signal
    /// handler and the command that joins the thread), so every caller must get through.
    private let finished = Latch()
    private let started = StopFlag()
    /// The capture thread's pthread id once it runs (0 before), so that a stop() on it does not wait for itself.
    private let captureThread = Atomic<UInt>(0)

    /// Opens the device; capture starts with `start`.
    public init(configuration: PCMConfiguration) throws(ALSAError) {
        capture = try PCMCapture(configuration: configuration)
        negotiated = capture.negotiated
    }

    /// Overruns recovered so far.
    public var overruns: Int { capture.overruns }
    /// Suspensions the device resumed from so far.
    public var suspensions: Int { capture.suspensions }

    /// Starts the capture thread. `onBlock(samples, firstFrame)` runs on it for every period; it returns
    /// false to stop. `onEnd` runs on it last, with the error that ended the capture, if any.
    public func start(onBlock: @escaping @Sendable (UnsafeBufferPointer<Float>, Int64) -> Bool,
                      onEnd: @escaping @Sendable ((any Error)?) -> Void) {
        let capture = self.capture, stop = stopRequested, finished = self.finished
        let period = negotiated.periodFrames
        let thread = Thread { [self] in
            captureThread.store(UInt(pthread_self()), ordering: .relaxed)
            let buffer = UnsafeMutableBufferPointer<Float>.allocate(capacity: period)
            defer { buffer.deallocate() }
            var frame: Int64 = 0
            var failure: (any Error)?
            while !stop.isSet {
                do {
                    let n = try capture.read(into: buffer)
                    if n == 0 { continue }
                    if !onBlock(UnsafeBufferPointer(rebasing: buffer[0..<n]), frame) { break }
                    frame += Int64(n)
                } catch {
                    failure = error
                    break
                }
            }
            onEnd(failure)
            finished.open()
        }
        thread.name = "sotto-capture"
        thread.qualityOfService = .userInteractive
        started.set()
        thread.start()
    }

    /// Asks the capture thread to stop and waits for it (at most one period). Safe from any number of
    /// threads at once; on the capture thread itself (from `onBlock` or `onEnd`) it only asks.
    public func stop() {
        stopRequested.set()
        guard started.isSet, captureThread.load(ordering: .relaxed) != UInt(pthread_self()) else { return }
        finished.wait()
    }
}
