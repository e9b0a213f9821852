import CALSA
import CSottoShims
import Glibc
import Synchronization

/// Why an ALSA device could not be used; each case says what to do.
public enum ALSAError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No PCM of that name in the ALSA configuration.
    case noSuchDevice(String)
    /// Another program holds the device.
    case deviceBusy(String)
    /// The user may not open the device.
    case permissionDenied(String)
    /// No acceptable sample rate: what was asked and what the device offers (Hz).
    case unsupportedRate(device: String, requested: Double, supported: ClosedRange<Double>?)
    /// Neither 32-bit float nor 16-bit integer samples.
    case unsupportedFormat(String)
    /// The device disappeared (unplugged) or was suspended and could not be resumed.
    case deviceGone(String)
    /// Any other ALSA failure: the operation and ALSA's message.
    case failed(device: String, operation: String, code: Int32, message: String)

    public var description: String {
        switch self {
        case .noSuchDevice(let name):
            return "no audio device '\(name)': list them with `sotto devices` (names like default, hw:1,0, plughw:1,0)"
        case .deviceBusy(let name):
            return "audio device '\(name)' is busy: another program is using it (close it, or use a shared device such as 'default' or a dmix/dsnoop PCM)"
        case .permissionDenied(let name):
            return "no permission to open audio device '\(name)': add your user to the 'audio' group (sudo usermod -aG audio $USER) and log in again"
        case .unsupportedRate(let name, let requested, let supported):
            let range = supported.map { " (it supports \(Int($0.lowerBound))-\(Int($0.upperBound)) Hz)" } ?? ""
            return "audio device '\(name)' cannot run at \(Int(requested)) Hz\(range): choose another rate or a plughw: device"
        case .unsupportedFormat(let name):
            return "audio device '\(name)' supports neither float nor 16-bit samples: use its plughw: variant"
        case .deviceGone(let name):
            return "audio device '\(name)' is gone (unplugged or suspended): reconnect it"
        case .failed(let name, let operation, let code, let message):
            return "audio device '\(name)': \(operation) failed: \(message) (\(code))"
        }
    }

    /// True for failures worth reopening the device after (it went away, was suspended for good, or failed
    /// unexpectedly); false for ones that reopening cannot cure (missing, busy, permission, rate, format).
    public var isTransient: Bool {
        switch self {
        case .deviceGone, .failed: return true
        case .noSuchDevice, .deviceBusy, .permissionDenied, .unsupportedRate, .unsupportedFormat: return false
        }
    }

    static func from(code: Int32, device: String, operation: String) -> ALSAError {
        switch -code {
        case ENOENT, ENXIO: return .noSuchDevice(device)
        case EBUSY, EAGAIN: return .deviceBusy(device)
        case EACCES, EPERM: return .permissionDenied(device)
        case ENODEV, ESTRPIPE, EBADFD: return .deviceGone(device)
        default: return .failed(device: device, operation: operation, code: code, message: String(cString: snd_strerror(code)))
        }
    }
}

/// What to ask of an ALSA PCM.
public struct PCMConfiguration: Sendable, Hashable {
    /// PCM name: `default`, `hw:1,0`, `plughw:1,0` or any name from the ALSA configuration.
    public var device: String
    /// Preferred sample rate (Hz); the device's nearest native rate is taken if it is in `acceptableRates`.
    public var preferredRate: Double
    /// Rates the caller can work with (Hz).
    public var acceptableRates: ClosedRange<Double>
    /// Period size (frames): the block the device hands over at a time. 1024 at 48 kHz is 21 ms.
    public var periodFrames: Int
    /// Periods in the device buffer.
    public var periods: Int

    public init(device: String = "default", preferredRate: Double = 48_000,
                acceptableRates: ClosedRange<Double> = 8_000...192_000, periodFrames: Int = 1024, periods: Int = 4) {
        self.device = device
        self.preferredRate = preferredRate
        self.acceptableRates = acceptableRates
        self.periodFrames = periodFrames
        self.periods = periods
    }
}

/// What a PCM was opened with.
public struct NegotiatedFormat: Sendable, Hashable, CustomStringConvertible {
    /// Sample rate (Hz).
    public var sampleRate: Double
    /// Channels the device delivers (capture uses the first).
    public var channels: Int
    /// Period and buffer sizes (frames).
    public var periodFrames: Int
    public var bufferFrames: Int
    /// Sample format, e.g. "FLOAT_LE" or "S16_LE".
    public var sampleFormat: String
    /// True when ALSA refused to keep its own rate converter out of the path (a plug/dmix layer
    /// converts): its linear interpolation costs about 5 dB at 19 kHz and aliases near 15 kHz.
    public var resampledByALSA: Bool

