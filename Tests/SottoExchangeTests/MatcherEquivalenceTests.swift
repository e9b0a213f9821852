import Foundation
import Testing
@testable import SottoExchange
@testable import SottoExchangeCore
#if canImport(Glibc)
import Glibc
#endif

/// A matcher the tests can drive: the incremental core or the brute-force reference.
protocol MatcherUnderTest {
    mutating func handle(_ input: MatcherInput, now: Double) -> [MatcherEvent]
    func token(of id: SessionID) -> [UInt8]?
    func visibleMessages(session: SessionID, operation: OperationID) -> [Message]
    var sessionCount: Int { get }
}

extension MatcherCore: MatcherUnderTest {}
extension ReferenceMatcher: MatcherUnderTest {}

// MARK: New behaviour of the incremental core

@Suite struct IncrementalMatcherTests {
    let a = SessionID("A"), b = SessionID("B"), c = SessionID("C")
    let greeting = try! Message(type: "greeting", content: Array("hi".utf8))

    /// A, B and C of one app, all broadcasting; returns the core and the tokens.
    func threeDevices() -> (core: MatcherCore, tokens: [SessionID: [UInt8]]) {
        var core = MatcherCore(generator: CountingGenerator(state: 11))
        var tokens: [SessionID: [UInt8]] = [:]
        for id in [a, b, c] {
            for case .broadcastToken(let owner, let token) in core.handle(.openSession(id, appID: "app", broadcasts: true), now: 0) { tokens[owner] = token }
        }
        return (core, tokens)
    }

