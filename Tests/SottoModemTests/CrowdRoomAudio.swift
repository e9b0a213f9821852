import SottoChannel
import SottoDSP
@testable import SottoModem

/// `frame` (frame bytes, default profile) as device `to` of `room` hears device `from` play it alone on the air, at
/// `rate` (Hz): 0.3 s of silence before it and 1 s after, with white noise `noiseBelow` times (power) under the heard
/// frame's first 0.5 s, drawn from `noiseSeed`.
func heardAlone(_ frame: [UInt8], in room: CrowdRoom, from: Int, to: Int, noiseBelow: Double, noiseSeed: UInt64,
                rate: Double = 48_000) throws -> [Float] {
    let heard = try room.heard(room.played(try Modulator(sampleRate: rate).modulate(frame), by: from, sampleRate: rate),
                               from: from, to: to, sampleRate: rate)
    let power = heard.prefix(Int(0.5 * rate)).reduce(0) { $0 + Double($1 * $1) } / (0.5 * rate)
    var x = [Float](repeating: 0, count: Int(0.3 * rate) + heard.count + Int(rate))
    for (i, s) in heard.enumerated() { x[Int(0.3 * rate) + i] = s }
    var noise = SeededRandom(seed: noiseSeed)
    let sigma = Float((power / noiseBelow).squareRoot())
    for i in x.indices { x[i] += sigma * noise.sample() }
    return x
}
