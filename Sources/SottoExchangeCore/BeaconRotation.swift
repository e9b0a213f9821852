import Crypto
import SottoSupport

// Rotating (EID-like) beacons. A beacon and the matcher share a secret identity key; the ID the beacon
// broadcasts during time slot s = floor(unixTime / period) is the truncated HMAC-SHA256 of the slot under
// that key (a keyed PRF, as Eddystone-EID uses AES-128 over its time counter). Without the key, IDs of
// different slots are unrelated to each other and to the beacon, so the beacon cannot be tracked by its ID;
// with it, the matcher recomputes the IDs of the slots around its own clock and resolves what it hears.
//
// The time base is Unix time on both sides: the beacon's and the matcher's clocks must agree within
// ``BeaconRotation/clockSkewWindow``. HMAC comes from swift-crypto: this file is why SottoExchange links
// it (the modem-only products, SottoC and the modem modules, do not link SottoExchange).

/// Why a beacon identity key, a rotation or a provisioning file is refused.
public struct BeaconKeyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong, in a sentence.
    public let description: String
    /// An error with this sentence.
    public init(_ description: String) { self.description = description }
}

/// The secret of one rotating beacon: 16 to 32 bytes from a CSPRNG, known to the beacon (its key file)
/// and to the matcher (its store) only. Equality is constant-time; the key never appears in a description.
public struct BeaconIdentityKey: Sendable, Hashable, CustomStringConvertible {
    /// Accepted key lengths (bytes): at least 128 bits.
    public static let lengths = 16...32
    /// Length of generated keys (bytes).
    public static let generatedLength = 32

    /// The key material.
    public let bytes: [UInt8]

    /// A key from its bytes; refused unless ``lengths`` contains its length.
    /// - Parameter bytes: the key material (16 to 32 bytes).
    public init(bytes: [UInt8]) throws(BeaconKeyError) {
        guard Self.lengths.contains(bytes.count) else {
            throw BeaconKeyError("a beacon identity key must be \(Self.lengths.lowerBound) to \(Self.lengths.upperBound) bytes, got \(bytes.count)")
        }
        self.bytes = bytes
    }

    /// A new random key of ``generatedLength`` bytes from the system's CSPRNG.
    public static func generate() -> BeaconIdentityKey {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<generatedLength).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return BeaconIdentityKey(unchecked: bytes)
    }

    private init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    /// Constant-time comparison (the time depends on the lengths only).
    public static func == (a: BeaconIdentityKey, b: BeaconIdentityKey) -> Bool {
        guard a.bytes.count == b.bytes.count else { return false }
        var difference: UInt8 = 0
        for index in a.bytes.indices { difference |= a.bytes[index] ^ b.bytes[index] }
        return difference == 0
    }

    /// Hashes the key's length only: keys are compared, not looked up, and a hash of the secret could leak
    /// through timing.
    public func hash(into hasher: inout Hasher) { hasher.combine(bytes.count) }

    /// "identity key (N bytes)", never the bytes.
    public var description: String { "identity key (\(bytes.count) bytes)" }
}

/// How a rotating beacon changes its ID: every `period` seconds of Unix time it broadcasts the truncated
/// HMAC-SHA256, under its identity key, of the slot number, so that only holders of the key can tell
/// which beacon an ID belongs to or predict its next ID.
public struct BeaconRotation: Sendable, Hashable {
    /// Accepted periods (s).
    public static let periods = 1.0...86_400.0
    /// How far apart (s) the beacon's and the matcher's clocks may be: the matcher accepts the IDs of every
    /// slot that overlaps its own Unix time ± this window.
    public static let clockSkewWindow = 60.0
    /// Domain separation of the PRF input.
    static let label = Array("sotto beacon eid v1".utf8)

    /// The beacon's secret.
    public let key: BeaconIdentityKey
    /// Seconds between ID changes, counted on Unix time (slot s covers [s * period, (s + 1) * period)).
    public let period: Double

    /// A rotation with this key and period.
    /// - Parameters:
    ///   - key: the beacon's identity key.
    ///   - period: seconds between ID changes (1 to 86 400).
    public init(key: BeaconIdentityKey, period: Double) throws(BeaconKeyError) {
        guard period.isFinite, Self.periods.contains(period) else {
            throw BeaconKeyError("a rotating beacon's period must be 1 to 86400 s, got \(period)")
        }
        self.key = key
        self.period = period
    }

    /// The slot of Unix time `unixTime` (s); times beyond ±2^62 periods are clamped.
    /// - Parameter unixTime: seconds since 1970-01-01 UTC.
    public func slot(atUnixTime unixTime: Double) -> Int64 {
        let slot = (unixTime / period).rounded(.down)
        guard slot.isFinite else { return slot > 0 ? Int64.max / 2 : Int64.min / 2 }
        return Int64(max(-0x1p62, min(0x1p62, slot)))
    }

