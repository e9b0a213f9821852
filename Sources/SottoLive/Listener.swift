import Foundation
import SottoAudio
import SottoDSP
import SottoModem
import SottoSupport
import Synchronization

/// What a live listener reports.
public enum ListenEvent: Sendable {
    /// The device is open: what was negotiated, and whether ALSA resamples (a quality warning).
    case started(NegotiatedFormat)
    /// A frame. Its times are on the capture's sample clock: seconds of audio captured since listening
    /// started, across reopened devices (the time a device was away is not counted).
    case frame(DecodedFrame)
    /// The capture lost samples (overrun); `total` so far.
    case overrun(total: Int)
    /// The device was suspended (system sleep) and has resumed; the audio in between is lost. `total` so far.
    case suspended(total: Int)
    /// The near-ultrasonic band looks filtered: `level` is its power relative to 12-16 kHz (dB).
    case bandFiltered(level: Double)
    /// The device failed; `willRetry` is true when the listener keeps trying to reopen it.
    case deviceError(ALSAError, willRetry: Bool)
    /// The device is back after an error (it may have come back at another rate).
    case reopened(NegotiatedFormat)
    /// Listening ended (stopped, duration reached, or a fatal error): audio captured (s) and overruns.
    case stopped(capturedSeconds: Double, overruns: Int)
}

/// Why a ``Listener`` could not start: its capture device, or its receiver.
public enum ListenerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The capture device failed (missing, busy, its rate, ...).
    case device(ALSAError)
    /// The receiver's transforms (the decoder's, the band check's) could not be made: FFTW could not allocate
    /// or plan them (out of memory), with FFTW's reason. No device is at fault; it may work with more memory free.
    case receiverUnavailable(String)

    public var description: String {
        switch self {
        case .device(let error): return error.description
        case .receiverUnavailable(let reason): return "cannot prepare the receiver: \(reason); the capture device is not at fault"
        }
    }
}

/// Listens on an ALSA capture device and decodes tokens as they arrive: the live twin of
/// `StreamingDecoder` on a file.
///
/// Capture runs on its own thread with blocking reads and feeds the streaming decoder there; events
/// (decoded frames, overruns, device errors) come out as an `AsyncStream`, so nothing blocks Swift's
/// cooperative pool. When the device disappears or fails, the listener reports it and tries to reopen it
/// every `retryInterval` seconds until it is back or the listener is stopped; a suspension (system sleep)
/// is resumed in place and reported.
public final class Listener: @unchecked Sendable {
    /// Events, in order. Finishes after `stop()`, the duration, or a fatal error, always with `.stopped`.
    public let events: AsyncStream<ListenEvent>
    private let continuation: AsyncStream<ListenEvent>.Continuation
    private let configuration: PCMConfiguration
    private let profiles: [Profile]
    private let lock = NSLock()
    private let stopped = StopFlag()
    private var session: CaptureSession?
    /// Seconds between attempts to reopen a device that failed.
    public let retryInterval: Double
    private let duration: Double?
    private let aliasFrames: Bool
    private let onCapture: (@Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void)?
    /// Totals over every session (only the capture or reopen thread of the moment writes them).
    private let totals = ListenTotals()

    /// Opens `configuration.device` and starts listening for `profiles` (those the negotiated rate can carry).
    /// - Parameters:
    ///   - configuration: the capture device and the format asked of it.
    ///   - profiles: the profiles to listen for; those the negotiated rate cannot carry are left out.
    ///   - duration: stop after this much captured audio (s, sample clock, across reopened devices).
    ///   - retryInterval: seconds between attempts to reopen a failed device.
    ///   - bufferingNewest: events kept when the consumer falls behind (older ones are dropped); nil keeps all.
    ///   - aliasFrames: also listen for alias frames (`StreamingDecoder`'s `aliasFrames`).
    ///   - onCapture: called on the capture thread with every block and the device's format, e.g. to record
    ///     it. It must not block.
    public init(configuration: PCMConfiguration, profiles: [Profile] = Profile.all, duration: Double? = nil,
                retryInterval: Double = 1, bufferingNewest: Int? = 256, aliasFrames: Bool = false,
                onCapture: (@Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void)? = nil) throws(ListenerError) {
        self.configuration = configuration
        self.profiles = profiles
        self.aliasFrames = aliasFrames
        self.retryInterval = max(0.01, retryInterval.isFinite ? retryInterval : 1)
        self.duration = duration
        self.onCapture = onCapture
        (events, continuation) = AsyncStream.makeStream(of: ListenEvent.self,
                                                        bufferingPolicy: bufferingNewest.map { .bufferingNewest($0) } ?? .unbounded)
        let session: CaptureSession
        do throws(ALSAError) { session = try CaptureSession(configuration: configuration) } catch { throw .device(error) }
        try run(session, reopened: false)
    }

