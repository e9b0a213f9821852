import SottoAudio

/// Writes a capture to an audio file from the capture thread (a ``Listener``'s `onCapture`): only that thread
/// touches the writer; the file (format by extension) is opened with the first block, when the device's
/// rate (Hz) is known, and written in place, so that what was captured is kept even after a crash. A device
/// that comes back at another rate ends the recording with an error (one file has one rate).
public final class CaptureRecorder: @unchecked Sendable {
    private var writer: AudioFileWriter?
    private var sampleRate: Double?
    private var failed = false
    /// The error that stopped the recording, if any.
    public private(set) var error: (any Error)?

    public init() {}

    /// Appends `block` (mono samples, full scale 1) to `path`; call on the capture thread only.
    public func write(_ block: UnsafeBufferPointer<Float>, to path: String, sampleRate: Double) {
        guard !failed else { return }
        do {
            if writer == nil {
                // Written in place: after a crash, what was captured until then is still there.
                writer = try AudioFileWriter(path: path, sampleRate: sampleRate, format: try AudioFileFormat(path: path), atomically: false)
                self.sampleRate = sampleRate
            }
            // A reopened device may come back at another rate; one file has one rate.
            guard sampleRate == self.sampleRate else {
                throw RateChanged(description: "the device came back at \(Int(sampleRate)) Hz instead of \(Int(self.sampleRate ?? 0)) Hz: the recording \(path) stops there")
            }
            try writer?.write(block)
        } catch {
            self.error = error
            failed = true
        }
    }

    /// Finishes the file (call after the capture thread has ended).
    public func close() {
        do { try writer?.close() } catch { if self.error == nil { self.error = error } }
        writer = nil
    }

    /// The device came back at another rate.
    public struct RateChanged: Error, CustomStringConvertible {
        public let description: String
    }
}
