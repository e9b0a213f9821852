import CSotto
import SottoDSP
import SottoModem

/// What a `sotto_modulator *` points at: a retained instance of this class.
final class ModulatorHandle {
    var modulator: Modulator
    let message = ErrorMessage()

    init(modulator: Modulator) { self.modulator = modulator }

    /// The handle behind a C pointer (not retained: the caller's reference lives until destroy).
    static func from(_ pointer: OpaquePointer?) -> ModulatorHandle? {
        pointer.map { Unmanaged<ModulatorHandle>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
    }

    /// Runs `body`, recording a failure's message on this handle.
    func run(_ body: () throws(CallFailure) -> sotto_status) -> sotto_status {
        reporting(message.set, body)
    }

    /// The frame's trajectory for a token of `length` bytes (its duration depends on the length only).
    func sampleCount(tokenLength length: Int) throws(CallFailure) -> Int {
        try checkTokenLength(length)
        let trajectory: FrequencyTrajectory
        do throws(ModemError) { trajectory = try modulator.trajectory(token: [UInt8](repeating: 0, count: length)) }
        catch { throw .modem(error) }
        return trajectory.sampleCount(sampleRate: modulator.sampleRate)
    }
}

@c @implementation
public func sotto_modulator_create(_ profileName: UnsafePointer<CChar>?, _ sampleRate: Double,
                                   _ modulator: UnsafeMutablePointer<OpaquePointer?>?) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in
        guard let modulator else { throw .null("modulator (the address for the new handle)") }
        modulator.pointee = nil
        let profile = profileName == nil ? Profile.standard : try profile(named: profileName)
        let made: Modulator
        do throws(ModemError) { made = try Modulator(profile: profile, sampleRate: sampleRate) }
        catch { throw .modem(error) }
        modulator.pointee = OpaquePointer(Unmanaged.passRetained(ModulatorHandle(modulator: made)).toOpaque())
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_modulator_destroy(_ modulator: OpaquePointer?) {
    guard let modulator else { return }
    Unmanaged<ModulatorHandle>.fromOpaque(UnsafeRawPointer(modulator)).release()
}

@c @implementation
public func sotto_modulator_set_level(_ modulator: OpaquePointer?, _ level: Double) -> sotto_status {
    guard let handle = ModulatorHandle.from(modulator) else { return nullHandle("modulator") }
    return handle.run { () throws(CallFailure) in
        do throws(ModemError) {
            handle.modulator = try Modulator(profile: handle.modulator.profile, sampleRate: handle.modulator.sampleRate, level: level)
        } catch { throw .modem(error) }
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_modulator_get_level(_ modulator: OpaquePointer?, _ level: UnsafeMutablePointer<Double>?) -> sotto_status {
    guard let handle = ModulatorHandle.from(modulator) else { return nullHandle("modulator") }
    return handle.run { () throws(CallFailure) in
        guard let level else { throw .null("level_dbfs") }
        level.pointee = handle.modulator.level
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_modulator_sample_count(_ modulator: OpaquePointer?, _ tokenLength: Int,
                                         _ sampleCount: UnsafeMutablePointer<Int>?) -> sotto_status {
    guard let handle = ModulatorHandle.from(modulator) else { return nullHandle("modulator") }
    return handle.run { () throws(CallFailure) in
        guard let sampleCount else { throw .null("sample_count") }
        sampleCount.pointee = try handle.sampleCount(tokenLength: tokenLength)
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_modulator_write(_ modulator: OpaquePointer?, _ token: UnsafePointer<UInt8>?, _ tokenLength: Int,
                                  _ samples: UnsafeMutablePointer<Float>?, _ capacity: Int,
                                  _ written: UnsafeMutablePointer<Int>?) -> sotto_status {
    guard let handle = ModulatorHandle.from(modulator) else { return nullHandle("modulator") }
    return handle.run { () throws(CallFailure) in
        guard let token else { throw .null("token") }
        guard let samples else { throw .null("samples") }
        guard let written else { throw .null("written") }
        written.pointee = 0
        try checkTokenLength(tokenLength)
        let capacity = try checkedCount(capacity, "capacity")
        let trajectory: FrequencyTrajectory
        do throws(ModemError) { trajectory = try handle.modulator.trajectory(token: Array(UnsafeBufferPointer(start: token, count: tokenLength))) }
        catch { throw .modem(error) }
        let needed = trajectory.sampleCount(sampleRate: handle.modulator.sampleRate)
        written.pointee = needed
        guard capacity >= needed else {
            throw CallFailure(status: SOTTO_ERROR_BUFFER_TOO_SMALL,
                              message: "the buffer holds \(capacity) samples; a \(tokenLength)-byte frame needs \(needed) (see sotto_modulator_sample_count)")
        }
        // Synthesised straight into the caller's buffer.
        trajectory.synthesize(sampleRate: handle.modulator.sampleRate, amplitude: handle.modulator.amplitude,
                              into: UnsafeMutableBufferPointer(start: samples, count: needed))
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_modulator_error_message(_ modulator: OpaquePointer?) -> UnsafePointer<CChar>? {
    guard let handle = ModulatorHandle.from(modulator) else { return staticCString("the modulator handle is NULL") }
    return handle.message.cString
}
