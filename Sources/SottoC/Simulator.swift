import CSotto
import SottoDSP
import Glibc
import SottoChannel

@c @implementation
public func sotto_channel_init(_ channel: UnsafeMutablePointer<sotto_channel>?) {
    guard let channel else { return }
    channel.pointee = sotto_channel(
        struct_size: MemoryLayout<sotto_channel>.size, seed: 1, rt60_s: 0, distance_m: 1, volume_m3: 60,
        roll_off_hz: 0, clock_offset_ppm: 0, output_sample_rate_hz: 0, snr_db: .nan, clip_level: 0, quantize_16_bit: 0)
}

/// The simulator's model for a C channel description, each stage checked against its range.
func channelModel(_ channel: sotto_channel) throws(CallFailure) -> ChannelModel {
    func check(_ value: Double, _ name: String, _ range: ClosedRange<Double>, _ unit: String) throws(CallFailure) {
        guard value.isFinite, range.contains(value) else {
            throw .argument("sotto_channel.\(name) = \(value) is out of range \(range.lowerBound)...\(range.upperBound) \(unit)")
        }
    }
    var model = ChannelModel(seed: channel.seed)
    if channel.rt60_s != 0 {
        try check(channel.rt60_s, "rt60_s", 0.01...10, "s")
        try check(channel.distance_m, "distance_m", 0.01...100, "m")
        try check(channel.volume_m3, "volume_m3", 5...1e6, "m^3")
        model.rt60 = channel.rt60_s
        model.distance = channel.distance_m
        model.volume = channel.volume_m3
    }
    if channel.roll_off_hz != 0 {
        try check(channel.roll_off_hz, "roll_off_hz", 100...1e6, "Hz")
        model.rollOffCornerHz = channel.roll_off_hz
    }
    if channel.clock_offset_ppm != 0 {
        try check(channel.clock_offset_ppm, "clock_offset_ppm", -100_000...100_000, "ppm")
        model.ppm = channel.clock_offset_ppm
    }
    if channel.output_sample_rate_hz != 0 {
        try check(channel.output_sample_rate_hz, "output_sample_rate_hz", 1_000...768_000, "Hz")
        model.outputRate = channel.output_sample_rate_hz
    }
    if !channel.snr_db.isNaN {
        try check(channel.snr_db, "snr_db", -200...200, "dB")
        model.snrDB = channel.snr_db
    }
    if channel.clip_level != 0 {
        try check(channel.clip_level, "clip_level", 1e-6...1, "(full scale = 1)")
        model.clipLevel = Float(channel.clip_level)
    }
    model.quantize16 = channel.quantize_16_bit != 0
    return model
}

@c @implementation
public func sotto_simulate(_ channel: UnsafePointer<sotto_channel>?, _ input: UnsafePointer<Float>?, _ count: Int,
                           _ sampleRate: Double, _ output: UnsafeMutablePointer<UnsafeMutablePointer<Float>?>?,
                           _ outputCount: UnsafeMutablePointer<Int>?, _ outputSampleRate: UnsafeMutablePointer<Double>?) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in
        guard let output else { throw .null("output") }
        output.pointee = nil
        guard let channel else { throw .null("channel") }
        guard let outputCount else { throw .null("output_count") }
        guard let outputSampleRate else { throw .null("output_sample_rate_hz") }
        outputCount.pointee = 0
        try checkStructSize(channel.pointee.struct_size, MemoryLayout<sotto_channel>.size, "sotto_channel")
        let count = try checkedCount(count, "count")
        guard input != nil || count == 0 else { throw .null("input") }
        guard sampleRate.isFinite, (1_000...768_000).contains(sampleRate) else {
            throw .argument("invalid sample rate \(sampleRate) Hz: expected 1000 to 768000")
        }
        let model = try channelModel(channel.pointee)
        let result: (samples: [Float], sampleRate: Double)
        do throws(FFTError) { result = try model.apply(Array(UnsafeBufferPointer(start: input, count: count)), sampleRate: sampleRate) }
        catch { throw CallFailure(status: SOTTO_ERROR_RESOURCE, message: "cannot simulate the room: \(error.description)") }
        guard let memory = malloc(max(1, result.samples.count) * MemoryLayout<Float>.stride) else {
            throw CallFailure(status: SOTTO_ERROR_MEMORY, message: "cannot allocate \(result.samples.count) samples")
        }
        let samples = memory.bindMemory(to: Float.self, capacity: max(1, result.samples.count))
        result.samples.withUnsafeBufferPointer { samples.update(from: $0.baseAddress!, count: $0.count) }
        output.pointee = samples
        outputCount.pointee = result.samples.count
        outputSampleRate.pointee = result.sampleRate
        return SOTTO_OK
    }
}

@c @implementation
public func sotto_samples_free(_ samples: UnsafeMutablePointer<Float>?) { free(samples) }
