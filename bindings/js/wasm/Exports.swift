// The WebAssembly module's C-like surface (scripts/build-wasm compiles it with the modem's own sources in
// Embedded Swift for wasm32-unknown-none-wasm). Numbers only: i32 (lengths, counts, handles, pointers into
// linear memory) and f64. Memory is the caller's to manage: `sotto_alloc` / `sotto_free` for buffers it
// fills (tokens, sample chunks); results (samples, frames, error text) stay in buffers owned here until the
// next call of the same kind. A negative return is an error, whose text `sotto_error` / `sotto_error_length`
// give (UTF-8). One thread (WebAssembly's).
import SottoModem

/// Bytes of one frame record written by `sotto_decoder_process` / `sotto_decoder_finish` (little-endian):
/// 0 start (f64, s), 8 end (f64, s), 16 SNR (f64, dB), 24 level (f64, dBFS), 32 clock offset (f64, ppm),
/// 40 corrected bits (i32), 44 profile index (i32, into `Profile.all`), 48 token length (i32),
/// 52 token (16 bytes), 68 padding.
let frameRecordBytes = 72

nonisolated(unsafe) var lastError: [UInt8] = [0]
nonisolated(unsafe) var encoded: [Float] = []
nonisolated(unsafe) var frameRecords: [UInt8] = []
nonisolated(unsafe) var decoders: [Int32: StreamingDecoder] = [:]
nonisolated(unsafe) var nextHandle: Int32 = 1

/// Errors of this surface (argument checks before the modem's).
let errorArgument: Int32 = -1
let errorHandle: Int32 = -2
let errorMemory: Int32 = -3

func fail(_ code: Int32, _ message: String) -> Int32 {
    lastError = Array(message.utf8) + [0]
    return code
}

@_cdecl("sotto_abi_version")
public func sottoABIVersion() -> Int32 { 1 }

/// `bytes` of memory aligned to 16 bytes, or 0 (null) when there is none.
@_cdecl("sotto_alloc")
public func sottoAlloc(_ bytes: Int32) -> UnsafeMutableRawPointer? {
    guard bytes > 0 else { return nil }
    return UnsafeMutableRawPointer.allocate(byteCount: Int(bytes), alignment: 16)
}

/// Frees memory from `sotto_alloc` (null is allowed).
@_cdecl("sotto_free")
public func sottoFree(_ pointer: UnsafeMutableRawPointer?) {
    pointer?.deallocate()
}

/// The last error's message (UTF-8, NUL-terminated).
@_cdecl("sotto_error")
public func sottoError() -> UnsafeRawPointer { lastError.withUnsafeBytes { UnsafeRawPointer($0.baseAddress!) } }

/// Bytes of the last error's message, without the NUL.
@_cdecl("sotto_error_length")
public func sottoErrorLength() -> Int32 { Int32(lastError.count - 1) }

@_cdecl("sotto_profile_count")
public func sottoProfileCount() -> Int32 { Int32(Profile.all.count) }

/// A profile's name into `sotto_error`'s buffer (UTF-8, NUL-terminated); its length, or -1.
@_cdecl("sotto_profile_name")
public func sottoProfileName(_ index: Int32) -> Int32 {
    guard index >= 0, Int(index) < Profile.all.count else { return fail(errorArgument, "no profile \(index)") }
    lastError = Array(Profile.all[Int(index)].name.utf8) + [0]
    return Int32(lastError.count - 1)
}

/// Lowest sample rate (Hz) that carries profile `index`, or -1.
@_cdecl("sotto_profile_minimum_rate")
public func sottoProfileMinimumRate(_ index: Int32) -> Double {
    guard index >= 0, Int(index) < Profile.all.count else { return -1 }
    return Profile.all[Int(index)].minimumSampleRate
}

/// Airtime (s) of a frame of `length` bytes in profile `index`, or -1.
@_cdecl("sotto_profile_airtime")
public func sottoProfileAirtime(_ index: Int32, _ length: Int32) -> Double {
    guard index >= 0, Int(index) < Profile.all.count, length >= 1, length <= 16 else { return -1 }
    return Profile.all[Int(index)].airtime(payloadBytes: Int(length))
}

/// Modulates the `length` bytes at `token` in profile `profile` at `rate` Hz and `level` dBFS (peak). Returns the
/// number of samples, which `sotto_encoded` then points at (Float32, valid until the next encode), or a
/// negative error.
@_cdecl("sotto_encode")
public func sottoEncode(_ profile: Int32, _ rate: Double, _ level: Double, _ token: UnsafePointer<UInt8>?, _ length: Int32) -> Int32 {
    guard profile >= 0, Int(profile) < Profile.all.count else { return fail(errorArgument, "unknown profile \(profile)") }
    guard length >= 0, length <= 4096 else { return fail(errorArgument, "a token must be 1 to 16 bytes, got \(length)") }
    let bytes: [UInt8]? = length == 0 ? [] : token.map { Array(UnsafeBufferPointer(start: $0, count: Int(length))) }
    guard let bytes else { return fail(errorArgument, "no token buffer") }
    do throws(ModemError) {
        let modulator = try Modulator(profile: Profile.all[Int(profile)], sampleRate: rate, level: level)
        encoded = try modulator.modulate(bytes)
    } catch {
        return fail(errorArgument, error.description)
    }
    return Int32(encoded.count)
}