    public var description: String {
        "\(Int(sampleRate)) Hz, \(channels) ch, \(sampleFormat), period \(periodFrames), buffer \(bufferFrames)\(resampledByALSA ? ", resampled by ALSA" : "")"
    }
}

/// Sample encodings Sotto opens devices with, in order of preference.
enum SampleEncoding {
    case int16, int32, float32

    var alsaFormat: snd_pcm_format_t {
        switch self {
        case .int16: return SND_PCM_FORMAT_S16_LE
        case .int32: return SND_PCM_FORMAT_S32_LE
        case .float32: return SND_PCM_FORMAT_FLOAT_LE
        }
    }
    var bytes: Int { self == .int16 ? 2 : 4 }
    var name: String {
        switch self {
        case .int16: return "S16_LE"
        case .int32: return "S32_LE"
        case .float32: return "FLOAT_LE"
        }
    }
}

/// One open ALSA PCM (capture or playback) with negotiated parameters; blocking I/O of Float samples.
/// A class because it owns the handle; one thread at a time.
final class PCMHandle {
    let pcm: OpaquePointer
    let device: String
    let negotiated: NegotiatedFormat
    let encoding: SampleEncoding
    /// Interleaved conversion buffer (one period), allocated once.
    private let scratch: UnsafeMutableRawBufferPointer
    /// Overruns or underruns recovered; read from other threads while the I/O thread counts.
    private let xrunCount = Atomic<Int>(0)
    var xruns: Int { xrunCount.load(ordering: .relaxed) }
    /// Suspensions (e.g. system sleep) the device came back from; counted apart from xruns.
    private let suspendCount = Atomic<Int>(0)
    var suspensions: Int { suspendCount.load(ordering: .relaxed) }
    /// Recoveries in a row without a frame moving in between before the device is declared gone: a driver
    /// whose resume or prepare "succeeds" without effect would otherwise spin the I/O thread forever.
    static let maximumFruitlessRecoveries = 8

