import RealModule
import SottoDSP

/// Many devices in one shoebox room: where each stands, how loud it plays, how fast its clock runs, and the
/// sound path between every ordered pair. Each device is a speaker and a microphone at one point; the path
/// from A to B is a synthetic ``Room`` response at their distance (the room's volume and RT60, a random
/// seed per pair), scaled by 1 / distance, A's level and A's speaker roll-off.
///
/// Seeded: the same parameters give the same room, device for device.
public struct CrowdRoom: Sendable, Hashable {
    /// One device: a speaker and a microphone at one point.
    public struct Device: Sendable, Hashable {
        /// Position in the room (m), x along the length, y across, z up.
        public var position: SIMD3<Double>
        /// Its speaker's level relative to the others (dB, 0 = nominal).
        public var levelDB: Double
        /// Its sample clock's offset from nominal (ppm, positive = fast).
        public var ppm: Double
        /// Its speaker's roll-off corner (Hz, 24 dB an octave above it), or nil for a flat speaker.
        public var rollOffCornerHz: Double?

        public init(position: SIMD3<Double>, levelDB: Double = 0, ppm: Double = 0, rollOffCornerHz: Double? = nil) {
            self.position = position
            self.levelDB = levelDB
            self.ppm = ppm
            self.rollOffCornerHz = rollOffCornerHz
        }
    }

    /// Length, width and height (m).
    public var size: SIMD3<Double>
    /// Reverberation time at mid frequencies (s).
    public var rt60: Double
    /// The devices.
    public var devices: [Device]
    /// Seed of the responses.
    public var seed: UInt64
    /// Distance at which a device hears itself (m): its own speaker beside its microphone.
    public static let ownDistance = 0.1

    public init(size: SIMD3<Double>, rt60: Double, devices: [Device], seed: UInt64) {
        self.size = size
        self.rt60 = rt60
        self.devices = devices
        self.seed = seed
    }

    /// A room of `count` devices at random positions on a table-top plane (0.7-1.5 m high, at least 0.5 m
    /// from the walls), levels uniform within `levelSpreadDB`, clocks within +-`ppmSpread` ppm.
    public static func random(count: Int, size: SIMD3<Double> = [7, 5, 2.6], rt60: Double = 0.5,
                              levelSpreadDB: Double = 6, ppmSpread: Double = 100, rollOffCornerHz: Double? = nil,
                              seed: UInt64) -> CrowdRoom {
        var rng = SeededRandom(seed: seed)
        let margin = 0.5
        let devices = (0..<count).map { _ -> Device in
            let x = margin + rng.uniform() * (size.x - 2 * margin)
            let y = margin + rng.uniform() * (size.y - 2 * margin)
            let z = 0.7 + rng.uniform() * 0.8
            let level = -rng.uniform() * levelSpreadDB
            let ppm = (2 * rng.uniform() - 1) * ppmSpread
            return Device(position: [x, y, min(z, size.z - 0.1)], levelDB: level, ppm: ppm, rollOffCornerHz: rollOffCornerHz)
        }
        return CrowdRoom(size: size, rt60: rt60, devices: devices, seed: seed)
    }

    /// Room volume (m^3).
    public var volume: Double { size.x * size.y * size.z }

    /// Distance between two devices (m); ``ownDistance`` for a device and itself.
    public func distance(_ from: Int, _ to: Int) -> Double {
        guard from != to else { return Self.ownDistance }
        let d = devices[from].position - devices[to].position
        return (d * d).sum().squareRoot()
    }

    /// The path from device `from`'s speaker to device `to`'s microphone at `sampleRate` (Hz): the
    /// room's response at their distance, 1 / distance, `from`'s level.
    /// - Throws: `FFTError` when the room's transforms cannot be allocated or planned (out of memory).
    public func impulseResponse(from: Int, to: Int, sampleRate: Double) throws(FFTError) -> [Float] {
        let d = distance(from, to)
        var rng = SeededRandom(seed: seed &+ 0x9E37_79B9_7F4A_7C15 &* UInt64(from * devices.count + to + 1))
        // The room's directivity default models a small speaker aimed at the listener; in a crowd nobody aims,
        // so the source is taken as omnidirectional.
        var h = try Room(rt60: rt60, distance: d, volume: volume, directivity: 1).impulseResponse(sampleRate: sampleRate, rng: &rng)
        let gain = Float(Double.pow(10, devices[from].levelDB / 20) / max(d, Self.ownDistance))
        for i in h.indices { h[i] *= gain }
        return h
    }

    /// What device `device`'s speaker plays of `signal` (at `sampleRate`, Hz): its roll-off, and its clock's
    /// offset as a time scale (listeners are taken as nominal, so the offset between two devices is the
    /// speaker's alone; it spans the same range as the difference of two clocks within half the spread).
    public func played(_ signal: [Float], by device: Int, sampleRate: Double) -> [Float] {
        var x = signal
        if let corner = devices[device].rollOffCornerHz { Channel.rollOff(&x, sampleRate: sampleRate, cornerHz: corner) }
        let ppm = devices[device].ppm
        return ppm == 0 ? x : Channel.clockOffset(x, ppm: -ppm)
    }

    /// What device `to`'s microphone picks up of `played` (``played(_:by:sampleRate:)`` of device `from`).
    /// - Throws: `FFTError` when the room's transforms cannot be allocated or planned (out of memory).
    public func heard(_ played: [Float], from: Int, to: Int, sampleRate: Double) throws(FFTError) -> [Float] {
        try fftConvolve(played, impulseResponse(from: from, to: to, sampleRate: sampleRate))
    }
}