    private func run(_ session: CaptureSession, reopened: Bool) throws(ListenerError) {
        let negotiated = session.negotiated
        let usable = Profile.carried(atSampleRate: negotiated.sampleRate, among: profiles)
        let decoder: StreamingDecoder
        do throws(ModemError) {
            decoder = try StreamingDecoder(sampleRate: negotiated.sampleRate, profiles: usable.isEmpty ? profiles : usable,
                                            aliasFrames: aliasFrames, lowLatency: true)
        } catch {
            // The receiver's transforms could not be made (out of memory): said so, blamed on neither the rate nor the device.
            if case .transformFailed(let reason) = error { throw .receiverUnavailable(reason) }
            throw .device(.unsupportedRate(device: configuration.device, requested: negotiated.sampleRate, supported: nil))
        }
        let monitor: BandMonitor
        do throws(FFTError) { monitor = try BandMonitor(sampleRate: negotiated.sampleRate) } catch { throw .receiverUnavailable(error.description) }
        lock.withLock { self.session = session }
        continuation.yield(reopened ? .reopened(negotiated) : .started(negotiated))
        let state = CaptureThreadState(decoder: decoder, monitor: monitor)
        let continuation = self.continuation, onCapture = self.onCapture, totals = self.totals
        // Frames of this session are placed after the audio captured by the earlier ones.
        let timeOffset = totals.capturedSeconds
        // Clamped before the conversion: a duration of 1e300 s (or NaN) must not trap.
        let remaining = duration.map { seconds -> Int64 in
            let samples = ((seconds - timeOffset) * negotiated.sampleRate).rounded()
            guard samples.isFinite else { return samples > 0 ? Int64.max / 2 : 0 }
            return Int64(min(max(samples, 0), Double(Int64.max / 2)))
        }
        @Sendable func shifted(_ frame: DecodedFrame) -> DecodedFrame {
            var frame = frame
            frame.startTime += timeOffset
            frame.endTime += timeOffset
            return frame
        }
        session.start(onBlock: { [weak self] block, _ in
            var block = block
            if let remaining, state.captured + Int64(block.count) > remaining {
                block = UnsafeBufferPointer(rebasing: block[0..<Int(max(0, remaining - state.captured))])
            }
            state.captured += Int64(block.count)
            onCapture?(block, negotiated)
            for frame in state.decoder.process(block) { continuation.yield(.frame(shifted(frame))) }
            if let level = state.monitor.add(block) { continuation.yield(.bandFiltered(level: level)) }
            if session.overruns != state.lastOverruns {
                state.lastOverruns = session.overruns
                continuation.yield(.overrun(total: totals.overruns + state.lastOverruns))
            }
            if session.suspensions != state.lastSuspensions {
                state.lastSuspensions = session.suspensions
                continuation.yield(.suspended(total: totals.suspensions + state.lastSuspensions))
            }
            if let remaining, state.captured >= remaining { return false }
            return !(self?.isStopped ?? true)
        }, onEnd: { [weak self] error in
            for frame in state.decoder.finish() { continuation.yield(.frame(shifted(frame))) }
            totals.add(seconds: Double(state.captured) / negotiated.sampleRate, overruns: session.overruns,
                       suspensions: session.suspensions)
            guard let self, let error = error as? ALSAError, !self.isStopped else {
                self?.finish() ?? Listener.finish(continuation, totals)
                return
            }
            continuation.yield(.deviceError(error, willRetry: error.isTransient))
            if error.isTransient { self.reopenLater() } else { self.finish() }
        })
    }

    private var isStopped: Bool { stopped.isSet }

    private func finish() { Self.finish(continuation, totals) }

    private static func finish(_ continuation: AsyncStream<ListenEvent>.Continuation, _ totals: ListenTotals) {
        continuation.yield(.stopped(capturedSeconds: totals.capturedSeconds, overruns: totals.overruns))
        continuation.finish()
    }