    init(configuration: PCMConfiguration, stream: snd_pcm_stream_t) throws(ALSAError) {
        let name = configuration.device
        device = name
        guard configuration.preferredRate.isFinite, configuration.preferredRate > 0,
              (16...65_536).contains(configuration.periodFrames), (2...64).contains(configuration.periods) else {
            throw .failed(device: name, operation: "configure", code: -EINVAL, message: "absurd rate, period or period count")
        }
        sotto_alsa_silence_errors()
        var handle: OpaquePointer?
        // Non-blocking open: a busy device answers EBUSY at once instead of blocking.
        var code = snd_pcm_open(&handle, name, stream, SND_PCM_NONBLOCK)
        guard code >= 0, let pcm = handle else { throw ALSAError.from(code: code, device: name, operation: "open") }
        self.pcm = pcm
        var hw: OpaquePointer?
        snd_pcm_hw_params_malloc(&hw)
        defer { snd_pcm_hw_params_free(hw) }
        func check(_ result: Int32, _ operation: String) throws(ALSAError) {
            if result < 0 { snd_pcm_close(pcm); throw ALSAError.from(code: result, device: name, operation: operation) }
        }
        try check(snd_pcm_hw_params_any(pcm, hw), "query parameters")
        // Keep ALSA's linear-interpolation converter out of the path when the PCM allows it.
        let resampleRefused = snd_pcm_hw_params_set_rate_resample(pcm, hw, 0) < 0
        try check(snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED), "set interleaved access")
        // Integer formats first: hardware supports them natively (float usually only through a plug layer).
        var chosen: SampleEncoding?
        for encoding in [SampleEncoding.int16, .int32, .float32] where snd_pcm_hw_params_set_format(pcm, hw, encoding.alsaFormat) >= 0 {
            chosen = encoding
            break
        }
        guard let encoding = chosen else {
            snd_pcm_close(pcm)
            throw .unsupportedFormat(name)
        }
        var channels: UInt32 = 1
        if snd_pcm_hw_params_set_channels(pcm, hw, 1) < 0 {
            snd_pcm_hw_params_get_channels_min(hw, &channels)
            try check(snd_pcm_hw_params_set_channels(pcm, hw, channels), "set channels")
        }
        var minRate: UInt32 = 0, maxRate: UInt32 = 0
        var dir: Int32 = 0
        snd_pcm_hw_params_get_rate_min(hw, &minRate, &dir)
        snd_pcm_hw_params_get_rate_max(hw, &maxRate, &dir)
        var rate = UInt32(configuration.preferredRate.rounded())
        dir = 0
        code = snd_pcm_hw_params_set_rate_near(pcm, hw, &rate, &dir)
        guard code >= 0, configuration.acceptableRates.contains(Double(rate)) else {
            snd_pcm_close(pcm)
            throw .unsupportedRate(device: name, requested: configuration.preferredRate,
                                   supported: minRate <= maxRate && maxRate > 0 && maxRate < 10_000_000 ? Double(minRate)...Double(maxRate) : nil)
        }
        var period = snd_pcm_uframes_t(configuration.periodFrames)
        dir = 0
        try check(snd_pcm_hw_params_set_period_size_near(pcm, hw, &period, &dir), "set period size")
        var buffer = snd_pcm_uframes_t(configuration.periodFrames * configuration.periods)
        try check(snd_pcm_hw_params_set_buffer_size_near(pcm, hw, &buffer), "set buffer size")
        try check(snd_pcm_hw_params(pcm, hw), "apply parameters")
        snd_pcm_hw_params_get_period_size(hw, &period, &dir)
        snd_pcm_hw_params_get_buffer_size(hw, &buffer)
        // From here on, blocking reads and writes.
        try check(snd_pcm_nonblock(pcm, 0), "switch to blocking mode")
        self.encoding = encoding
        negotiated = NegotiatedFormat(sampleRate: Double(rate), channels: Int(channels), periodFrames: Int(period),
                                      bufferFrames: Int(buffer), sampleFormat: encoding.name,
                                      resampledByALSA: resampleRefused)
        scratch = .allocate(byteCount: Int(period) * Int(channels) * 4, alignment: 16)
        sotto_alsa_restore_errors()
    }

    deinit {
        snd_pcm_close(pcm)
        scratch.deallocate()
    }

    /// Reads up to one period into `buffer` (first channel), blocking; recovers overruns.
    func read(into buffer: UnsafeMutableBufferPointer<Float>) throws(ALSAError) -> Int {
        let channels = negotiated.channels
        let frames = min(buffer.count, negotiated.periodFrames)
        guard frames > 0 else { return 0 }
        var recoveries = 0
        while true {
            let got = snd_pcm_readi(pcm, scratch.baseAddress, snd_pcm_uframes_t(frames))
            if got >= 0 {
                let n = Int(got)
                switch encoding {
                case .float32:
                    let samples = scratch.bindMemory(to: Float.self)
                    for i in 0..<n { buffer[i] = samples[i * channels] }
                case .int16:
                    let samples = scratch.bindMemory(to: Int16.self)
                    for i in 0..<n { buffer[i] = Float(samples[i * channels]) / 32_768 }
                case .int32:
                    let samples = scratch.bindMemory(to: Int32.self)
                    for i in 0..<n { buffer[i] = Float(samples[i * channels]) / 2_147_483_648 }
                }
                return n
            }
            try recover(from: Int32(got), operation: "read", attempts: &recoveries)
        }
    }

    /// Recovers from a failed read or write: overruns/underruns (-EPIPE) and suspensions (-ESTRPIPE) through
    /// snd_pcm_recover, which resumes or re-prepares the stream; anything else, or a recovery that keeps
    /// failing, is thrown as a typed error.
    private func recover(from code: Int32, operation: String, attempts: inout Int) throws(ALSAError) {
        // Nothing lost: try again (EINTR: a signal, SIGINT or SIGTERM, was handled on this thread).
        if code == -EAGAIN || code == -EINTR { return }
        attempts += 1
        guard attempts <= Self.maximumFruitlessRecoveries else {
            throw .deviceGone(device)
        }
        if snd_pcm_recover(pcm, code, 1) < 0 { throw ALSAError.from(code: code, device: device, operation: operation) }
        if code == -ESTRPIPE { suspendCount.add(1, ordering: .relaxed) } else { xrunCount.add(1, ordering: .relaxed) }
    }

    /// Writes all of `samples` (mono, duplicated to every channel), blocking; recovers underruns.
    func write(_ samples: UnsafeBufferPointer<Float>) throws(ALSAError) {
        let channels = negotiated.channels
        var offset = 0
        while offset < samples.count {
            let frames = min(negotiated.periodFrames, samples.count - offset)
            switch encoding {
            case .float32:
                let out = scratch.bindMemory(to: Float.self)
                for i in 0..<frames { for c in 0..<channels { out[i * channels + c] = samples[offset + i] } }
            case .int16:
                let out = scratch.bindMemory(to: Int16.self)
                for i in 0..<frames {
                    let v = Int16(max(-32_768, min(32_767, (samples[offset + i] * 32_768).rounded())))
                    for c in 0..<channels { out[i * channels + c] = v }
                }
            case .int32:
                let out = scratch.bindMemory(to: Int32.self)
                for i in 0..<frames {
                    let v = Int32(max(-2_147_483_648, min(2_147_483_647, (Double(samples[offset + i]) * 2_147_483_648).rounded())))
                    for c in 0..<channels { out[i * channels + c] = v }
                }
            }
            var done = 0
            var recoveries = 0
            while done < frames {
                let wrote = snd_pcm_writei(pcm, scratch.baseAddress! + done * channels * encoding.bytes, snd_pcm_uframes_t(frames - done))
                if wrote > 0 { done += Int(wrote); recoveries = 0; continue }
                try recover(from: Int32(wrote), operation: "write", attempts: &recoveries)
            }
            offset += frames
        }
    }

    func drain() { snd_pcm_drain(pcm) }
}

