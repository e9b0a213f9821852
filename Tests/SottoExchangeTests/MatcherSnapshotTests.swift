import HeapModule
import Testing
@testable import SottoExchange
@testable import SottoExchangeCore

// Snapshots of the matcher core: a core restored from a snapshot (with a generator in the same state)
// answers every later input as the original does; damaged, cut or foreign snapshots are refused with a
// `MatcherSnapshotError`, never a trap.

@Suite struct MatcherSnapshotTests {
    /// Steps of each random run.
    static let steps = 3000
    /// Snapshot points are drawn after the opening steps and before the last `tailSteps` steps.
    static let tailSteps = 300

    /// What can be observed of a core from outside, for the sessions and subscription operations the
    /// random drawer uses: tokens, found messages and their signals, the session count.
    static func observable(_ core: MatcherCore, sessions: [SessionID]) -> [String] {
        var lines = ["sessions \(core.sessionCount)"]
        for session in sessions {
            lines.append("\(session) token \(core.token(of: session).map { "\($0)" } ?? "none")")
            for op in [10, 11].map(OperationID.init) {
                for message in core.visibleMessages(session: session, operation: op) {
                    let signal = core.signal(session: session, operation: op, message: message)
                    lines.append("\(session)/\(op.value) \(message) \(signal.map { "\($0.snr) \($0.level)" } ?? "none")")
                }
            }
        }
        return lines
    }

    /// A heap's deadlines in handling order, with everything they hold; without their sequence numbers
    /// (tie-breaks), only which deadlines are pending when.
    static func described(_ deadlines: some Sequence<MatcherCore.Deadline>, sequence: Bool = true) -> [String] {
        deadlines.sorted().map { "\($0.due) \(sequence ? "\($0.sequence) " : "")\($0.kind)" }.sorted()
    }

    /// The state a core holds in tables (all of it but the configuration, the generator and the deadline
    /// heaps), described independently of dictionary and set order; Doubles by their bit patterns. With
    /// `orderless`, arrays are compared as multisets too (the core fills some from dictionaries).
    static func tables(_ core: MatcherCore, orderless: Bool = false) -> [String] {
        [canonical(core.sessions, orderless), canonical(core.beacons, orderless), canonical(core.rotations, orderless),
         canonical(core.tokenOwners, orderless), canonical(core.retired, orderless), canonical(core.sightings, orderless),
         canonical(core.hearers, orderless)]
    }

    static func canonical(_ value: Any, _ orderless: Bool) -> String {
        if let double = value as? Double { return "0x" + String(double.bitPattern, radix: 16) }
        let mirror = Mirror(reflecting: value)
        guard let style = mirror.displayStyle, !mirror.children.isEmpty else { return "\(value)" }
        let children = mirror.children.map { ($0.label.map { $0 + ": " } ?? "") + canonical($0.value, orderless) }
        switch style {
        case .dictionary, .set: return "{" + children.sorted().joined(separator: ", ") + "}"
        case .collection where orderless: return "[" + children.sorted().joined(separator: ", ") + "]"
        default: return "\(mirror.subjectType)(" + children.joined(separator: ", ") + ")"
        }
    }

    /// A snapshot of a small core that has seen some of everything.
    static func smallSnapshot() -> [UInt8] {
        var drawer = InputDrawer(random: CountingGenerator(state: 5))
        var core = DrivenMatcher(core: MatcherCore(rotationInterval: 40, rotationGrace: 3, generator: CountingGenerator(state: 5)))
        var now = 0.0
        for step in 0..<400 {
            now += drawer.timeStep()
            let input = step < drawer.sessions.count ? .input(.openSession(drawer.sessions[step], appID: "app", broadcasts: true)) : drawer.next(now: now)
            _ = core.apply(input, now: now)
        }
        return core.core.snapshot()
    }

