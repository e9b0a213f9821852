import Foundation
import SottoAudio
import SottoDSP
import SottoModem

/// What a live listener reports.
public enum ListenEvent: Sendable {
    /// The device is open: what was negotiated, and whether ALSA resamples (a quality warning).
    case started(NegotiatedFormat)
    /// A frame, with times on the capture's sample clock (s from the start of the capture).
    case frame(DecodedFrame)
    /// The capture lost samples (overrun); `total` so far.
    case overrun(total: Int)
    /// The near-ultrasonic band looks filtered: `level` is its power relative to 12-16 kHz (dB).
    case bandFiltered(level: Double)
    /// The device failed; `willRetry` is true when the listener keeps trying to reopen it.
    case deviceError(ALSAError, willRetry: Bool)
    /// The device is back after an error.
    case reopened(NegotiatedFormat)
    /// Listening ended (stopped, duration reached, or a fatal error): audio captured (s) and overruns.
    case stopped(capturedSeconds: Double, overruns: Int)
}

/// Listens on an ALSA capture device and decodes tokens as they arrive: the live twin of
/// `StreamingDecoder` on a file.
///
/// Capture runs on its own thread with blocking reads and feeds the streaming decoder there; events
/// (decoded frames, overruns, device errors) come out as an `AsyncStream`, so nothing blocks Swift's
/// cooperative pool. When the device disappears or is suspended, the listener reports it and tries to
/// reopen it every `retryInterval` seconds until stopped.
public final class Listener: @unchecked Sendable {
    /// Events, in order. Finishes after `stop()` or a fatal error.
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
    private let onCapture: (@Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void)?

    /// Opens `configuration.device` and starts listening for `profiles` (those the negotiated rate can carry).
    /// - Parameters:
    ///   - duration: stop after this much captured audio (s, sample clock).
    ///   - bufferingNewest: events kept when the consumer falls behind (older ones are dropped); nil keeps all.
    ///   - onCapture: called on the capture thread with every block and the device's format, e.g. to record
    ///     it. It must not block.
    public init(configuration: PCMConfiguration, profiles: [Profile] = Profile.all, duration: Double? = nil,
                retryInterval: Double = 1, bufferingNewest: Int? = 256,
                onCapture: (@Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void)? = nil) throws(ALSAError) {
        self.configuration = configuration
        self.profiles = profiles
        self.retryInterval = retryInterval
        self.duration = duration
        self.onCapture = onCapture
        (events, continuation) = AsyncStream.makeStream(of: ListenEvent.self,
                                                        bufferingPolicy: bufferingNewest.map { .bufferingNewest($0) } ?? .unbounded)
        let session = try CaptureSession(configuration: configuration)
        try run(session, reopened: false)
    }

    private func run(_ session: CaptureSession, reopened: Bool) throws(ALSAError) {
        let negotiated = session.negotiated
        let usable = profiles.filter { negotiated.sampleRate >= $0.minimumSampleRate }
        guard let decoder = try? StreamingDecoder(sampleRate: negotiated.sampleRate, profiles: usable.isEmpty ? profiles : usable) else {
            throw .unsupportedRate(device: configuration.device, requested: negotiated.sampleRate, supported: nil)
        }
        lock.withLock { self.session = session }
        continuation.yield(reopened ? .reopened(negotiated) : .started(negotiated))
        let state = CaptureThreadState(decoder: decoder, monitor: BandMonitor(sampleRate: negotiated.sampleRate))
        let continuation = self.continuation, onCapture = self.onCapture
        let limit = duration.map { Int64(($0 * negotiated.sampleRate).rounded()) }
        session.start(onBlock: { [weak self] block, _ in
            var block = block
            if let limit, state.captured + Int64(block.count) > limit {
                block = UnsafeBufferPointer(rebasing: block[0..<Int(max(0, limit - state.captured))])
            }
            state.captured += Int64(block.count)
            onCapture?(block, negotiated)
            for frame in state.decoder.process(block) { continuation.yield(.frame(frame)) }
            if let level = state.monitor.add(block) { continuation.yield(.bandFiltered(level: level)) }
            if session.overruns != state.lastOverruns {
                state.lastOverruns = session.overruns
                continuation.yield(.overrun(total: state.lastOverruns))
            }
            if let limit, state.captured >= limit { return false }
            return !(self?.isStopped ?? true)
        }, onEnd: { [weak self] error in
            for frame in state.decoder.finish() { continuation.yield(.frame(frame)) }
            let stopped = ListenEvent.stopped(capturedSeconds: Double(state.captured) / negotiated.sampleRate, overruns: session.overruns)
            guard let self else { continuation.yield(stopped); continuation.finish(); return }
            if let error = error as? ALSAError, !self.isStopped {
                let retry: Bool
                switch error {
                case .deviceGone, .failed: retry = true
                default: retry = false
                }
                continuation.yield(.deviceError(error, willRetry: retry))
                if retry { self.reopenLater() } else { continuation.yield(stopped); continuation.finish() }
            } else {
                continuation.yield(stopped)
                continuation.finish()
            }
        })
    }

    private var isStopped: Bool { stopped.isSet }

    private func reopenLater() {
        let thread = Thread { [weak self] in
            while let self, !self.isStopped {
                Thread.sleep(forTimeInterval: self.retryInterval)
                if self.isStopped { break }
                if let session = try? CaptureSession(configuration: self.configuration), (try? self.run(session, reopened: true)) != nil {
                    return
                }
            }
            self?.continuation.finish()
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

/// What the capture thread owns while it runs (only that thread touches it).
final class CaptureThreadState: @unchecked Sendable {
    let decoder: StreamingDecoder
    let monitor: BandMonitor
    var lastOverruns = 0
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
    private let fft = RealFFT(size: 4096)
    private var high = 0.0, low = 0.0
    private var blocks = 0
    private var done = false
    static let threshold = 30.0
    static let seconds = 2.0

    public init(sampleRate: Double) {
        self.sampleRate = sampleRate
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