    /// The slots a matcher whose clock reads `unixTime` accepts: those overlapping ± ``clockSkewWindow``.
    /// - Parameter unixTime: the matcher's Unix time (s).
    public func acceptedSlots(atUnixTime unixTime: Double) -> ClosedRange<Int64> {
        slot(atUnixTime: unixTime - Self.clockSkewWindow)...slot(atUnixTime: unixTime + Self.clockSkewWindow)
    }

    /// The ID broadcast during slot `slot`: the first `length` bytes of
    /// HMAC-SHA256(key, "sotto beacon eid v1" | length | period in ms | slot), integers big-endian.
    /// - Parameters:
    ///   - slot: the slot number (Unix time / period, rounded down).
    ///   - length: ID length (bytes, 1 to 32; beacons use their stable ID's length).
    public func id(at slot: Int64, length: Int) -> [UInt8] {
        precondition((1...32).contains(length), "a rotating ID is 1 to 32 bytes")
        var message = Self.label
        message.append(UInt8(length))
        let periodMilliseconds = UInt64((period * 1000).rounded())
        for shift in stride(from: 56, through: 0, by: -8) { message.append(UInt8(truncatingIfNeeded: periodMilliseconds >> UInt64(shift))) }
        for shift in stride(from: 56, through: 0, by: -8) { message.append(UInt8(truncatingIfNeeded: UInt64(bitPattern: slot) >> UInt64(shift))) }
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key.bytes))
        return Array(Array(mac).prefix(length))
    }

    /// The ID broadcast at Unix time `unixTime`.
    /// - Parameters:
    ///   - unixTime: seconds since 1970-01-01 UTC, on the beacon's clock.
    ///   - length: ID length (bytes).
    public func id(atUnixTime unixTime: Double, length: Int) -> [UInt8] { id(at: slot(atUnixTime: unixTime), length: length) }
}

/// What `sotto admin beacon register --rotating` hands to the beacon, once: its stable ID, its period and
/// its identity key, as a small text file (`sotto beacon --key-file`) that must stay private (mode 600).
///
///     sotto-beacon-key 1
///     id 0102030405060708
///     period 300
///     key 5f0e...(64 hex digits)
///     check 1a2b3c4d
public struct BeaconProvisioning: Sendable, Hashable {
    /// The first line of a provisioning file (format 1).
    public static let header = "sotto-beacon-key 1"
    /// Rotating beacons' stable IDs are at least this long (bytes), so that their rotating IDs rarely collide.
    public static let minimumIDLength = 8
    /// Largest file accepted (bytes).
    public static let maximumSize = 4096

    /// The beacon's stable ID (what the registry knows it by; never broadcast).
    public let id: [UInt8]
    /// The rotation (key and period).
    public let rotation: BeaconRotation

    /// Provisioning material for beacon `id` rotating with `rotation`.
    /// - Parameters:
    ///   - id: the stable ID (8 to 15 bytes).
    ///   - rotation: the key and period.
    public init(id: [UInt8], rotation: BeaconRotation) throws(BeaconKeyError) {
        guard (Self.minimumIDLength...15).contains(id.count) else {
            throw BeaconKeyError("a rotating beacon's ID must be \(Self.minimumIDLength) to 15 bytes, got \(id.count)")
        }
        self.id = id
        self.rotation = rotation
    }

    /// The file's text.
    public var text: String {
        let period = rotation.period == rotation.period.rounded() ? String(Int(rotation.period)) : String(rotation.period)
        let lines = [Self.header, "id \(Self.hex(id))", "period \(period)", "key \(Self.hex(rotation.key.bytes))"]
        return (lines + ["check \(Self.check(lines))"]).map { $0 + "\n" }.joined()
    }

    /// The last line's checksum: the first 4 bytes of SHA-256 of the other lines (each ending in a line
    /// feed), so that a file cut short or damaged is refused rather than read as another key.
    static func check(_ lines: [String]) -> String {
        hex(Array(SHA256.hash(data: Array(lines.map { $0 + "\n" }.joined().utf8)).prefix(4)))
    }

