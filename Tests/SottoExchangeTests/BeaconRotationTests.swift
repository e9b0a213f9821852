import Foundation
import SottoCodes
import SottoExchange
import SottoExchangeCore
import Testing

/// Rotating beacons (issue 29): IDs from HMAC-SHA256 of Unix time slots under a 128-256-bit identity key,
/// resolved by the matcher within its clock-skew window and by nothing else.
@Suite struct BeaconRotationTests {
    static let key32 = try! BeaconIdentityKey(bytes: (0..<32).map { UInt8($0) })

    static func rotation(_ key: BeaconIdentityKey = key32, period: Double = 300) -> BeaconRotation {
        try! BeaconRotation(key: key, period: period)
    }

    static func randomKey<G: RandomNumberGenerator>(_ generator: inout G) -> BeaconIdentityKey {
        try! BeaconIdentityKey(bytes: (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    static func word(_ id: [UInt8]) -> UInt64 {
        id.prefix(8).enumerated().reduce(0) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
    }

    // MARK: The construction

    /// Known answers, computed outside Swift (Python's hmac and `openssl dgst -sha256 -mac HMAC`).
    @Test func idsAreTruncatedHMACSHA256OfTheSlot() throws {
        #expect(Self.rotation().id(at: 5_000_000, length: 8) == BeaconProvisioningHex.bytes("80a00f7a83a0e7e6"))
        let short = try BeaconIdentityKey(bytes: (0..<16).map { UInt8($0) })
        #expect(Self.rotation(short, period: 5).id(at: -1, length: 15) == BeaconProvisioningHex.bytes("795c3b6dc894d7a3a3321ed9ae5702"))
        // The slot is Unix time / period, rounded down.
        let rotation = Self.rotation(period: 300)
        #expect(rotation.slot(atUnixTime: 1_500_000_000) == 5_000_000)
        #expect(rotation.slot(atUnixTime: 1_500_000_299.9) == 5_000_000)
        #expect(rotation.slot(atUnixTime: 1_500_000_300) == 5_000_001)
        #expect(rotation.id(atUnixTime: 1_500_000_123, length: 8) == rotation.id(at: 5_000_000, length: 8))
        #expect(rotation.slot(atUnixTime: .infinity) > 0 && rotation.slot(atUnixTime: -.infinity) < 0 && rotation.slot(atUnixTime: .nan) != 1)
    }

    // MARK: The attack of issue 29

    static let golden: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// The rotation this issue removed: SplitMix64 seeded with key ^ slot * golden, first output little-endian.
    static func splitMixID(key: UInt64, slot: Int64) -> [UInt8] {
        var generator = SplitMix64(seed: key ^ (UInt64(bitPattern: slot) &* golden))
        let z = generator.next()
        return (0..<8).map { UInt8(truncatingIfNeeded: z >> (8 * UInt64($0))) }
    }

    static func inverse(_ odd: UInt64) -> UInt64 {
        var inverse = odd
        for _ in 0..<6 { inverse = inverse &* (2 &- odd &* inverse) }
        return inverse
    }

    static func unshift(_ y: UInt64, _ shift: UInt64) -> UInt64 {
        var z = y
        for _ in 0..<(64 / shift + 1) { z = y ^ (z >> shift) }
        return z
    }

    /// The attack from outside: one heard 8-byte ID and its slot give SplitMix64's state, hence the key,
    /// hence the next slot's ID.
    static func predictNext(heard: [UInt8], slot: Int64) -> [UInt8] {
        var z = unshift(word(heard), 31)
        z = unshift(z &* inverse(0x94D0_49BB_1331_11EB), 27)
        z = unshift(z &* inverse(0xBF58_476D_1CE4_E5B9), 30)
        let key = (z &- golden) ^ (UInt64(bitPattern: slot) &* golden)
        return splitMixID(key: key, slot: slot + 1)
    }

    /// The attack works on the old construction (so the test below can fail): every prediction is exact.
    @Test func theSplitMixAttackPredictsTheOldRotation() {
        var generator = SplitMix64(seed: 29)
        for _ in 0..<100 {
            let key = generator.next(), slot = Int64.random(in: 0...10_000_000, using: &generator)
            #expect(Self.predictNext(heard: Self.splitMixID(key: key, slot: slot), slot: slot) == Self.splitMixID(key: key, slot: slot + 1))
        }
    }

    /// From one recorded ID and its slot, the same attack predicts no later ID of the HMAC rotation, not even
    /// in part: its guesses agree with the truth on about half the bits, as random bytes would.
    @Test func oneRecordedIDPredictsNoLaterID() {
        var generator = SplitMix64(seed: 2929)
        var agreeingBits = 0, trials = 0
        for _ in 0..<500 {
            let rotation = Self.rotation(Self.randomKey(&generator), period: 60)
            let slot = Int64.random(in: 20_000_000...30_000_000, using: &generator)
            let predicted = Self.predictNext(heard: rotation.id(at: slot, length: 8), slot: slot)
            let actual = rotation.id(at: slot + 1, length: 8)
            #expect(predicted != actual)
            agreeingBits += 64 - (Self.word(predicted) ^ Self.word(actual)).nonzeroBitCount
            trials += 1
        }
        // 32 000 bits: 0.5 ± 0.0028 (1 sigma); 5 sigma is 0.014.
        let fraction = Double(agreeingBits) / Double(64 * trials)
        #expect(abs(fraction - 0.5) < 0.014, "fraction of predicted bits right: \(fraction)")
    }

    /// Bit balance of `words` at each of the 64 positions, within 5 sigma of one half.
    static func balanced(_ words: [UInt64]) -> (Bool, String) {
        let sigma = 0.5 / Double(words.count).squareRoot()
        var worst = 0.0
        for bit in 0..<64 {
            let ones = words.reduce(0) { $0 + Int(($1 >> UInt64(bit)) & 1) }
            worst = max(worst, abs(Double(ones) / Double(words.count) - 0.5))
        }
        return (worst < 5 * sigma, "worst bias \(worst), 5 sigma \(5 * sigma)")
    }

    /// Consecutive slots' IDs share no structure a test finds: their XOR and their difference are balanced
    /// in every bit, the differences never repeat, and no ID comes back.
    @Test func consecutiveIDsShareNoStructure() {
        let rotation = Self.rotation(period: 5)
        let ids = (Int64(340_000_000)..<340_004_096).map { Self.word(rotation.id(at: $0, length: 8)) }
        #expect(Set(ids).count == ids.count)
        let xors = zip(ids, ids.dropFirst()).map { $0 ^ $1 }
        let differences = zip(ids, ids.dropFirst()).map { $1 &- $0 }
        let (xorBalanced, xorDetail) = Self.balanced(xors)
        let (differenceBalanced, differenceDetail) = Self.balanced(differences)
        #expect(xorBalanced, "\(xorDetail)")
        #expect(differenceBalanced, "\(differenceDetail)")
        #expect(Set(differences).count == differences.count)
        let (idsBalanced, idsDetail) = Self.balanced(ids)
        #expect(idsBalanced, "\(idsDetail)")
    }

    /// Two beacons with different keys (even keys one bit apart) are unlinkable: their IDs of the same slots
    /// differ in half the bits, balanced, and never coincide.
    @Test func beaconsWithDifferentKeysAreUnlinkable() throws {
        var generator = SplitMix64(seed: 7)
        let a = Self.rotation(Self.randomKey(&generator), period: 60)
        var flipped = a.key.bytes
        flipped[0] ^= 1
        for b in [Self.rotation(Self.randomKey(&generator), period: 60), Self.rotation(try BeaconIdentityKey(bytes: flipped), period: 60)] {
            let slots = Int64(28_000_000)..<28_002_048
            let xors = slots.map { Self.word(a.id(at: $0, length: 8)) ^ Self.word(b.id(at: $0, length: 8)) }
            #expect(!xors.contains(0))
            let (balanced, detail) = Self.balanced(xors)
            #expect(balanced, "\(detail)")
            let meanDistance = Double(xors.reduce(0) { $0 + $1.nonzeroBitCount }) / Double(xors.count)
            #expect(abs(meanDistance - 32) < 0.6, "mean Hamming distance \(meanDistance)")
        }
    }

    // MARK: Keys and provisioning

    @Test func keysAreAtLeast128BitsFromTheSystemsCSPRNG() throws {
        for length in [0, 1, 8, 15, 33, 64] {
            #expect(throws: BeaconKeyError.self) { try BeaconIdentityKey(bytes: [UInt8](repeating: 7, count: length)) }
        }
        #expect(try BeaconIdentityKey(bytes: [UInt8](repeating: 7, count: 16)).bytes.count == 16)
        let first = BeaconIdentityKey.generate(), second = BeaconIdentityKey.generate()
        #expect(first.bytes.count == 32 && first != second)
        #expect(!first.description.contains(BeaconProvisioningHex.hex(first.bytes)))
        for period in [0, 0.5, 86_401, .nan, .infinity, -5] {
            #expect(throws: BeaconKeyError.self) { try BeaconRotation(key: first, period: period) }
        }
    }

    @Test func provisioningTextRoundTripsAndBadFilesAreRefused() throws {
        let rotation = try BeaconRotation(key: Self.key32, period: 300)
        let provisioning = try BeaconProvisioning(id: [1, 2, 3, 4, 5, 6, 7, 8], rotation: rotation)
        let text = provisioning.text
        #expect(try BeaconProvisioning(text: text) == provisioning)
        #expect(text.contains("key 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"))
        let keyLine = "key " + BeaconProvisioningHex.hex(Self.key32.bytes)
        let cases: [(String, String)] = [
            ("", "not a sotto beacon key file"),
            ("hello\n", "not a sotto beacon key file"),
            (String(text.prefix(text.count - 35)), "not hex"),                 // cut in the middle of the key
            (text.replacingOccurrences(of: keyLine, with: ""), "no key line"), // cut before it
            (text.replacingOccurrences(of: keyLine, with: "key 0011"), "16 to 32 bytes, got 2"),
            (text.replacingOccurrences(of: keyLine, with: "key " + String(repeating: "ab", count: 15)), "16 to 32 bytes, got 15"),
            (text.replacingOccurrences(of: keyLine, with: "key " + String(repeating: "ab", count: 33)), "16 to 32 bytes, got 33"),
            (text.replacingOccurrences(of: keyLine, with: "key zz" + String(repeating: "ab", count: 15)), "not hex"),
            (text.replacingOccurrences(of: keyLine, with: keyLine + "\n" + keyLine), "key given twice"),
            (text + keyLine + "\n", "unexpected line \"check"),
            (text.replacingOccurrences(of: keyLine, with: "key 1" + keyLine.dropFirst(5)), "does not match the rest (corrupt)"),
            (text.replacingOccurrences(of: "period 300", with: "period 301"), "does not match the rest (corrupt)"),
            (String(text.split(separator: "\n").dropLast().joined(separator: "\n")), "no check line"),
            (text.replacingOccurrences(of: keyLine, with: keyLine + "\ncolour blue"), "unexpected line"),
            (text.replacingOccurrences(of: "period 300", with: "period 0"), "period must be 1 to 86400 s"),
            (text.replacingOccurrences(of: "period 300", with: "period soon"), "period is not a number"),
            (text.replacingOccurrences(of: "id 0102030405060708", with: "id 0102"), "ID must be 8 to 15 bytes, got 2"),
        ]
        for (bad, reason) in cases {
            #expect(throws: BeaconKeyError.self, "\(reason)") { try BeaconProvisioning(text: bad) }
            do { _ = try BeaconProvisioning(text: bad) } catch { #expect(error.description.contains(reason), "\(error) for \(reason)") }
        }
    }

    // MARK: Resolution by the matcher

    static let stable: [UInt8] = [0xE1, 0xD0, 3, 4, 5, 6, 7, 8]
    static let t0 = 1_800_000_000.0

    /// A core with subscriber B of "app" (a namespaced filter for the beacon's attachment) and a second
    /// subscriber C of "other" listening to every beacon ID, and the rotating beacon of "app" registered.
    static func core(startedAt now: Double = 0, unixTime: Double = t0, period: Double = 5) throws -> (MatcherCore, Message, BeaconRotation) {
        var core = MatcherCore(generator: SplitMix64(seed: 1))
        let attachment = try BeaconAttachment.message(namespace: "shop", type: "offer", data: Array("10%".utf8))
        let rotation = Self.rotation(period: period)
        _ = core.handle(.openSession(SessionID("B"), appID: "app", broadcasts: false), now: now, unixTime: unixTime)
        _ = core.handle(.registerBeacon(id: stable, appID: "app", attachments: [attachment], publicVisibility: false, rotation: rotation),
                        now: now, unixTime: unixTime)
        _ = core.handle(.subscribe(SessionID("B"), OperationID(1), try MessageFilter([.namespacedType(namespace: "shop", type: "offer")]),
                                   try Strategy(ttl: .infinite), lostTimeout: 10), now: now, unixTime: unixTime)
        return (core, attachment, rotation)
    }

    /// The beacon's clock may be off the matcher's by up to the window (60 s) either way: IDs of slots that
    /// overlap ±60 s resolve, those of slots entirely beyond do not (period 5 s: ±55 s yes, ±70 s no).
    @Test func idsWithinTheClockSkewWindowResolveAndBeyondItDoNot() throws {
        for skew in [0.0, 30, -30, 55, -55, 59.9, -59.9] {
            var (core, attachment, rotation) = try Self.core()
            let heard = rotation.id(atUnixTime: Self.t0 + 1000 + skew, length: 8)
            #expect(core.handle(.observe(SessionID("B"), .beacon(heard), snr: 10, level: -30), now: 1000, unixTime: Self.t0 + 1000)
                    == [.found(SessionID("B"), OperationID(1), attachment)], "skew \(skew) s")
        }
        for skew in [70.0, -70, 300, -300, -86_400] {
            var (core, _, rotation) = try Self.core()
            let heard = rotation.id(atUnixTime: Self.t0 + 1000 + skew, length: 8)
            #expect(core.handle(.observe(SessionID("B"), .beacon(heard), snr: 10, level: -30), now: 1000, unixTime: Self.t0 + 1000).isEmpty,
                    "skew \(skew) s")
        }
    }

    /// The time base is Unix time, not either side's start: cores started minutes apart, or restored from a
    /// snapshot, resolve the same ID; an ID recorded and replayed later than the window resolves to nothing.
    @Test func resolutionDependsOnUnixTimeOnly() throws {
        let heardAt = Self.t0 + 600
        var results: [[MatcherEvent]] = []
        for (started, monotonicAtSighting) in [(0.0, 600.0), (0.0, 5.0), (-10_000, 90_000)] {
            var (core, _, rotation) = try Self.core(startedAt: started)
            results.append(core.handle(.observe(SessionID("B"), .beacon(rotation.id(atUnixTime: heardAt, length: 8)), snr: 10, level: -30),
                                       now: monotonicAtSighting, unixTime: heardAt))
        }
        #expect(results.allSatisfy { $0.count == 1 } && Set(results.map { "\($0)" }).count == 1, "\(results)")

        var (core, attachment, rotation) = try Self.core()
        var restored = try MatcherCore(snapshot: core.snapshot(), generator: SplitMix64(seed: 1))
        let heard = rotation.id(atUnixTime: heardAt, length: 8)
        #expect(restored.handle(.observe(SessionID("B"), .beacon(heard), snr: 10, level: -30), now: 600, unixTime: heardAt)
                == [.found(SessionID("B"), OperationID(1), attachment)])
        // The same ID replayed 3 minutes later: no match.
        #expect(core.handle(.observe(SessionID("B"), .beacon(heard), snr: 10, level: -30), now: 780, unixTime: heardAt + 180).isEmpty)
    }

    /// Hearing the stable ID itself (never broadcast by a rotating beacon) or an unregistered ID resolves to
    /// the beacon's nothing; re-registering with a new key retires the old key's IDs at once.
    @Test func stableIDsAndOldKeysDoNotResolve() throws {
        var (core, attachment, rotation) = try Self.core()
        let b = SessionID("B")
        #expect(core.handle(.observe(b, .beacon(Self.stable), snr: 10, level: -30), now: 1, unixTime: Self.t0).isEmpty)
        #expect(core.handle(.observe(b, .beacon([9, 9, 9, 9, 9, 9, 9, 9]), snr: 10, level: -30), now: 1, unixTime: Self.t0).isEmpty)
        let other = Self.rotation(BeaconIdentityKey.generate(), period: 5)
        _ = core.handle(.registerBeacon(id: Self.stable, appID: "app", attachments: [attachment], publicVisibility: false, rotation: other),
                        now: 2, unixTime: Self.t0)
        #expect(core.handle(.observe(b, .beacon(rotation.id(atUnixTime: Self.t0, length: 8)), snr: 10, level: -30), now: 3, unixTime: Self.t0).isEmpty)
        #expect(core.handle(.observe(b, .beacon(other.id(atUnixTime: Self.t0, length: 8)), snr: 10, level: -30), now: 4, unixTime: Self.t0)
                == [.found(b, OperationID(1), attachment)])
    }
}

