import CSotto
import SottoModem

/// What a `sotto_decoder *` points at: a retained instance of this class.
final class DecoderHandle {
    let sampleRate: Double
    let profiles: [Profile]
    private(set) var decoder: StreamingDecoder
    let message = ErrorMessage()
    /// Frames waiting for `sotto_decoder_next_frame`, oldest at `queueHead`.
    private var queue: [DecodedFrame] = []
    private var queueHead = 0
    var callback: sotto_frame_callback?
    var userData: UnsafeMutableRawPointer?
    /// Set by flush: the stream has ended until a reset.
    private var ended = false
    /// Set while the callback runs: the decoder must not be fed, flushed or reset from it.
    private var inCallback = false
    /// Conversion buffer for int16 input, allocated once.
    private let conversion: UnsafeMutableBufferPointer<Float>

    init(sampleRate: Double, profiles: [Profile]) throws(ModemError) {
        self.sampleRate = sampleRate
        self.profiles = profiles
        decoder = try StreamingDecoder(sampleRate: sampleRate, profiles: profiles)
        // Allocated after the last call that can throw: a throwing initialiser does not run deinit.
        conversion = .allocate(capacity: 4096)
        queue.reserveCapacity(16)
    }

    deinit { conversion.deallocate() }

    static func from(_ pointer: OpaquePointer?) -> DecoderHandle? {
        pointer.map { Unmanaged<DecoderHandle>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
    }

    func run(_ body: () throws(CallFailure) -> sotto_status) -> sotto_status { reporting(message.set, body) }

    var pendingCount: Int { queue.count - queueHead }

    /// Checks that samples may be fed now.
    private func checkFeeding() throws(CallFailure) {
        guard !inCallback else { throw .state("the decoder cannot be fed from its own callback") }
        guard !ended else { throw .state("the stream was flushed: call sotto_decoder_reset before feeding a new one") }
    }

    func feed(_ samples: UnsafeBufferPointer<Float>) throws(CallFailure) {
        try checkFeeding()
        deliver(decoder.process(samples))
    }

    func feed(_ samples: UnsafeBufferPointer<Int16>) throws(CallFailure) {
        try checkFeeding()
        var start = 0
        while start < samples.count {
            let count = min(conversion.count, samples.count - start)
            for i in 0..<count { conversion[i] = Float(samples[start + i]) * (1 / 32768) }
            deliver(decoder.process(UnsafeBufferPointer(rebasing: conversion[0..<count])))
            start += count
        }
    }

    func flush() throws(CallFailure) {
        guard !inCallback else { throw .state("the decoder cannot be flushed from its own callback") }
        guard !ended else { return }
        ended = true
        deliver(decoder.finish())
    }

    func reset() throws(CallFailure) {
        guard !inCallback else { throw .state("the decoder cannot be reset from its own callback") }
        do throws(ModemError) { decoder = try StreamingDecoder(sampleRate: sampleRate, profiles: profiles) }
        catch { throw .modem(error) }  // the same rate and profiles passed before: only its transforms can fail
        queue.removeAll(keepingCapacity: true)
        queueHead = 0
        ended = false
    }

    /// Takes the oldest queued frame, or nil.
    func next() -> DecodedFrame? {
        guard queueHead < queue.count else { return nil }
        let frame = queue[queueHead]
        queueHead += 1
        if queueHead == queue.count {
            queue.removeAll(keepingCapacity: true)
            queueHead = 0
        }
        return frame
    }

    private func deliver(_ frames: [DecodedFrame]) {
        guard !frames.isEmpty else { return }
        guard let callback else {
            queue.append(contentsOf: frames)
            return
        }
        inCallback = true
        defer { inCallback = false }
        for decoded in frames {
            var frame = sotto_frame()
            frame.struct_size = MemoryLayout<sotto_frame>.size
            fill(&frame, with: decoded)
            callback(&frame, userData)
        }
    }
}

/// Copies a decoded frame into the C struct (every field but struct_size).
func fill(_ frame: inout sotto_frame, with decoded: DecodedFrame) {
    withUnsafeMutableBytes(of: &frame.token) { bytes in
        bytes.initializeMemory(as: UInt8.self, repeating: 0)
        for (i, byte) in decoded.token.prefix(bytes.count).enumerated() { bytes[i] = byte }
    }
    frame.token_length = min(decoded.token.count, Int(SOTTO_TOKEN_MAX_BYTES))
    copyName(decoded.profile, into: &frame.profile)
    frame.start_time_s = decoded.startTime
    frame.end_time_s = decoded.endTime
    frame.snr_db = decoded.snr
    frame.level_dbfs = decoded.level
    frame.clock_offset_ppm = decoded.clockOffsetPPM
    frame.corrected_bits = Int32(clamping: decoded.correctedBits)
}

/// The profiles of a comma-separated list ("default", "fast,robust", "all"); NULL is every profile that
/// `sampleRate` (Hz) can carry, as the command line listens (all four from 44.1 kHz; every one when none
/// fits, so that the rate is refused with the profiles' minimum).
func profiles(fromList list: UnsafePointer<CChar>?, sampleRate: Double) throws(CallFailure) -> [Profile] {
    guard let list else {
        let carried = Profile.all.filter { sampleRate >= $0.minimumSampleRate }
        return carried.isEmpty ? Profile.all : carried
    }
    let text = string(list)
    if text.trimmingSpaces.lowercased() == "all" { return Profile.all }
    var chosen: [Profile] = []
    for name in text.split(separator: ",", omittingEmptySubsequences: false).map({ String($0).trimmingSpaces }) {
        guard let profile = Profile.named(name) else {
            throw .argument("unknown profile '\(name)' in '\(text)': expected a comma-separated list of \(Profile.all.map(\.name).joined(separator: ", ")), or all")
        }
        if !chosen.contains(profile) { chosen.append(profile) }
    }
    return chosen
}

extension String {
    var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}

@c @implementation
public func sotto_decoder_create(_ sampleRate: Double, _ profileList: UnsafePointer<CChar>?,
                                 _ decoder: UnsafeMutablePointer<OpaquePointer?>?) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in
        guard let decoder else { throw .null("decoder (the address for the new handle)") }
        decoder.pointee = nil
        let chosen = try profiles(fromList: profileList, sampleRate: sampleRate)
        let handle: DecoderHandle
        do throws(ModemError) { handle = try DecoderHandle(sampleRate: sampleRate, profiles: chosen) }
        catch { throw .modem(error) }
        decoder.pointee = OpaquePointer(Unmanaged.passRetained(handle).toOpaque())
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_decoder_destroy(_ decoder: OpaquePointer?) {
    guard let decoder else { return }
    Unmanaged<DecoderHandle>.fromOpaque(UnsafeRawPointer(decoder)).release()
}

@c @implementation
public func sotto_decoder_set_callback(_ decoder: OpaquePointer?, _ callback: sotto_frame_callback?,
                                       _ userData: UnsafeMutableRawPointer?) -> sotto_status {
    guard let handle = DecoderHandle.from(decoder) else { return nullHandle("decoder") }
    handle.callback = callback
    handle.userData = userData
    return SOTTO_OK
}

/// A feed call: checks the handle, the count and the pointer, then feeds the samples in place.
private func feed<Sample>(_ decoder: OpaquePointer?, _ samples: UnsafePointer<Sample>?, _ count: Int,
                          _ into: (DecoderHandle, UnsafeBufferPointer<Sample>) throws(CallFailure) -> Void) -> sotto_status {
    guard let handle = DecoderHandle.from(decoder) else { return nullHandle("decoder") }
    return handle.run { () throws(CallFailure) in
        let count = try checkedCount(count, "count")
        guard samples != nil || count == 0 else { throw .null("samples") }
        try into(handle, UnsafeBufferPointer(start: samples, count: count))
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_decoder_feed_float(_ decoder: OpaquePointer?, _ samples: UnsafePointer<Float>?, _ count: Int) -> sotto_status {
    feed(decoder, samples, count) { (handle, buffer) throws(CallFailure) in try handle.feed(buffer) }
}

@c @implementation
public func sotto_decoder_feed_int16(_ decoder: OpaquePointer?, _ samples: UnsafePointer<Int16>?, _ count: Int) -> sotto_status {
    feed(decoder, samples, count) { (handle, buffer) throws(CallFailure) in try handle.feed(buffer) }
}

@c @implementation
public func sotto_decoder_flush(_ decoder: OpaquePointer?) -> sotto_status {
    guard let handle = DecoderHandle.from(decoder) else { return nullHandle("decoder") }
    return handle.run { () throws(CallFailure) in
        try handle.flush()
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_decoder_next_frame(_ decoder: OpaquePointer?, _ frame: UnsafeMutablePointer<sotto_frame>?) -> sotto_status {
    guard let handle = DecoderHandle.from(decoder) else { return nullHandle("decoder") }
    return handle.run { () throws(CallFailure) in
        guard let frame else { throw .null("frame") }
        try checkStructSize(frame.pointee.struct_size, MemoryLayout<sotto_frame>.size, "sotto_frame")
        guard let decoded = handle.next() else { return SOTTO_NO_FRAME }
        fill(&frame.pointee, with: decoded)
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_decoder_pending_frames(_ decoder: OpaquePointer?) -> Int {
    DecoderHandle.from(decoder)?.pendingCount ?? 0
}

@c @implementation
public func sotto_decoder_samples_fed(_ decoder: OpaquePointer?, _ count: UnsafeMutablePointer<UInt64>?) -> sotto_status {
    guard let handle = DecoderHandle.from(decoder) else { return nullHandle("decoder") }
    return handle.run { () throws(CallFailure) in
        guard let count else { throw .null("count") }
        count.pointee = UInt64(handle.decoder.sampleCount)
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_decoder_reset(_ decoder: OpaquePointer?) -> sotto_status {
    guard let handle = DecoderHandle.from(decoder) else { return nullHandle("decoder") }
    return handle.run { () throws(CallFailure) in
        try handle.reset()
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_decoder_error_message(_ decoder: OpaquePointer?) -> UnsafePointer<CChar>? {
    guard let handle = DecoderHandle.from(decoder) else { return staticCString("the decoder handle is NULL") }
    return handle.message.cString
}