/// The samples of the last `sotto_encode` (Float32).
@_cdecl("sotto_encoded")
public func sottoEncoded() -> UnsafeRawPointer? { encoded.withUnsafeBytes { $0.baseAddress } }

/// A streaming decoder at `rate` Hz searching the profiles of bit mask `profiles` (bit i: `Profile.all[i]`).
/// Returns its handle (positive) or a negative error.
@_cdecl("sotto_decoder_create")
public func sottoDecoderCreate(_ rate: Double, _ profiles: Int32) -> Int32 {
    guard profiles > 0, profiles < 1 << Profile.all.count else { return fail(errorArgument, "no profile selected (mask \(profiles))") }
    let chosen = Profile.all.indices.filter { profiles & (1 << $0) != 0 }.map { Profile.all[$0] }
    do throws(ModemError) {
        let decoder = try StreamingDecoder(sampleRate: rate, profiles: chosen)
        let handle = nextHandle
        nextHandle += 1
        decoders[handle] = decoder
        return handle
    } catch {
        return fail(errorArgument, error.description)
    }
}

/// Ends a decoder (an unknown handle is ignored).
@_cdecl("sotto_decoder_destroy")
public func sottoDecoderDestroy(_ handle: Int32) {
    decoders[handle] = nil
}

func records(_ frames: [DecodedFrame]) -> Int32 {
    frameRecords = [UInt8](repeating: 0, count: max(1, frames.count * frameRecordBytes))
    frameRecords.withUnsafeMutableBytes { raw in
        for (i, frame) in frames.enumerated() {
            let base = raw.baseAddress! + i * frameRecordBytes
            base.storeBytes(of: frame.startTime, toByteOffset: 0, as: Double.self)
            base.storeBytes(of: frame.endTime, toByteOffset: 8, as: Double.self)
            base.storeBytes(of: frame.snr, toByteOffset: 16, as: Double.self)
            base.storeBytes(of: frame.level, toByteOffset: 24, as: Double.self)
            base.storeBytes(of: frame.clockOffsetPPM, toByteOffset: 32, as: Double.self)
            base.storeBytes(of: Int32(frame.correctedBits), toByteOffset: 40, as: Int32.self)
            let profile = Profile.all.firstIndex { $0.name == frame.profile } ?? -1
            base.storeBytes(of: Int32(profile), toByteOffset: 44, as: Int32.self)
            let token = frame.token.prefix(16)
            base.storeBytes(of: Int32(token.count), toByteOffset: 48, as: Int32.self)
            for (j, byte) in token.enumerated() { base.storeBytes(of: byte, toByteOffset: 52 + j, as: UInt8.self) }
        }
    }
    return Int32(frames.count)
}

/// Feeds `count` Float32 samples at `samples` (full scale 1) to decoder `handle`. Returns the number of frames
/// they completed, whose records `sotto_frames` then points at (valid until the next process or finish), or
/// a negative error.
@_cdecl("sotto_decoder_process")
public func sottoDecoderProcess(_ handle: Int32, _ samples: UnsafePointer<Float>?, _ count: Int32) -> Int32 {
    guard let decoder = decoders[handle] else { return fail(errorHandle, "no decoder \(handle) (destroyed, or never created)") }
    guard count >= 0 else { return fail(errorArgument, "a negative sample count (\(count))") }
    guard count == 0 || samples != nil else { return fail(errorArgument, "no sample buffer") }
    guard count > 0, let samples else { return records([]) }
    return records(decoder.process(UnsafeBufferPointer(start: samples, count: Int(count))))
}

/// Ends decoder `handle`'s stream (as at the end of a recording): the frames still under way, as
/// `sotto_decoder_process` reports them. The decoder may be fed again afterwards (as after silence).
@_cdecl("sotto_decoder_finish")
public func sottoDecoderFinish(_ handle: Int32) -> Int32 {
    guard let decoder = decoders[handle] else { return fail(errorHandle, "no decoder \(handle) (destroyed, or never created)") }
    return records(decoder.finish())
}

/// Samples fed to decoder `handle` so far, or -1.
@_cdecl("sotto_decoder_sample_count")
public func sottoDecoderSampleCount(_ handle: Int32) -> Double {
    guard let decoder = decoders[handle] else { return -1 }
    return Double(decoder.sampleCount)
}

/// The frame records of the last process or finish.
@_cdecl("sotto_frames")
public func sottoFrames() -> UnsafeRawPointer? { frameRecords.withUnsafeBytes { $0.baseAddress } }