extension BeaconRotationTests {
    /// A rotating beacon registered under an ID no registry accepts (empty, or longer than an HMAC) never
    /// resolves and never traps.
    @Test func rotatingIDsOfImpossibleLengthsAreIgnored() throws {
        var (core, attachment, rotation) = try Self.core()
        for id in [[], [UInt8](repeating: 1, count: 33)] {
            _ = core.handle(.registerBeacon(id: id, appID: "app", attachments: [attachment], publicVisibility: false, rotation: rotation),
                            now: 1, unixTime: Self.t0)
        }
        #expect(core.handle(.observe(SessionID("B"), .beacon(rotation.id(atUnixTime: Self.t0, length: 8)), snr: 10, level: -30),
                            now: 2, unixTime: Self.t0) == [.found(SessionID("B"), OperationID(1), attachment)])
    }
}

/// Hex for the tests' known answers.
enum BeaconProvisioningHex {
    static func bytes(_ hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}

/// Who learns what of a beacon (the seeds' defaults and issue 29's isolation): a beacon subscription gets
/// the project's own beacons with all their attachments; a namespace and type narrow it; another project
/// never learns a private beacon's ID, attachments or sighting; public attachments stay visible to all.
@Suite struct BeaconVisibilityTests {
    static let rawType = ExchangeLimits.beaconIDType