    /// Parses a file's text; any missing, repeated, unknown or malformed line is an error naming it.
    /// - Parameter text: the file's contents.
    public init(text: String) throws(BeaconKeyError) {
        let lines = text.split(whereSeparator: \.isNewline).map { line in
            String(line.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
        }.filter { !$0.isEmpty }
        guard lines.first == Self.header else {
            throw BeaconKeyError("not a sotto beacon key file (the first line must be \"\(Self.header)\")")
        }
        var fields: [String: String] = [:]
        let hasCheck = lines.count > 1 && lines[lines.count - 1].hasPrefix("check ")
        for line in lines.dropFirst().dropLast(hasCheck ? 1 : 0) {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2, ["id", "period", "key"].contains(parts[0]) else {
                throw BeaconKeyError("beacon key file: unexpected line \"\(line.prefix(40))\"")
            }
            guard fields[parts[0]] == nil else { throw BeaconKeyError("beacon key file: \(parts[0]) given twice") }
            fields[parts[0]] = parts[1]
        }
        for name in ["id", "period", "key"] where fields[name] == nil {
            throw BeaconKeyError("beacon key file: no \(name) line (truncated?)")
        }
        guard let id = Self.bytes(hex: fields["id"]!) else { throw BeaconKeyError("beacon key file: the id is not hex") }
        guard let period = Double(fields["period"]!) else { throw BeaconKeyError("beacon key file: the period is not a number") }
        guard let keyBytes = Self.bytes(hex: fields["key"]!) else { throw BeaconKeyError("beacon key file: the key is not hex") }
        try self.init(id: id, rotation: try BeaconRotation(key: try BeaconIdentityKey(bytes: keyBytes), period: period))
        guard hasCheck else { throw BeaconKeyError("beacon key file: no check line at the end (truncated?)") }
        guard lines[lines.count - 1].dropFirst("check ".count) == Self.check(Array(lines.dropLast())) else {
            throw BeaconKeyError("beacon key file: the check line does not match the rest (corrupt)")
        }
    }

    static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

    static func bytes(hex: String) -> [UInt8]? { hex.isEmpty ? nil : Hex.decode(hex) }
}

/// The IDs rotating beacons broadcast in the slots a matcher accepts now (its Unix time ± the clock-skew
/// window), by ID: kept as the window moves, so a sighting costs one lookup per rotating beacon and an
/// HMAC per beacon only when a slot enters its window. Derived state (rebuilt after a snapshot).
struct RotatingIDIndex: Sendable {
    private struct Window: Sendable {
        var slots: ClosedRange<Int64>
        var rotation: BeaconRotation
        var ids: [Int64: [UInt8]]
    }

    private var windows: [[UInt8]: Window] = [:]
    /// ID -> the stable IDs of the beacons broadcasting it in an accepted slot (more than one only on a
    /// collision, resolved to the smallest, the same on every replica).
    private var owners: [[UInt8]: Set<[UInt8]>] = [:]
    /// Unix times (s) between which no window changes, as of the last update; empty after a registration.
    private var unchanged: Range<Double> = 0..<0

    /// Drops what is known of beacon `stable` (re-registered or gone).
    mutating func forget(_ stable: [UInt8]) {
        unchanged = 0..<0
        guard let window = windows.removeValue(forKey: stable) else { return }
        for id in window.ids.values { removeOwner(stable, of: id) }
    }

    /// Brings every rotating beacon's window to Unix time `unixTime`.
    mutating func update(_ rotations: [[UInt8]: BeaconRotation], unixTime: Double) {
        // Most sightings fall where no slot enters or leaves a window: nothing to do.
        if unchanged.contains(unixTime) { return }
        for stable in windows.keys where rotations[stable] == nil { forget(stable) }
        var from = -Double.infinity, until = Double.infinity
        // IDs of 1 to 32 bytes only (registries hold 8 to 15): anything else never resolves, never traps.
        for (stable, rotation) in rotations where (1...32).contains(stable.count) {
            let slots = rotation.acceptedSlots(atUnixTime: unixTime)
            // slot(t - window) and slot(t + window) stay as they are while t stays within these bounds (1 ms
            // inside them, so that rounding at a boundary always means an exact recomputation).
            let period = rotation.period, skew = BeaconRotation.clockSkewWindow
            from = max(from, Double(slots.lowerBound) * period + skew + 0.001, Double(slots.upperBound) * period - skew + 0.001)
            until = min(until, Double(slots.lowerBound + 1) * period + skew - 0.001, Double(slots.upperBound + 1) * period - skew - 0.001)
            if let window = windows[stable], window.rotation != rotation { forget(stable) }
            var window = windows[stable] ?? Window(slots: slots, rotation: rotation, ids: [:])
            if window.slots == slots && !window.ids.isEmpty { continue }
            for (slot, id) in window.ids where !slots.contains(slot) {
                window.ids[slot] = nil
                removeOwner(stable, of: id)
            }
            // A jump of the clock by more than the window replaces every slot; never compute more than it holds.
            for slot in slots where window.ids[slot] == nil {
                let id = rotation.id(at: slot, length: stable.count)
                window.ids[slot] = id
                owners[id, default: []].insert(stable)
            }
            window.slots = slots
            windows[stable] = window
        }
        unchanged = from < until ? from..<until : 0..<0
    }

    /// The beacon broadcasting `id` in an accepted slot, if any.
    func owner(of id: [UInt8]) -> [UInt8]? {
        owners[id]?.min { $0.lexicographicallyPrecedes($1) }
    }

    private mutating func removeOwner(_ stable: [UInt8], of id: [UInt8]) {
        owners[id]?.remove(stable)
        if owners[id]?.isEmpty == true { owners[id] = nil }
    }
}
