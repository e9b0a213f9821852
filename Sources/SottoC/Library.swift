import CSotto
import SottoModem

// Status names, ABI version and profiles: no handle, thread-safe (sotto_version is in CSotto).

@c @implementation
public func sotto_status_name(_ status: sotto_status) -> UnsafePointer<CChar>? {
    switch status {
    case SOTTO_OK: staticCString("ok")
    case SOTTO_NO_FRAME: staticCString("no frame")
    case SOTTO_ERROR_NULL: staticCString("null pointer")
    case SOTTO_ERROR_ARGUMENT: staticCString("invalid argument")
    case SOTTO_ERROR_BUFFER_TOO_SMALL: staticCString("buffer too small")
    case SOTTO_ERROR_STRUCT_SIZE: staticCString("wrong struct size")
    case SOTTO_ERROR_STATE: staticCString("not allowed in this state")
    case SOTTO_ERROR_MEMORY: staticCString("out of memory")
    case SOTTO_ERROR_RESOURCE: staticCString("resource unavailable")
    default: staticCString("unknown status")
    }
}

@c @implementation
public func sotto_abi_version() -> Int32 { SOTTO_ABI_VERSION }

@c @implementation
public func sotto_profile_count() -> Int32 { Int32(Profile.all.count) }

@c @implementation
public func sotto_profile_get(_ index: Int32, _ info: UnsafeMutablePointer<sotto_profile_info>?) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in
        guard let info else { throw .null("info") }
        guard Profile.all.indices.contains(Int(index)) else {
            throw .argument("profile index \(index) is out of range 0...\(Profile.all.count - 1)")
        }
        try fill(info, with: Profile.all[Int(index)])
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_profile_find(_ name: UnsafePointer<CChar>?, _ info: UnsafeMutablePointer<sotto_profile_info>?) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in
        guard let info else { throw .null("info") }
        try fill(info, with: profile(named: name))
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_profile_airtime(_ name: UnsafePointer<CChar>?, _ tokenLength: Int, _ seconds: UnsafeMutablePointer<Double>?) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in
        guard let seconds else { throw .null("seconds") }
        let profile = try profile(named: name)
        try checkTokenLength(tokenLength)
        seconds.pointee = profile.airtime(payloadBytes: tokenLength)
        return SOTTO_OK
    }
}

/// The profile named by a C string (case-insensitive); NULL is an error here (callers that allow a default
/// handle NULL themselves).
func profile(named name: UnsafePointer<CChar>?) throws(CallFailure) -> Profile {
    guard let name else { throw .null("profile name") }
    let text = string(name)
    guard let profile = Profile.named(text) else {
        throw .argument("unknown profile '\(text)': expected one of \(Profile.all.map(\.name).joined(separator: ", "))")
    }
    return profile
}

func checkTokenLength(_ length: Int) throws(CallFailure) {
    guard FrameFormat.payloadBytes.contains(length) else {
        throw .argument(ModemError.invalidTokenLength(length).description)
    }
}

private func fill(_ info: UnsafeMutablePointer<sotto_profile_info>, with profile: Profile) throws(CallFailure) {
    try checkStructSize(info.pointee.struct_size, MemoryLayout<sotto_profile_info>.size, "sotto_profile_info")
    copyName(profile.name, into: &info.pointee.name)
    info.pointee.identifier = Int32(profile.identifier)
    info.pointee.tones_per_sub_band = Int32(profile.tonesPerSubBand)
    info.pointee.sub_bands = Int32(profile.subBands)
    info.pointee.low_frequency_hz = profile.lowFrequency
    info.pointee.high_frequency_hz = profile.highFrequency
    info.pointee.center_frequency_hz = profile.centerFrequency
    info.pointee.tone_spacing_hz = profile.toneSpacing
    info.pointee.symbol_time_s = profile.symbolTime
    info.pointee.chirp_duration_s = profile.chirpDuration
    info.pointee.minimum_sample_rate_hz = profile.minimumSampleRate
}