    static func raw(_ id: [UInt8]) -> Message { Message(delivered: ExchangeLimits.reservedNamespace, type: rawType, content: id) }

    /// Events of one fresh subscription of app `app` with `filter` after hearing `heard`.
    static func heard(_ heard: [UInt8], by app: String, filter: MessageFilter, registering beacons: [MatcherInput],
                      unixTime: Double = 1_800_000_000) -> Set<Message> {
        var core = MatcherCore(generator: SplitMix64(seed: 3))
        let s = SessionID("S")
        _ = core.handle(.openSession(s, appID: app, broadcasts: false), now: 0, unixTime: unixTime)
        for beacon in beacons { _ = core.handle(beacon, now: 0, unixTime: unixTime) }
        _ = core.handle(.subscribe(s, OperationID(1), filter, .default, lostTimeout: 10), now: 0, unixTime: unixTime)
        let events = core.handle(.observe(s, .beacon(heard), snr: 12, level: -30), now: 1, unixTime: unixTime)
        return Set(events.compactMap { if case .found(_, _, let message) = $0 { return message } else { return nil } })
    }

    @Test func beaconSubscriptionsGetOwnBeaconsWholeAndNothingOfOthersPrivateOnes() throws {
        let offer = try BeaconAttachment.message(namespace: "shop", type: "offer", data: Array("10%".utf8))
        let map = try BeaconAttachment.message(namespace: "shop", type: "map", data: [1, 2])
        let fixed: [UInt8] = [0xBE, 0xAC]
        let rotation = try BeaconRotation(key: BeaconIdentityKey.generate(), period: 60)
        let rotating: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let privateFixed = MatcherInput.registerBeacon(id: fixed, appID: "shop", attachments: [offer, map], publicVisibility: false, rotation: nil)
        let publicFixed = MatcherInput.registerBeacon(id: fixed, appID: "shop", attachments: [offer, map], publicVisibility: true, rotation: nil)
        let privateRotating = MatcherInput.registerBeacon(id: rotating, appID: "shop", attachments: [offer], publicVisibility: false, rotation: rotation)
        let beacons = try MessageFilter([.beaconIDs])
        let everything = try MessageFilter([.beaconIDs, .allMyTypes, .namespacedType(namespace: "shop", type: "offer"),
                                            .namespacedType(namespace: "shop", type: "map")])
        let offers = try MessageFilter([.namespacedType(namespace: "shop", type: "offer")])
        let rotatingID = rotation.id(atUnixTime: 1_800_000_000, length: 8)

        // The owner: the ID and every attachment; a namespaced type narrows to that type.
        #expect(Self.heard(fixed, by: "shop", filter: beacons, registering: [privateFixed]) == [Self.raw(fixed), offer, map])
        #expect(Self.heard(fixed, by: "shop", filter: offers, registering: [privateFixed]) == [offer])
        #expect(Self.heard(rotatingID, by: "shop", filter: beacons, registering: [privateRotating]) == [Self.raw(rotating), offer])
        // Another project: nothing of a private beacon, fixed or rotating, whatever it asks for.
        #expect(Self.heard(fixed, by: "other", filter: everything, registering: [privateFixed]).isEmpty)
        #expect(Self.heard(rotatingID, by: "other", filter: everything, registering: [privateRotating]).isEmpty)
        // A public beacon: its ID to beacon subscriptions, its attachments to those who name their type.
        #expect(Self.heard(fixed, by: "other", filter: beacons, registering: [publicFixed]) == [Self.raw(fixed)])
        #expect(Self.heard(fixed, by: "other", filter: offers, registering: [publicFixed]) == [offer])
        // An unregistered beacon: its ID (it is on the air), to anyone who subscribes to beacons.
        #expect(Self.heard([7, 7], by: "other", filter: beacons, registering: [privateFixed]) == [Self.raw([7, 7])])
    }