/// Blocking capture from an ALSA PCM, as Float samples of the first channel. Sendable so that it can be
/// handed to the capture thread; it must be used by one thread at a time.
public final class PCMCapture: @unchecked Sendable {  // handed to one capture thread at a time
    private let handle: PCMHandle
    /// What the device was opened with.
    public var negotiated: NegotiatedFormat { handle.negotiated }
    /// Overruns recovered so far (samples were lost each time).
    public var overruns: Int { handle.xruns }
    /// Suspensions (system sleep) the device resumed from; the audio in between was lost.
    public var suspensions: Int { handle.suspensions }

    public init(configuration: PCMConfiguration) throws(ALSAError) {
        handle = try PCMHandle(configuration: configuration, stream: SND_PCM_STREAM_CAPTURE)
    }

    /// Blocks until up to one period is available; returns the frames read.
    public func read(into buffer: UnsafeMutableBufferPointer<Float>) throws(ALSAError) -> Int {
        try handle.read(into: buffer)
    }
}

/// Blocking playback to an ALSA PCM.
public final class PCMPlayback: @unchecked Sendable {  // handed to one playback thread at a time
    private let handle: PCMHandle
    /// What the device was opened with.
    public var negotiated: NegotiatedFormat { handle.negotiated }
    /// Underruns recovered so far (a gap was heard each time).
    public var underruns: Int { handle.xruns }
    /// Suspensions (system sleep) the device resumed from.
    public var suspensions: Int { handle.suspensions }

    public init(configuration: PCMConfiguration) throws(ALSAError) {
        handle = try PCMHandle(configuration: configuration, stream: SND_PCM_STREAM_PLAYBACK)
    }

    /// Plays `samples` (mono, full scale = 1), blocking until they are queued.
    public func write(_ samples: [Float]) throws(ALSAError) {
        try samples.withUnsafeBufferPointer { (buffer) throws(ALSAError) in try handle.write(buffer) }
    }

    /// Plays `samples` (mono, full scale = 1) without copying them, blocking until they are queued.
    public func write(_ samples: UnsafeBufferPointer<Float>) throws(ALSAError) {
        try handle.write(samples)
    }

    /// Waits until everything queued has been played.
    public func drain() { handle.drain() }
}

/// One PCM from the ALSA configuration.
public struct PCMDeviceInfo: Sendable, Hashable {
    public var name: String
    public var description: String
    /// "Input", "Output", or nil for both.
    public var direction: String?
}

/// Lists PCMs from ALSA's name hints.
public enum ALSADevices {
    public static func list() -> [PCMDeviceInfo] {
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &hints) >= 0, let list = hints else { return [] }
        defer { snd_device_name_free_hint(list) }
        var result: [PCMDeviceInfo] = []
        var index = 0
        while let hint = list[index] {
            func value(_ id: String) -> String? {
                guard let raw = snd_device_name_get_hint(hint, id) else { return nil }
                defer { free(raw) }
                return String(cString: raw)
            }
            if let name = value("NAME") {
                result.append(PCMDeviceInfo(name: name, description: (value("DESC") ?? "").replacingNewlines(),
                                            direction: value("IOID")))
            }
            index += 1
        }
        return result
    }
}

extension ALSADevices {
    /// The rate range (Hz) a PCM accepts for capture or playback, or nil when it cannot be opened now
    /// (missing, busy, no permission). Opens without blocking and closes at once.
    public static func rates(of name: String, capture: Bool) -> ClosedRange<Double>? {
        sotto_alsa_silence_errors()
        defer { sotto_alsa_restore_errors() }
        var handle: OpaquePointer?
        guard snd_pcm_open(&handle, name, capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK, SND_PCM_NONBLOCK) >= 0,
              let pcm = handle else { return nil }
        defer { snd_pcm_close(pcm) }
        var hw: OpaquePointer?
        snd_pcm_hw_params_malloc(&hw)
        defer { snd_pcm_hw_params_free(hw) }
        guard snd_pcm_hw_params_any(pcm, hw) >= 0 else { return nil }
        var low: UInt32 = 0, high: UInt32 = 0, dir: Int32 = 0
        snd_pcm_hw_params_get_rate_min(hw, &low, &dir)
        snd_pcm_hw_params_get_rate_max(hw, &high, &dir)
        return low <= high ? Double(low)...Double(high) : nil
    }
}

extension String {
    func replacingNewlines() -> String { split(separator: "\n").joined(separator: " / ") }
}