    /// Tries to reopen the device every `retryInterval` seconds on a thread of its own until it is back or
    /// the listener is stopped.
    private func reopenLater() {
        let thread = Thread { [weak self] in
            while let self, !self.isStopped {
                // Sleep in short steps so that stop() is honoured quickly.
                let deadline = Date(timeIntervalSinceNow: self.retryInterval)
                while Date() < deadline, !self.isStopped { Thread.sleep(forTimeInterval: min(0.05, self.retryInterval)) }
                if self.isStopped { break }
                if let session = try? CaptureSession(configuration: self.configuration), (try? self.run(session, reopened: true)) != nil {
                    return
                }
            }
            self?.finish()
        }
        thread.name = "sotto-reopen"
        thread.start()
    }

    /// Stops listening; returns once the capture thread has ended. Events already decoded are still delivered.
    public func stop() {
        stopped.set()
        let session = lock.withLock { self.session }
        session?.stop()
    }
}

/// Counts kept across the sessions of one listener.
final class ListenTotals: Sendable {
    private let totals = Mutex((seconds: 0.0, overruns: 0, suspensions: 0))
    var capturedSeconds: Double { totals.withLock { $0.seconds } }
    var overruns: Int { totals.withLock { $0.overruns } }
    var suspensions: Int { totals.withLock { $0.suspensions } }
    func add(seconds: Double, overruns: Int, suspensions: Int) {
        totals.withLock {
            $0.seconds += seconds
            $0.overruns += overruns
            $0.suspensions += suspensions
        }
    }
}

/// What the capture thread owns while it runs (only that thread touches it).
final class CaptureThreadState: @unchecked Sendable {
    let decoder: StreamingDecoder
    let monitor: BandMonitor
    var lastOverruns = 0
    var lastSuspensions = 0
    var captured: Int64 = 0
    init(decoder: StreamingDecoder, monitor: BandMonitor) {
        self.decoder = decoder
        self.monitor = monitor
    }
}

/// Watches the captured band: capture paths with echo cancellation, noise suppression or a 16 kHz
/// microphone chain leave almost nothing above 17 kHz. Compares the power in 17.5-20.5 kHz with 12-16 kHz
/// over the first `seconds` of capture and reports once when the upper band is more than `threshold` dB
/// lower (a microphone and room seldom fall more than 20 dB from 14 to 19 kHz).
public final class BandMonitor: @unchecked Sendable {
    let sampleRate: Double
    let size = 4096
    private var buffer: [Float] = []
    private let fft: RealFFT
    private var high = 0.0, low = 0.0
    private var blocks = 0
    private var done = false
    static let threshold = 30.0
    static let seconds = 2.0

    /// - Parameter sampleRate: the capture's rate (Hz).
    /// - Throws: `FFTError` when its 4 096-point transform cannot be allocated or planned (out of memory).
    public init(sampleRate: Double) throws(FFTError) {
        self.sampleRate = sampleRate
        fft = try RealFFT(checkedSize: 4096)
        done = sampleRate < 42_000  // the band is not even representable
        buffer.reserveCapacity(size)
    }

    /// Adds captured samples; returns the band level (dB) once, when it looks filtered.
    public func add(_ block: UnsafeBufferPointer<Float>) -> Double? {
        guard !done else { return nil }
        for sample in block {
            buffer.append(sample)
            if buffer.count == size { analyse(); buffer.removeAll(keepingCapacity: true) }
        }
        guard Double(blocks * size) >= Self.seconds * sampleRate else { return nil }
        done = true
        guard low > 0 else { return nil }  // digital silence: nothing to judge
        let level = 10 * log10(max(high, 1e-30) / low)
        return level < -Self.threshold ? level : nil
    }

    private func analyse() {
        for i in 0..<size { fft.input[i] = buffer[i] }
        fft.execute()
        for k in 0...(size / 2) {
            let f = Double(k) * sampleRate / Double(size)
            let p = Double(fft.output[2 * k] * fft.output[2 * k] + fft.output[2 * k + 1] * fft.output[2 * k + 1])
            if (17_500...20_500).contains(f) { high += p } else if (12_000...16_000).contains(f) { low += p }
        }
        blocks += 1
    }
}