    @Test(arguments: 1...8 as ClosedRange<UInt64>)
    func aRestoredCoreAnswersTheRestOfTheLogAsTheOriginal(seed: UInt64) throws {
        var drawer = InputDrawer(random: CountingGenerator(state: seed &* 104_729))
        var original = DrivenMatcher(core: MatcherCore(tokenLength: 10, rotationInterval: 40, rotationGrace: 3,
                                                       generator: CountingGenerator(state: seed)))
        var pointDrawer = CountingGenerator(state: seed &* 31)
        let first = drawer.sessions.count
        let snapshotStep = first + Int(pointDrawer.next() % UInt64(Self.steps - Self.tailSteps - first))
        var restored: DrivenMatcher<MatcherCore>?
        var now = 0.0
        var eventsAfterRestore = 0
        for step in 0..<Self.steps {
            if step == snapshotStep {
                let bytes = original.core.snapshot()
                // The generator is the caller's: hand over one in the state the original's is in.
                let generator = try #require(original.core.generator as? CountingGenerator)
                var core = try MatcherCore(snapshot: bytes, generator: generator)
                // And a snapshot of the restored core restores as well.
                core = try MatcherCore(snapshot: core.snapshot(), generator: generator)
                #expect(core.tokenLength == 10 && core.rotationInterval == 40 && core.rotationGrace == 3)
                #expect(core.deadlineSequence == original.core.deadlineSequence)
                #expect(Self.described(core.matchingDeadlines.unordered) == Self.described(original.core.matchingDeadlines.unordered))
                #expect(Self.described(core.tokenDeadlines.unordered) == Self.described(original.core.tokenDeadlines.unordered))
                #expect(Self.tables(core) == Self.tables(original.core))
                #expect(Self.observable(core, sessions: drawer.sessions) == Self.observable(original.core, sessions: drawer.sessions))
                restored = DrivenMatcher(core: core, issued: original.issued)
            }
            now += drawer.timeStep()
            let input = step < first ? .input(.openSession(drawer.sessions[step], appID: "app", broadcasts: step != 0)) : drawer.next(now: now)
            let events = original.apply(input, now: now)
            guard var copy = restored else { continue }
            let copyEvents = copy.apply(input, now: now)
            restored = copy
            eventsAfterRestore += events.count
            // Events of different subscriptions come in dictionary order, which differs between two
            // dictionaries of equal contents: compare as multisets, and in order per operation.
            let multiset = Dictionary(events.map { ($0, 1) }, uniquingKeysWith: +)
            let copyMultiset = Dictionary(copyEvents.map { ($0, 1) }, uniquingKeysWith: +)
            guard multiset == copyMultiset, eventsByOperation(events) == eventsByOperation(copyEvents) else {
                Issue.record("seed \(seed), snapshot at step \(snapshotStep), step \(step) at \(now) s, \(input): the original gave \(events), the restored core \(copyEvents)")
                return
            }
            guard Self.observable(copy.core, sessions: drawer.sessions) == Self.observable(original.core, sessions: drawer.sessions) else {
                Issue.record("seed \(seed), snapshot at step \(snapshotStep): the cores differ after step \(step)")
                return
            }
        }
        let copy = try #require(restored)
        #expect(eventsAfterRestore > Self.tailSteps / 10, "the run after the snapshot exercised too little: \(eventsAfterRestore) events")
        // The same deadlines are pending. Their sequence numbers may differ: the core numbers the deadlines one
        // input schedules in dictionary order (edges in `subscribe`, lost timeouts in `recordSighting`), and
        // equal dictionaries can iterate differently. Sequence numbers only break ties between deadlines due
        // at the same time, which changes the order of events of different subscriptions, nothing else.
        #expect(Self.tables(copy.core, orderless: true) == Self.tables(original.core, orderless: true))
        #expect(copy.core.deadlineSequence == original.core.deadlineSequence)
        #expect(Self.described(copy.core.matchingDeadlines.unordered, sequence: false)
                == Self.described(original.core.matchingDeadlines.unordered, sequence: false))
        #expect(Self.described(copy.core.tokenDeadlines.unordered, sequence: false)
                == Self.described(original.core.tokenDeadlines.unordered, sequence: false))
    }

    @Test func valuesRoundTripBitForBit() throws {
        let a = SessionID("A"), b = SessionID("B")
        var core = MatcherCore(generator: CountingGenerator(state: 1))
        var tokens: [SessionID: [UInt8]] = [:]
        for id in [a, b] {
            for case .broadcastToken(let owner, let token) in core.handle(.openSession(id, appID: "app", broadcasts: true), now: 0) { tokens[owner] = token }
        }
        _ = core.handle(.observe(b, .token(tokens[a] ?? []), snr: .nan, level: -.infinity), now: -0.0)
        _ = core.handle(.observe(a, .token(tokens[b] ?? []), snr: .infinity, level: .leastNonzeroMagnitude), now: 1e-300)
        let restored = try MatcherCore(snapshot: core.snapshot(), generator: CountingGenerator(state: 1))
        for (observer, source) in [(b, a), (a, b)] {
            let before = try #require(core.sightings[observer]?[.session(source)])
            let after = try #require(restored.sightings[observer]?[.session(source)])
            #expect([after.last, after.snr, after.level].map(\.bitPattern) == [before.last, before.snr, before.level].map(\.bitPattern))
        }
        #expect(restored.hearers == core.hearers)
        #expect(restored.tokenOwners.mapValues { "\($0)" } == core.tokenOwners.mapValues { "\($0)" })
    }

    @Test func anEmptyCoreRoundTrips() throws {
        let core = MatcherCore(tokenLength: 6, rotationInterval: 60, rotationGrace: 1)
        let restored = try MatcherCore(snapshot: core.snapshot(), generator: SystemRandomNumberGenerator())
        #expect(restored.tokenLength == 6 && restored.rotationInterval == 60 && restored.rotationGrace == 1 && restored.sessionCount == 0)
    }

    @Test func aCutSnapshotIsRefused() {
        let bytes = Self.smallSnapshot()
        for length in 0..<bytes.count {
            #expect(throws: MatcherSnapshotError.self) { try MatcherCore(snapshot: Array(bytes[..<length]), generator: CountingGenerator(state: 1)) }
        }
        let header = MatcherCore.snapshotHeaderSize
        #expect(throws: MatcherSnapshotError.truncated(size: header + 10, expected: UInt64(bytes.count))) {
            try MatcherCore(snapshot: Array(bytes[..<(header + 10)]), generator: CountingGenerator(state: 1))
        }
        #expect(throws: MatcherSnapshotError.notASnapshot) { try MatcherCore(snapshot: [], generator: CountingGenerator(state: 1)) }
        #expect(throws: MatcherSnapshotError.corrupt("1 bytes past the end its header announces")) {
            try MatcherCore(snapshot: bytes + [0], generator: CountingGenerator(state: 1))
        }
    }

    @Test func everyDamagedByteIsRefused() {
        let bytes = Self.smallSnapshot()
        for index in bytes.indices {
            var damaged = bytes
            damaged[index] ^= 0x5A
            #expect(throws: MatcherSnapshotError.self, "byte \(index)") { try MatcherCore(snapshot: damaged, generator: CountingGenerator(state: 1)) }
        }
        var damaged = bytes
        damaged[bytes.count - 1] ^= 1
        #expect(throws: MatcherSnapshotError.corrupt("its checksum does not match")) {
            try MatcherCore(snapshot: damaged, generator: CountingGenerator(state: 1))
        }
    }

    /// Damage the checksum cannot see (a state re-sealed with a fresh checksum) reaches the decoder: it
    /// must refuse or decode, never trap nor reserve memory without bound.
    @Test func theDecoderSurvivesResealedDamage() {
        let bytes = Self.smallSnapshot()
        let header = MatcherCore.snapshotHeaderSize
        var random = CountingGenerator(state: 99)
        var refused = 0, decoded = 0
        for trial in 0..<3000 {
            var state = Array(bytes[header...])
            switch trial % 3 {
            case 0:  // a few bytes changed
                for _ in 0...(random.next() % 3) { state[Int(random.next() % UInt64(state.count))] = UInt8(truncatingIfNeeded: random.next()) }
            case 1:  // cut short
                state.removeLast(1 + Int(random.next() % UInt64(state.count)))
            default:  // a run of bytes set to 0xFF (huge counts and lengths)
                let start = Int(random.next() % UInt64(state.count))
                for index in start..<min(state.count, start + 1 + Int(random.next() % 9)) { state[index] = 0xFF }
            }
            var resealed = Array(bytes[..<header])
            let fields = MatcherCore.snapshotMagic.count + MemoryLayout<UInt32>.size
            resealed.replaceSubrange(fields..<header, with: Self.littleEndian(UInt64(state.count)) + Self.littleEndian(MatcherCore.checksum(state[...])))
            resealed += state
            do {
                _ = try MatcherCore(snapshot: resealed, generator: CountingGenerator(state: 1))
                decoded += 1
            } catch {
                guard case .corrupt = error else {
                    Issue.record("trial \(trial): \(error), expected corrupt")
                    return
                }
                refused += 1
            }
        }
        // Both ways out were taken (a changed SNR decodes; a count past the end does not).
        #expect(refused > 0 && decoded > 0, "\(refused) refused, \(decoded) decoded")
    }

    @Test func anotherFormatVersionIsRefused() throws {
        let bytes = Self.smallSnapshot()
        let versionAt = MatcherCore.snapshotMagic.count
        #expect(Array(bytes[versionAt..<versionAt + 4]) == Self.littleEndian(MatcherCore.snapshotFormatVersion))
        for version in [0, MatcherCore.snapshotFormatVersion + 1, .max] as [UInt32] {
            var other = bytes
            other.replaceSubrange(versionAt..<versionAt + 4, with: Self.littleEndian(version))
            #expect(throws: MatcherSnapshotError.unsupportedVersion(found: version, supported: MatcherCore.snapshotFormatVersion)) {
                try MatcherCore(snapshot: other, generator: CountingGenerator(state: 1))
            }
        }
        let error = MatcherSnapshotError.unsupportedVersion(found: 2, supported: 1)
        #expect(error.description == "matcher snapshot format 2 is not supported: this build reads format 1 only")
        #expect(throws: MatcherSnapshotError.notASnapshot) {
            try MatcherCore(snapshot: Array("{\"sessions\": []}".utf8), generator: CountingGenerator(state: 1))
        }
    }

    static func littleEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
}