    /// The seeds' narrowing: a beacon subscription with a namespace and type gets the IDs and only that type's
    /// attachments of the project's own beacons, fixed or rotating; two namespaced types get both; another
    /// project's public beacon gives the named type only.
    @Test func aNamespacedTypeNarrowsABeaconSubscription() throws {
        let offer = try BeaconAttachment.message(namespace: "shop", type: "offer", data: Array("10%".utf8))
        let map = try BeaconAttachment.message(namespace: "shop", type: "map", data: [1, 2])
        let fixed: [UInt8] = [0xBE, 0xAC]
        let rotation = try BeaconRotation(key: BeaconIdentityKey.generate(), period: 60)
        let rotating: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        let privateFixed = MatcherInput.registerBeacon(id: fixed, appID: "shop", attachments: [offer, map], publicVisibility: false, rotation: nil)
        let publicFixed = MatcherInput.registerBeacon(id: fixed, appID: "shop", attachments: [offer, map], publicVisibility: true, rotation: nil)
        let privateRotating = MatcherInput.registerBeacon(id: rotating, appID: "shop", attachments: [offer, map], publicVisibility: false, rotation: rotation)
        let beaconOffers = try MessageFilter([.beaconIDs, .namespacedType(namespace: "shop", type: "offer")])
        let beaconBoth = try MessageFilter([.beaconIDs, .namespacedType(namespace: "shop", type: "offer"), .namespacedType(namespace: "shop", type: "map")])
        let beaconOtherType = try MessageFilter([.beaconIDs, .namespacedType(namespace: "shop", type: "menu")])
        let rotatingID = rotation.id(atUnixTime: 1_800_000_000, length: 8)

        #expect(Self.heard(fixed, by: "shop", filter: beaconOffers, registering: [privateFixed]) == [Self.raw(fixed), offer])
        #expect(Self.heard(rotatingID, by: "shop", filter: beaconOffers, registering: [privateRotating]) == [Self.raw(rotating), offer])
        #expect(Self.heard(fixed, by: "shop", filter: beaconBoth, registering: [privateFixed]) == [Self.raw(fixed), offer, map])
        #expect(Self.heard(fixed, by: "shop", filter: beaconOtherType, registering: [privateFixed]) == [Self.raw(fixed)])
        #expect(Self.heard(fixed, by: "other", filter: beaconOffers, registering: [publicFixed]) == [Self.raw(fixed), offer])
        #expect(Self.heard(fixed, by: "other", filter: beaconOffers, registering: [privateFixed]).isEmpty)
    }
}