    @Test func visibleMessagesIsTheSnapshotOfWhatWasFound() throws {
        var (core, tokens) = threeDevices()
        let other = try Message(type: "greeting", content: Array("yo".utf8))
        _ = core.handle(.publish(a, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.publish(c, OperationID(1), other, .default), now: 0)
        _ = core.handle(.subscribe(b, OperationID(7), .allMyTypes, .default, lostTimeout: 10), now: 0)
        #expect(core.visibleMessages(session: b, operation: OperationID(7)).isEmpty)
        _ = core.handle(.observe(b, .token(tokens[a] ?? []), snr: 10, level: -30), now: 1)
        _ = core.handle(.observe(b, .token(tokens[c] ?? []), snr: 10, level: -30), now: 1)
        #expect(core.visibleMessages(session: b, operation: OperationID(7)) == [greeting, other])
        _ = core.handle(.unpublish(a, OperationID(1)), now: 2)
        #expect(core.visibleMessages(session: b, operation: OperationID(7)) == [other])
        #expect(core.visibleMessages(session: b, operation: OperationID(8)).isEmpty)
        #expect(core.visibleMessages(session: SessionID("nobody"), operation: OperationID(7)).isEmpty)
    }

    @Test func reSentIdenticalOperationsAreNoOps() throws {
        var (core, tokens) = threeDevices()
        let short = try Strategy(ttl: .seconds(20))
        _ = core.handle(.publish(a, OperationID(1), greeting, short), now: 0)
        _ = core.handle(.subscribe(b, OperationID(1), .allMyTypes, .default, lostTimeout: 10), now: 0)
        #expect(core.handle(.observe(b, .token(tokens[a] ?? []), snr: 10, level: -30), now: 1) == [.found(b, OperationID(1), greeting)])
        #expect(core.handle(.publish(a, OperationID(1), greeting, short), now: 5).isEmpty)
        #expect(core.handle(.subscribe(b, OperationID(1), .allMyTypes, .default, lostTimeout: 10), now: 5).isEmpty)
        #expect(core.visibleMessages(session: b, operation: OperationID(1)) == [greeting])
        // A no-op: the publication's TTL still runs from its first publish (0 + 20 s).
        _ = core.handle(.observe(b, .token(tokens[a] ?? []), snr: 10, level: -30), now: 15)
        let expiry = core.handle(.tick, now: 20)
        #expect(Set(expiry) == [.expired(a, OperationID(1)), .lost(b, OperationID(1), greeting)])
    }

    @Test func aReplacedSubscriptionLosesAtOnceOnlyWhatTheNewFilterRejects() throws {
        var (core, tokens) = threeDevices()
        let exhibit = try Message(namespace: "museum", type: "exhibit", content: [4])
        _ = core.handle(.publish(a, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.publish(a, OperationID(2), exhibit, .default), now: 0)
        let both = try MessageFilter([.allMyTypes, .namespacedType(namespace: "museum", type: "exhibit")])
        _ = core.handle(.subscribe(b, OperationID(1), both, .default, lostTimeout: 10), now: 0)
        #expect(Set(core.handle(.observe(b, .token(tokens[a] ?? []), snr: 10, level: -30), now: 1))
                == [.found(b, OperationID(1), greeting), .found(b, OperationID(1), exhibit)])
        // Narrowed: the greeting is lost at once, the exhibit stays found (no second found).
        let museumOnly = try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])
        #expect(core.handle(.subscribe(b, OperationID(1), museumOnly, .default, lostTimeout: 10), now: 2) == [.lost(b, OperationID(1), greeting)])
        #expect(core.visibleMessages(session: b, operation: OperationID(1)) == [exhibit])
        // Widened again: found again without a new sighting (the edge is alive).
        #expect(core.handle(.subscribe(b, OperationID(1), both, .default, lostTimeout: 10), now: 3) == [.found(b, OperationID(1), greeting)])
        // A shorter lost timeout: the edge heard at 1 s is out of earshot at 6 s for 4 s, so both are lost.
        #expect(Set(core.handle(.subscribe(b, OperationID(1), both, .default, lostTimeout: 4), now: 6))
                == [.lost(b, OperationID(1), greeting), .lost(b, OperationID(1), exhibit)])
    }

    @Test func aReplacedPublicationLosesItsOldMessageOnlyWhereNoOtherPublisherSupportsIt() throws {
        var (core, tokens) = threeDevices()
        let other = try Message(type: "greeting", content: Array("yo".utf8))
        _ = core.handle(.publish(a, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.publish(c, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.subscribe(b, OperationID(1), .allMyTypes, .default, lostTimeout: 10), now: 0)
        // Two publishers of one message: one found.
        #expect(core.handle(.observe(b, .token(tokens[a] ?? []), snr: 10, level: -30), now: 1) == [.found(b, OperationID(1), greeting)])
        #expect(core.handle(.observe(b, .token(tokens[c] ?? []), snr: 10, level: -30), now: 1).isEmpty)
        // A now publishes another message: C still supports the greeting.
        #expect(core.handle(.publish(a, OperationID(1), other, .default), now: 2) == [.found(b, OperationID(1), other)])
        // C does too: the greeting has no supporter left.
        #expect(core.handle(.publish(c, OperationID(1), other, .default), now: 3) == [.lost(b, OperationID(1), greeting)])
        // One lost for the two publishers of `other`, when the last one goes.
        #expect(core.handle(.unpublish(a, OperationID(1)), now: 4).isEmpty)
        #expect(core.handle(.closeSession(c), now: 5) == [.lost(b, OperationID(1), other)])
    }

    @Test func lostTimeoutsArePerSubscription() throws {
        var (core, tokens) = threeDevices()
        _ = core.handle(.publish(a, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.subscribe(b, OperationID(1), .allMyTypes, .default, lostTimeout: 5), now: 0)
        _ = core.handle(.subscribe(b, OperationID(2), .allMyTypes, .default, lostTimeout: 20), now: 0)
        #expect(Set(core.handle(.observe(b, .token(tokens[a] ?? []), snr: 10, level: -30), now: 1))
                == [.found(b, OperationID(1), greeting), .found(b, OperationID(2), greeting)])
        #expect(core.handle(.tick, now: 6).isEmpty)
        #expect(core.handle(.tick, now: 6.5) == [.lost(b, OperationID(1), greeting)])
        #expect(core.handle(.tick, now: 21).isEmpty)
        #expect(core.handle(.tick, now: 21.5) == [.lost(b, OperationID(2), greeting)])
    }

    @Test func theLouderDirectionOfAnEdgeCountsAndItsTimeoutIsASignalChange() throws {
        var (core, tokens) = threeDevices()
        _ = core.handle(.publish(a, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.subscribe(b, OperationID(1), .allMyTypes, .default, lostTimeout: 10), now: 0)
        #expect(core.handle(.observe(b, .token(tokens[a] ?? []), snr: 5, level: -40), now: 1) == [.found(b, OperationID(1), greeting)])
        // A hears B much louder: the edge is now 25 dB.
        #expect(core.handle(.observe(a, .token(tokens[b] ?? []), snr: 25, level: -20), now: 2)
                == [.signalChanged(b, OperationID(1), greeting, snr: 25, level: -20)])
        // B's own direction is refreshed; A's times out at 12 s and the edge falls back to B's 5 dB.
        _ = core.handle(.observe(b, .token(tokens[a] ?? []), snr: 5, level: -40), now: 11)
        #expect(core.handle(.tick, now: 12.5) == [.signalChanged(b, OperationID(1), greeting, snr: 5, level: -40)])
    }

    @Test func sessionCountAndExistence() {
        var (core, _) = threeDevices()
        #expect(core.sessionCount == 3 && core.sessionExists(b) && !core.sessionExists(SessionID("D")))
        _ = core.handle(.closeSession(b), now: 1)
        _ = core.handle(.closeSession(SessionID("D")), now: 1)
        #expect(core.sessionCount == 2 && !core.sessionExists(b))
    }

    @Test func unknownObserversAndOwnTokensAreIgnored() {
        var (core, tokens) = threeDevices()
        _ = core.handle(.publish(a, OperationID(1), greeting, .default), now: 0)
        _ = core.handle(.subscribe(a, OperationID(2), .allMyTypes, .default, lostTimeout: 10), now: 0)
        _ = core.handle(.subscribe(b, OperationID(2), .allMyTypes, .default, lostTimeout: 10), now: 0)
        // An unknown observer: not even an invalid-token answer, and no edge.
        #expect(core.handle(.observe(SessionID("ghost"), .token(tokens[a] ?? []), snr: 10, level: -30), now: 1).isEmpty)
        #expect(core.handle(.observe(SessionID("ghost"), .token([9, 9, 9, 9, 9, 9, 9, 9]), snr: 10, level: -30), now: 1).isEmpty)
        // A hearing its own token: no self delivery.
        #expect(core.handle(.observe(a, .token(tokens[a] ?? []), snr: 10, level: -30), now: 2).isEmpty)
        #expect(core.visibleMessages(session: a, operation: OperationID(2)).isEmpty)
        #expect(core.visibleMessages(session: b, operation: OperationID(2)).isEmpty)
    }
}

// MARK: Same events as the brute-force reference

/// One randomly drawn input, described without token bytes: the two matchers draw and rotate tokens
/// independently, so an observation names the session heard and which of its tokens.
enum AbstractInput {
    case input(MatcherInput)
    /// `observer` hears the token `age` rotations old of `heard` (0: current).
    case hearToken(observer: SessionID, heard: SessionID, age: Int, snr: Double, level: Double)
    case hearUnknownToken(observer: SessionID)
}

/// A matcher with the tokens it has issued, per session (oldest first).
struct DrivenMatcher<Core: MatcherUnderTest> {
    var core: Core
    var issued: [SessionID: [[UInt8]]] = [:]

    mutating func apply(_ input: AbstractInput, now: Double) -> [MatcherEvent] {
        let concrete: MatcherInput
        switch input {
        case .input(let input): concrete = input
        case .hearToken(let observer, let heard, let age, let snr, let level):
            let tokens = issued[heard] ?? []
            let token = age < tokens.count ? tokens[tokens.count - 1 - age] : [0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE]
            concrete = .observe(observer, .token(token), snr: snr, level: level)
        case .hearUnknownToken(let observer):
            concrete = .observe(observer, .token([0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE]), snr: 10, level: -30)
        }
        let events = core.handle(concrete, now: now)
        for case .broadcastToken(let id, let token) in events { issued[id, default: []].append(token) }
        return events
    }
}

/// Token bytes differ between the two matchers; everything else must not.
func withoutTokenBytes(_ event: MatcherEvent) -> MatcherEvent {
    switch event {
    case .broadcastToken(let id, _): return .broadcastToken(id, [])
    case .invalidToken(let id, _): return .invalidToken(id, [])
    default: return event
    }
}

/// Events of one subscription (or operation), in order.
func eventsByOperation(_ events: [MatcherEvent]) -> [String: [MatcherEvent]] {
    var result: [String: [MatcherEvent]] = [:]
    for event in events {
        switch event {
        case .found(let s, let op, _), .lost(let s, let op, _), .signalChanged(let s, let op, _, _, _), .expired(let s, let op):
            result["\(s)/\(op.value)", default: []].append(event)
        case .broadcastToken, .invalidToken, .broadcastTurns, .broadcastProfile: break
        }
    }
    return result
}

/// Draws the random inputs of the equivalence test.
struct InputDrawer {
    var random: CountingGenerator
    let sessions = (0..<6).map { SessionID("S\($0)") }
    let messages: [Message] = [
        try! Message(type: "greeting", content: Array("hi".utf8)),
        try! Message(type: "greeting", content: Array("yo".utf8)),
        try! Message(content: [1, 2]),
        try! Message(namespace: "museum", type: "exhibit", content: Array("room 4".utf8)),
        try! AudioBytes.message([7]),
    ]
    let filters: [MessageFilter] = [
        .allMyTypes,
        try! MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")]),
        try! MessageFilter([.audioBytes(1)]),
        try! MessageFilter([.beaconIDs]),
        try! MessageFilter([.allMyTypes, .beaconIDs, .audioBytes(2)]),
        try! MessageFilter([.beaconIDs, .namespacedType(namespace: "museum", type: "exhibit")]),
    ]
    let strategies: [Strategy] = [.default, try! Strategy(ttl: .seconds(7)), try! Strategy(ttl: .seconds(30)), try! Strategy(ttl: .infinite)]
    let lostTimeouts: [Double] = [3, 5, 10, 20]
    let fixedBeacon: [UInt8] = [0xBE, 0xAC]
    let rotatingBeacon: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
    let rotation = try! BeaconRotation(key: BeaconIdentityKey(bytes: [UInt8](repeating: 0xFE, count: 16)), period: 30)

    mutating func pick<T>(_ values: [T]) -> T { values[Int(random.next() % UInt64(values.count))] }
    mutating func chance(_ percent: UInt64) -> Bool { random.next() % 100 < percent }
    mutating func snr() -> Double { Double(random.next() % 40_000) / 1000 - 5 }
    mutating func level() -> Double { -Double(random.next() % 60_000) / 1000 - 10 }

    mutating func timeStep() -> Double {
        switch random.next() % 20 {
        case 0..<4: return 0
        case 4: return Double(random.next() % 25_000) / 1000
        default: return Double(random.next() % 800) / 1000
        }
    }

    mutating func next(now: Double) -> AbstractInput {
        let session = pick(sessions)
        switch random.next() % 200 {
        case 0..<3: return .input(.openSession(session, appID: chance(85) ? "app" : "other", broadcasts: chance(85)))
        case 3..<5: return .input(.closeSession(session))
        case 5..<21: return .input(.publish(session, OperationID(Int(random.next() % 3)), pick(messages), pick(Array(strategies.dropLast()))))
        case 21..<27: return .input(.unpublish(session, OperationID(Int(random.next() % 3))))
        case 27..<41:
            let strategy = chance(70) ? pick([Strategy.default, strategies[3]]) : pick(strategies)
            return .input(.subscribe(session, OperationID(10 + Int(random.next() % 2)), pick(filters), strategy, lostTimeout: pick(lostTimeouts)))
        case 41..<43: return .input(.unsubscribe(session, OperationID(10 + Int(random.next() % 2))))
        case 43..<47:
            let attachment = try! BeaconAttachment.message(namespace: "museum", type: "exhibit", data: [UInt8(random.next() % 3)])
            if chance(50) {
                return .input(.registerBeacon(id: fixedBeacon, appID: pick(["app", "other"]), attachments: [attachment], publicVisibility: chance(50), rotation: nil))
            }
            return .input(.registerBeacon(id: rotatingBeacon, appID: "app", attachments: [attachment], publicVisibility: false, rotation: rotation))
        case 47..<150:
            var heard = pick(sessions)
            if heard == session { heard = pick(sessions) }
            return .hearToken(observer: session, heard: heard, age: chance(90) ? 0 : Int(random.next() % 3), snr: snr(), level: level())
        case 150..<153: return .hearUnknownToken(observer: session)
        case 153..<165: return .input(.observe(session, .audioBytes(pick([[7], [8], [1, 2]])), snr: snr(), level: level()))
        case 165..<177:
            let id = pick([fixedBeacon, rotation.id(atUnixTime: now, length: 8), rotation.id(atUnixTime: now - 30, length: 8),
                           rotation.id(atUnixTime: now - 70, length: 8), rotation.id(atUnixTime: now + 55, length: 8),
                           rotation.id(atUnixTime: now - 200, length: 8), rotatingBeacon, [0x0B]])
            return .input(.observe(session, .beacon(id), snr: snr(), level: level()))
        default: return .input(.tick)
        }
    }
}

@Suite struct EquivalenceTests {
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func sameEventsAsTheBruteForceReference(seed: UInt64) {
        var drawer = InputDrawer(random: CountingGenerator(state: seed &* 7919))
        var core = DrivenMatcher(core: MatcherCore(rotationInterval: 40, rotationGrace: 3, generator: CountingGenerator(state: seed)))
        var reference = DrivenMatcher(core: ReferenceMatcher(rotationInterval: 40, rotationGrace: 3, generator: CountingGenerator(state: seed)))
        var foundState: [String: Bool] = [:]
        var counts: [String: Int] = [:]
        var now = 0.0
        for step in 0..<5000 {
            now += drawer.timeStep()
            let input = step < drawer.sessions.count
                ? .input(.openSession(drawer.sessions[step], appID: "app", broadcasts: step != 0)) : drawer.next(now: now)
            let events = core.apply(input, now: now)
            let expected = reference.apply(input, now: now)
            let multiset = Dictionary(events.map { (withoutTokenBytes($0), 1) }, uniquingKeysWith: +)
            let expectedMultiset = Dictionary(expected.map { (withoutTokenBytes($0), 1) }, uniquingKeysWith: +)
            guard multiset == expectedMultiset else {
                Issue.record("step \(step) at \(now) s, \(input): \(events) but the reference gave \(expected)")
                return
            }
            #expect(eventsByOperation(events) == eventsByOperation(expected), "order within a subscription, step \(step)")
            #expect(core.core.sessionCount == reference.core.sessionCount)
            for session in drawer.sessions {
                #expect(core.core.token(of: session) == core.issued[session]?.last || core.core.token(of: session) == nil)
                for op in [10, 11].map(OperationID.init) {
                    #expect(core.core.visibleMessages(session: session, operation: op) == reference.core.visibleMessages(session: session, operation: op),
                            "snapshot of \(session)/\(op.value), step \(step)")
                }
            }
            for event in events {
                switch event {
                case .found(let s, let op, let m):
                    let key = "\(s)/\(op.value)/\(m)"
                    #expect(foundState[key] != true, "found twice: \(key)")
                    foundState[key] = true
                case .lost(let s, let op, let m):
                    let key = "\(s)/\(op.value)/\(m)"
                    #expect(foundState[key] == true, "lost without found: \(key)")
                    foundState[key] = false
                case .expired(let s, let op):
                    // A subscription ends with it: whatever it had found was lost just before.
                    for key in foundState.keys where key.hasPrefix("\(s)/\(op.value)/") { #expect(foundState[key] != true) }
                default: break
                }
                let kind = "\(withoutTokenBytes(event))".prefix { $0 != "(" }
                counts[String(kind), default: 0] += 1
            }
            // Sessions closed or reopened end their subscriptions without events.
            if case .input(.closeSession(let id)) = input { foundState = foundState.filter { !$0.key.hasPrefix("\(id)/") } }
            if case .input(.openSession(let id, _, _)) = input { foundState = foundState.filter { !$0.key.hasPrefix("\(id)/") } }
            if case .input(.unsubscribe(let id, let op)) = input { foundState = foundState.filter { !$0.key.hasPrefix("\(id)/\(op.value)/") } }
        }
        // The run exercised every kind of event.
        for kind in ["found", "lost", "signalChanged", "expired", "broadcastToken", "invalidToken"] {
            #expect(counts[kind, default: 0] > 10, "too few \(kind) events: \(counts)")
        }
    }
}

// MARK: Measurement (not a test: run with SOTTO_MATCHER_BENCH=core:10000:100000 or reference:1000:500)

/// CPU time of this process (s).
func processCPUSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// Sessions in clusters of 5, each with one publication and one subscription; observations of cluster
/// neighbours at 5000/s of simulated time, a tick every 0.1 s. Prints observations per CPU second and the
/// p99 cost of one input.
func measureMatcher<Core: MatcherUnderTest>(_ core: inout Core, sessions count: Int, observations: Int) {
    let clusterSize = 5
    var random = CountingGenerator(state: 42)
    var tokens: [[UInt8]] = []
    let setupStart = processCPUSeconds()
    for i in 0..<count {
        let id = SessionID("s\(i)")
        for case .broadcastToken(_, let token) in core.handle(.openSession(id, appID: "app", broadcasts: true), now: 0) { tokens.append(token) }
        _ = core.handle(.publish(id, OperationID(1), try! Message(type: "t", content: Array("message \(i)".utf8)), .default), now: 0)
        _ = core.handle(.subscribe(id, OperationID(2), .allMyTypes, try! Strategy(ttl: .infinite), lostTimeout: 10), now: 0)
    }
    let setupSeconds = processCPUSeconds() - setupStart
    var found = 0, lost = 0
    var costs: [Double] = []
    costs.reserveCapacity(observations)
    let clock = ContinuousClock()
    let start = processCPUSeconds()
    for k in 0..<observations {
        let now = 1 + Double(k) / 5000
        let observer = Int(random.next() % UInt64(count))
        let cluster = observer / clusterSize * clusterSize
        var heard = cluster + Int(random.next() % UInt64(clusterSize))
        if heard == observer { heard = cluster + (observer - cluster + 1) % clusterSize }
        heard = min(heard, count - 1)
        let input = MatcherInput.observe(SessionID("s\(observer)"), .token(tokens[heard]), snr: 5 + Double(random.next() % 20_000) / 1000, level: -30)
        let began = clock.now
        var events = core.handle(input, now: now)
        if k % 500 == 499 { events += core.handle(.tick, now: now) }
        costs.append(Double((clock.now - began).components.attoseconds) / 1e18)
        for event in events {
            if case .found = event { found += 1 }
            if case .lost = event { lost += 1 }
        }
    }
    let seconds = processCPUSeconds() - start
    costs.sort()
    let p99 = costs.isEmpty ? 0 : costs[min(costs.count - 1, costs.count * 99 / 100)]
    print("matcher \(Core.self): \(count) sessions (setup \(String(format: "%.2f", setupSeconds)) CPU s), \(observations) observations in "
          + "\(String(format: "%.3f", seconds)) CPU s = \(String(format: "%.0f", Double(observations) / seconds)) observations/CPU s; "
          + "p99 per input \(String(format: "%.1f", p99 * 1e6)) µs; \(found) found, \(lost) lost")
}

@Test(.enabled(if: ProcessInfo.processInfo.environment["SOTTO_MATCHER_BENCH"] != nil, "measurement: set SOTTO_MATCHER_BENCH"))
func matcherThroughput() {
    let parts = (ProcessInfo.processInfo.environment["SOTTO_MATCHER_BENCH"] ?? "").split(separator: ":")
    let sessions = parts.count > 1 ? Int(parts[1]) ?? 10_000 : 10_000
    let observations = parts.count > 2 ? Int(parts[2]) ?? 100_000 : 100_000
    if parts.first == "reference" {
        var core = ReferenceMatcher(generator: CountingGenerator(state: 3))
        measureMatcher(&core, sessions: sessions, observations: observations)
    } else {
        var core = MatcherCore(generator: CountingGenerator(state: 3))
        measureMatcher(&core, sessions: sessions, observations: observations)
    }
}

// MARK: The reference: today's brute-force matcher

/// Today's matcher (before the incremental core), kept test-only as the reference: every input recomputes
/// what every subscription sees by brute force. One deliberate change, the re-send rule the incremental core
/// introduced: re-sending an operation with identical parameters is a no-op, and a replaced subscription
/// keeps what it reported (so the next reconcile loses only what the new parameters no longer support).
struct ReferenceMatcher {
    /// Token length (bytes).
    let tokenLength: Int
    /// Token rotation interval (s) and grace period during which the old token still resolves (s).
    let rotationInterval: Double
    let rotationGrace: Double
    /// How long retired tokens are never reissued (s).
    static let retiredMemory = 86_400.0

    var generator: any RandomNumberGenerator & Sendable

    struct Publication { var message: Message; var strategy: Strategy; var expires: Double? }
    struct Subscription { var filter: MessageFilter; var strategy: Strategy; var expires: Double?; var lostTimeout: Double; var visible: [Message: Double] = [:] }
    struct Session {
        var appID: String
        var broadcasts: Bool
        var token: [UInt8]?
        var tokenIssued: Double = 0
        var publications: [OperationID: Publication] = [:]
        var subscriptions: [OperationID: Subscription] = [:]
    }
    enum Source: Hashable { case session(SessionID), beacon([UInt8]), audio([UInt8]) }
    struct Sighting { var last: Double; var snr: Double; var level: Double }

    var sessions: [SessionID: Session] = [:]
    var beacons: [[UInt8]: (appID: String, attachments: [Message], isPublic: Bool)] = [:]
    var rotations: [[UInt8]: BeaconRotation] = [:]
    var tokenOwners: [[UInt8]: (session: SessionID, validUntil: Double?)] = [:]
    var retired: [[UInt8]: Double] = [:]
    /// observer -> source -> last sighting.
    var sightings: [SessionID: [Source: Sighting]] = [:]

    init(tokenLength: Int = 8, rotationInterval: Double = 900, rotationGrace: Double = 10,
                generator: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator()) {
        self.tokenLength = tokenLength
        self.rotationInterval = rotationInterval
        self.rotationGrace = rotationGrace
        self.generator = generator
    }

    /// Applies one input at time `now` (s, monotonic).
    mutating func handle(_ input: MatcherInput, now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        switch input {
        case .openSession(let id, let appID, let broadcasts):
            sessions[id] = Session(appID: appID, broadcasts: broadcasts)
            if broadcasts { events += issueToken(for: id, now: now) }
        case .closeSession(let id):
            // Session end: everything its subscriptions had found is lost, at once.
            for (op, subscription) in sessions[id]?.subscriptions ?? [:] {
                for message in subscription.visible.keys.sorted(by: { $0.description < $1.description }) { events.append(.lost(id, op, message)) }
            }
            if let token = sessions[id]?.token { tokenOwners[token] = nil; retired[token] = now }
            sessions[id] = nil
            sightings[id] = nil
            for observer in sightings.keys { sightings[observer]?[.session(id)] = nil }
        case .publish(let id, let op, let message, let strategy):
            if let previous = sessions[id]?.publications[op], previous.message == message, previous.strategy == strategy { break }
            sessions[id]?.publications[op] = Publication(message: message, strategy: strategy, expires: strategy.seconds.map { now + $0 })
        case .unpublish(let id, let op):
            sessions[id]?.publications[op] = nil
        case .subscribe(let id, let op, let filter, let strategy, let lostTimeout):
            let previous = sessions[id]?.subscriptions[op]
            if let previous, previous.filter == filter, previous.strategy == strategy, previous.lostTimeout == lostTimeout { break }
            sessions[id]?.subscriptions[op] = Subscription(filter: filter, strategy: strategy, expires: strategy.seconds.map { now + $0 },
                                                           lostTimeout: lostTimeout, visible: previous?.visible ?? [:])
        case .unsubscribe(let id, let op):
            sessions[id]?.subscriptions[op] = nil
        case .registerBeacon(let beaconID, let appID, let attachments, let isPublic, let rotation):
            beacons[beaconID] = (appID, attachments, isPublic)
            rotations[beaconID] = rotation
        case .observe(let observer, let payload, let snr, let level):
            guard sessions[observer] != nil else { break }
            let source: Source
            switch payload {
            case .roomAlias: return events  // room aliases come with the turns, which the reference has none of
            case .audioBytes(let bytes): source = .audio(bytes)
            case .beacon(let heard):
                guard let stable = resolveBeacon(heard, now: now) else { return events }
                source = .beacon(stable)
            case .token(let token):
                // One rule added to the original: another app's token is invalid (projects are isolated).
                guard let owner = tokenOwners[token], owner.validUntil.map({ now <= $0 }) ?? true,
                      let ownerSession = sessions[owner.session], ownerSession.appID == sessions[observer]?.appID else {
                    events.append(.invalidToken(observer, token))
                    return events
                }
                if owner.session == observer { return events }  // own token: the self-check's business
                source = .session(owner.session)
            }
            // A sighting older than the matcher's memory of sightings is forgotten: smoothing starts again.
            let previous = sightings[observer]?[source].flatMap { now - $0.last > MatcherCore.sightingMemory ? nil : $0 }
            // Exponentially weighted: later sightings count more (like Nearby's BLE signal).
            let smoothed = previous.map { 0.7 * $0.snr + 0.3 * snr } ?? snr
            let smoothedLevel = previous.map { 0.7 * $0.level + 0.3 * level } ?? level
            sightings[observer, default: [:]][source] = Sighting(last: now, snr: smoothed, level: smoothedLevel)
        case .takeTurns: break  // turns are not matching: the reference has none
        case .tick:
            events += rotateTokens(now: now)
        }
        events += expire(now: now)
        events += reconcile(now: now)
        return events
    }

    // MARK: Tokens

    mutating func freshToken(now: Double) -> [UInt8] {
        while true {
            var token = [UInt8](repeating: 0, count: tokenLength)
            for i in token.indices { token[i] = UInt8.random(in: 0...255, using: &generator) }
            if tokenOwners[token] == nil && retired[token].map({ now - $0 > Self.retiredMemory }) ?? true { return token }
        }
    }

    mutating func issueToken(for id: SessionID, now: Double) -> [MatcherEvent] {
        let token = freshToken(now: now)
        if let old = sessions[id]?.token {
            tokenOwners[old] = (id, now + rotationGrace)
            retired[old] = now
        }
        tokenOwners[token] = (id, nil)
        sessions[id]?.token = token
        sessions[id]?.tokenIssued = now
        return [.broadcastToken(id, token)]
    }

    mutating func rotateTokens(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for (id, session) in sessions where session.broadcasts && now - session.tokenIssued >= rotationInterval {
            events += issueToken(for: id, now: now)
        }
        tokenOwners = tokenOwners.filter { $0.value.validUntil.map { now <= $0 } ?? true }
        retired = retired.filter { now - $0.value <= Self.retiredMemory }
        return events
    }

    // MARK: Expiry and matching

    mutating func expire(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for (id, session) in sessions {
            for (op, publication) in session.publications where publication.expires.map({ now >= $0 }) ?? false {
                sessions[id]?.publications[op] = nil
                events.append(.expired(id, op))
            }
            for (op, subscription) in session.subscriptions where subscription.expires.map({ now >= $0 }) ?? false {
                for message in subscription.visible.keys.sorted(by: { $0.description < $1.description }) { events.append(.lost(id, op, message)) }
                sessions[id]?.subscriptions[op] = nil
                events.append(.expired(id, op))
            }
        }
        return events
    }

    /// Messages a source offers to an observer of app `appID`.
    func messages(of source: Source, forApp appID: String) -> [Message] {
        switch source {
        case .audio(let bytes):
            return (try? AudioBytes.message(bytes)).map { [$0] } ?? []
        case .beacon(let beaconID):
            let raw = Message(reservedType: ExchangeLimits.beaconIDType, content: beaconID)
            guard let beacon = beacons[beaconID] else { return [raw] }
            return beacon.isPublic || beacon.appID == appID ? [raw] + beacon.attachments : []
        case .session(let id):
            guard let session = sessions[id], session.appID == appID else { return [] }
            return session.publications.values.map(\.message)
        }
    }

    /// Recomputes what every subscription sees; emits found, lost and signal changes.
    mutating func reconcile(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for (id, session) in sessions {
            for (op, subscription) in session.subscriptions {
                // Sources in earshot: heard by this session, or (for sessions) having heard it.
                var best: [Message: Sighting] = [:]
                var sources: [Source: Sighting] = [:]
                for (source, sighting) in sightings[id] ?? [:] where now - sighting.last <= subscription.lostTimeout {
                    sources[source] = sighting
                }
                for (other, seen) in sightings where other != id {
                    if let sighting = seen[.session(id)], now - sighting.last <= subscription.lostTimeout,
                       sighting.snr > sources[.session(other)]?.snr ?? -.infinity {
                        sources[.session(other)] = sighting
                    }
                }
                for (source, sighting) in sources {
                    if case .session(let other) = source, other == id { continue }
                    // A beacon subscription takes everything of the project's own beacons.
                    var ownBeacon = false
                    if case .beacon(let beaconID) = source { ownBeacon = beacons[beaconID]?.appID == session.appID }
                    let narrowed = subscription.filter.includes.contains { if case .namespacedType = $0 { true } else { false } }
                    let takesAll = ownBeacon && subscription.filter.includes.contains(.beaconIDs) && !narrowed
                    for message in messages(of: source, forApp: session.appID)
                    where (takesAll || subscription.filter.accepts(message)) && sighting.snr > best[message]?.snr ?? -.infinity {
                        best[message] = sighting
                    }
                }
                let before = subscription.visible
                for message in before.keys.sorted(by: { $0.description < $1.description }) where best[message] == nil {
                    events.append(.lost(id, op, message))
                }
                var reported: [Message: Double] = [:]
                for message in best.keys.sorted(by: { $0.description < $1.description }) {
                    let snr = best[message]!.snr
                    if let previous = before[message] {
                        if abs(snr - previous) >= 6 {
                            events.append(.signalChanged(id, op, message, snr: snr, level: best[message]!.level))
                            reported[message] = snr
                        } else {
                            reported[message] = previous
                        }
                    } else {
                        events.append(.found(id, op, message))
                        reported[message] = snr
                    }
                }
                sessions[id]?.subscriptions[op]?.visible = reported
            }
        }
        return events
    }

    /// The stable ID of the beacon that broadcast `heard` (the clock is Unix time): itself for fixed beacons,
    /// the rotating beacon whose ID of a slot within the clock-skew window it is (the smallest such stable
    /// ID), nil for a rotating beacon's stable ID.
    func resolveBeacon(_ heard: [UInt8], now: Double) -> [UInt8]? {
        if beacons[heard] != nil { return rotations[heard] == nil ? heard : nil }
        let owners = rotations.filter { stable, rotation in
            rotation.acceptedSlots(atUnixTime: now).contains { rotation.id(at: $0, length: stable.count) == heard }
        }
        return owners.keys.min { $0.lexicographicallyPrecedes($1) } ?? heard
    }

    /// The token a session currently broadcasts.
    func token(of id: SessionID) -> [UInt8]? { sessions[id]?.token }

    /// What a subscription has found, sorted like events.
    func visibleMessages(session: SessionID, operation: OperationID) -> [Message] {
        (sessions[session]?.subscriptions[operation]?.visible.keys).map { $0.sorted(by: { $0.description < $1.description }) } ?? []
    }

    var sessionCount: Int { sessions.count }
}

