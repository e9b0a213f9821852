import Foundation
import Testing
@testable import SottoExchange
@testable import SottoExchangeCore

/// A deterministic generator for tokens in tests.
struct CountingGenerator: RandomNumberGenerator, Sendable {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        return z ^ (z >> 31)
    }
}

@Suite struct LimitTests {
    @Test func everyLimitHasATypedError() throws {
        #expect(throws: ExchangeError.contentTooLarge(102_401)) { try Message(content: [UInt8](repeating: 0, count: 102_401)) }
        #expect(throws: Never.self) { try Message(content: [UInt8](repeating: 0, count: 102_400)) }
        #expect(throws: ExchangeError.typeTooLong(33)) { try Message(type: String(repeating: "t", count: 33), content: [1]) }
        #expect(throws: ExchangeError.reservedNamespace("__reserved_namespace")) { try Message(namespace: "__reserved_namespace", content: [1]) }
        #expect(throws: ExchangeError.invalidType("a*")) { try Message(type: "a*", content: [1]) }
        #expect(throws: ExchangeError.invalidTTL(0)) { try Strategy(ttl: .seconds(0)) }
        #expect(throws: ExchangeError.invalidTTL(86_401)) { try Strategy(ttl: .seconds(86_401)) }
        #expect(throws: ExchangeError.audioBytesLength(11)) { try AudioBytes.message([UInt8](repeating: 1, count: 11)) }
        #expect(throws: ExchangeError.audioBytesLength(0)) { try AudioBytes.message([]) }
        #expect(throws: ExchangeError.emptyFilter) { try MessageFilter([]) }
        #expect(throws: ExchangeError.invalidNamespace("")) { try MessageFilter([.namespacedType(namespace: "", type: "t")]) }
        #expect(throws: ExchangeError.audioBytesLength(11)) { try MessageFilter([.audioBytes(11)]) }
        #expect(throws: ExchangeError.attachmentTooLarge(1_025)) { try BeaconAttachment.message(namespace: "n", type: "t", data: [UInt8](repeating: 0, count: 1_025)) }
        #expect(throws: ExchangeError.invalidType(String(repeating: "t", count: 101))) { try BeaconAttachment.message(namespace: "n", type: String(repeating: "t", count: 101), data: [1]) }
        #expect(throws: ExchangeError.invalidNamespace("")) { try BeaconAttachment.message(namespace: "", type: "t", data: [1]) }
        #expect(throws: Never.self) { try BeaconAttachment.message(namespace: "museum", type: String(repeating: "t", count: 100), data: [UInt8](repeating: 0, count: 1_024)) }
        for error in [ExchangeError.contentTooLarge(1), .emptyFilter, .invalidTTL(0), .quotaExceeded(100)] { #expect(!error.description.isEmpty) }
    }

    @Test func quotaIsEnforced() async throws {
        let manager = MessageManager(appID: "app")
        var handles: [PublicationHandle] = []
        for i in 0..<ExchangeLimits.maxOperationsPerApp { handles.append(try await manager.publish(Message(content: [UInt8(i % 256), 1]), now: 0)) }
        await #expect(throws: ExchangeError.quotaExceeded(100)) { try await manager.publish(Message(content: [9]), now: 0) }
        _ = handles
    }

    @Test func payloadKindsRoundTrip() {
        for payload in [Payload.token([1, 2, 3, 4, 5, 6, 7, 8]), .audioBytes([1, 2]), .beacon([9, 9, 9]),
                        .roomAlias(0), .roomAlias(0x0ABC), .roomAlias(Payload.maxRoomAlias)] {
            #expect(Payload(frame: payload.frameBytes) == payload)
        }
        // A room alias is two bytes on the air, its kind in the high nibble; longer frames of that kind are nobody's.
        #expect(Payload.roomAlias(0x0ABC).frameBytes == [0x4A, 0xBC])
        #expect(Payload(frame: [0x4A, 0xBC, 0]) == nil)
        #expect(Payload(frame: [0x77, 1, 2]) == nil)
        #expect(Payload(frame: [0x20] + [UInt8](repeating: 0, count: 11)) == nil)
        // Heard: a room alias comes as the modem's alias frame; a token frame that claims the alias kind is nobody's.
        #expect(Payload(decoded: [], alias: 0x0ABC) == .roomAlias(0x0ABC))
        #expect(Payload(decoded: [0x4A, 0xBC], alias: nil) == nil)
        #expect(Payload(decoded: [], alias: Payload.maxRoomAlias + 1) == nil)
        #expect(Payload(decoded: [0x10, 1, 2, 3, 4, 5, 6, 7, 8], alias: nil) == .token([1, 2, 3, 4, 5, 6, 7, 8]))
    }
}

@Suite struct MatcherTests {
    func twoDevices() -> (core: MatcherCore, tokenA: [UInt8], tokenB: [UInt8], message: Message) {
        var core = MatcherCore(generator: CountingGenerator(state: 1))
        let a = core.handle(.openSession(SessionID("A"), appID: "app", broadcasts: true), now: 0)
        let b = core.handle(.openSession(SessionID("B"), appID: "app", broadcasts: true), now: 0)
        guard case .broadcastToken(_, let tokenA) = a[0], case .broadcastToken(_, let tokenB) = b[0] else { fatalError() }
        let message = try! Message(type: "greeting", content: Array("hi".utf8))
        _ = core.handle(.publish(SessionID("A"), OperationID(1), message, .default), now: 0)
        _ = core.handle(.subscribe(SessionID("B"), OperationID(1), .allMyTypes, .default, lostTimeout: 10), now: 0)
        return (core, tokenA, tokenB, message)
    }

    @Test func foundThenLostAfterTheTimeoutThenFoundAgain() {
        var (core, tokenA, _, message) = twoDevices()
        let b = SessionID("B"), op = OperationID(1)
        #expect(core.handle(.observe(b, .token(tokenA), snr: 12, level: -30), now: 1) == [.found(b, op, message)])
        #expect(core.handle(.observe(b, .token(tokenA), snr: 12, level: -30), now: 5).isEmpty)  // no repeated found
        #expect(core.handle(.tick, now: 14.9).isEmpty)
        #expect(core.handle(.tick, now: 15.1) == [.lost(b, op, message)])
        #expect(core.handle(.tick, now: 16).isEmpty)  // not lost twice
        #expect(core.handle(.observe(b, .token(tokenA), snr: 3, level: -30), now: 20) == [.found(b, op, message)])
    }

    @Test func earshotIsSymmetricAndUnpublishLosesAtOnce() {
        var (core, _, tokenB, message) = twoDevices()
        let a = SessionID("A"), b = SessionID("B"), op = OperationID(1)
        // A heard B: B's subscription finds A's message (either direction puts them in earshot).
        #expect(core.handle(.observe(a, .token(tokenB), snr: 10, level: -30), now: 2) == [.found(b, op, message)])
        #expect(core.handle(.unpublish(a, OperationID(1)), now: 3) == [.lost(b, op, message)])
    }

    @Test func ttlExpiryAndSessionEnd() throws {
        var (core, tokenA, _, message) = twoDevices()
        let a = SessionID("A"), b = SessionID("B")
        _ = core.handle(.publish(a, OperationID(2), try Message(content: [7]), try Strategy(ttl: .seconds(5))), now: 0)
        let found = core.handle(.observe(b, .token(tokenA), snr: 10, level: -30), now: 1)
        #expect(found.count == 2)
        let expiry = core.handle(.tick, now: 5)
        #expect(expiry.contains(.expired(a, OperationID(2))) && expiry.contains(.lost(b, OperationID(1), try Message(content: [7]))))
        #expect(core.handle(.closeSession(a), now: 6) == [.lost(b, OperationID(1), message)])
    }

    @Test func tokensRotateWithGraceAndUnknownTokensAreInvalid() {
        var core = MatcherCore(rotationInterval: 60, rotationGrace: 10, generator: CountingGenerator(state: 5))
        guard case .broadcastToken(_, let first) = core.handle(.openSession(SessionID("A"), appID: "app", broadcasts: true), now: 0)[0] else { return }
        _ = core.handle(.openSession(SessionID("B"), appID: "app", broadcasts: false), now: 0)
        let rotation = core.handle(.tick, now: 60)
        guard case .broadcastToken(_, let second)? = rotation.first else { Issue.record("no rotation"); return }
        #expect(second != first && second.count == 8)
        // The old token still resolves during the grace period, then is invalid.
        #expect(!core.handle(.observe(SessionID("B"), .token(first), snr: 10, level: -30), now: 65).contains(.invalidToken(SessionID("B"), first)))
        #expect(core.handle(.observe(SessionID("B"), .token(first), snr: 10, level: -30), now: 71).contains(.invalidToken(SessionID("B"), first)))
        #expect(core.handle(.observe(SessionID("B"), .token([1, 2, 3, 4, 5, 6, 7, 8]), snr: 10, level: -30), now: 72) == [.invalidToken(SessionID("B"), [1, 2, 3, 4, 5, 6, 7, 8])])
    }

    @Test func tokensAreUniqueAmongLiveAndRetired() {
        var core = MatcherCore(tokenLength: 1, rotationInterval: 1, rotationGrace: 0, generator: CountingGenerator(state: 9))
        var seen: Set<[UInt8]> = []
        for i in 0..<100 { for event in core.handle(.openSession(SessionID("s\(i)"), appID: "a", broadcasts: true), now: Double(i)) {
            if case .broadcastToken(_, let token) = event { #expect(seen.insert(token).inserted) }
        } }
    }

    /// A token space with every token taken (found by FuzzMatcherSnapshot: a restored core of token length 0
    /// spun forever at its next rotation): the session goes without a new token, and nothing hangs.
    @Test func anExhaustedTokenSpaceIssuesNoTokenInsteadOfSpinning() {
        var core = MatcherCore(tokenLength: 0, rotationInterval: 1, rotationGrace: 0, generator: CountingGenerator(state: 1))
        let first = core.handle(.openSession(SessionID("a"), appID: "app", broadcasts: true), now: 0)
        #expect(first == [.broadcastToken(SessionID("a"), [])])
        #expect(core.handle(.openSession(SessionID("b"), appID: "app", broadcasts: true), now: 0).isEmpty)
        #expect(core.token(of: SessionID("b")) == nil)
        // Rotation finds no free token either: "a" keeps the only one.
        #expect(core.handle(.tick, now: 5).isEmpty)
        #expect(core.token(of: SessionID("a")) == [])
        // One byte: 256 tokens for 300 sessions; the first 256 get distinct tokens, the rest none.
        var small = MatcherCore(tokenLength: 1, rotationInterval: 1_000, rotationGrace: 0, generator: CountingGenerator(state: 3))
        var issued: Set<[UInt8]> = []
        for i in 0..<300 {
            for case .broadcastToken(_, let token) in small.handle(.openSession(SessionID("s\(i)"), appID: "app", broadcasts: true), now: 0) {
                #expect(issued.insert(token).inserted)
            }
        }
        #expect(issued.count == 256)
    }

    @Test func beaconAttachmentsAndAudioBytes() throws {
        var core = MatcherCore(generator: CountingGenerator(state: 2))
        let b = SessionID("B")
        _ = core.handle(.openSession(b, appID: "app", broadcasts: false), now: 0)
        let attachment = try Message(namespace: "museum", type: "exhibit", content: Array("room 4".utf8))
        _ = core.handle(.registerBeacon(id: [0xBE, 0xAC], appID: "other", attachments: [attachment], publicVisibility: true, rotation: nil), now: 0)
        _ = core.handle(.subscribe(b, OperationID(1), try MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")]), .default, lostTimeout: 10), now: 0)
        _ = core.handle(.subscribe(b, OperationID(2), try MessageFilter([.audioBytes(3)]), .default, lostTimeout: 10), now: 0)
        #expect(core.handle(.observe(b, .beacon([0xBE, 0xAC]), snr: 8, level: -30), now: 1) == [.found(b, OperationID(1), attachment)])
        let audio = try AudioBytes.message([1, 2, 3])
        #expect(core.handle(.observe(b, .audioBytes([1, 2, 3]), snr: 8, level: -30), now: 2) == [.found(b, OperationID(2), audio)])
        #expect(audio.namespace == "__reserved_namespace" && audio.type == "__audio_bytes")
        #expect(core.handle(.observe(b, .audioBytes([1, 2, 3, 4]), snr: 8, level: -30), now: 3).isEmpty)  // other length: filtered out
    }

    @Test func foundAndLostAlternateUnderRandomInputs() {
        var random = CountingGenerator(state: 77)
        var (core, tokenA, tokenB, _) = twoDevices()
        var state: [String: Bool] = [:]
        var now = 0.0
        for _ in 0..<3000 {
            now += Double(random.next() % 4000) / 1000
            let input: MatcherInput
            switch random.next() % 6 {
            case 0: input = .observe(SessionID("B"), .token(tokenA), snr: Double(random.next() % 30), level: -30)
            case 1: input = .observe(SessionID("A"), .token(tokenB), snr: Double(random.next() % 30), level: -30)
            case 2: input = .publish(SessionID("A"), OperationID(Int(random.next() % 3) + 2), try! Message(content: [UInt8(random.next() % 3)]), .default)
            case 3: input = .unpublish(SessionID("A"), OperationID(Int(random.next() % 3) + 2))
            case 4: input = .observe(SessionID("B"), .audioBytes([UInt8(random.next() % 2)]), snr: 5, level: -30)
            default: input = .tick
            }
            for event in core.handle(input, now: now) {
                switch event {
                case .found(let s, let op, let m):
                    let key = "\(s)/\(op.value)/\(m)"
                    #expect(state[key] != true, "found twice: \(key)")
                    state[key] = true
                case .lost(let s, let op, let m):
                    let key = "\(s)/\(op.value)/\(m)"
                    #expect(state[key] == true, "lost without found: \(key)")
                    state[key] = false
                default: break
                }
            }
        }
        #expect(state.values.contains(true) || state.values.contains(false))
    }
}

@Suite struct ManagerTests {
    @Test func audioBytesFoundAndLostThroughTheManager() async throws {
        let manager = MessageManager(appID: "app", broadcasts: false)
        let subscription = try await manager.subscribe(filter: MessageFilter([.audioBytes(2)]), now: 0)
        await manager.heard(frame: Payload.audioBytes([0xAB, 0xCD]).frameBytes, snr: 9, level: -30, now: 1)
        await manager.tick(now: 12)
        await manager.close(now: 13)
        var events: [SubscriptionEvent] = []
        for await event in subscription.events { events.append(event) }
        let message = try AudioBytes.message([0xAB, 0xCD])
        #expect(events == [.found(message), .lost(message)])
    }

    @Test func noEventsAfterCancellationReturns() async throws {
        let manager = MessageManager(appID: "app", broadcasts: false)
        let subscription = try await manager.subscribe(filter: MessageFilter([.audioBytes(1)]), now: 0)
        await manager.heard(frame: Payload.audioBytes([1]).frameBytes, snr: 9, level: -30, now: 1)  // buffered, not yet read
        await subscription.cancel()
        await manager.heard(frame: Payload.audioBytes([1]).frameBytes, snr: 9, level: -30, now: 30)
        var count = 0
        for await _ in subscription.events { count += 1 }
        #expect(count == 0)
        #expect(await subscription.status() == .inactive)
    }

    @Test func transmitPlanCarriesTokenAndAudioBytes() async throws {
        let manager = MessageManager(appID: "app")
        let publication = try await manager.publish(AudioBytes.message([5, 6, 7]), now: 0)
        let plan = await manager.transmitPlan
        #expect(plan.contains(.audioBytes([5, 6, 7])))
        #expect(plan.contains { if case .token(let t) = $0 { return t.count == 8 } else { return false } })
        await publication.cancel()
        #expect(!(await manager.transmitPlan).contains(.audioBytes([5, 6, 7])))
    }

    /// A link whose matcher answers each operation while `send` is still running, as a `LocalMatcher` can
    /// (its `send` hops to the matcher's actor, and the answer may be handled before the hop back).
    final class AnswerDuringSendLink: MatcherLink {
        let notices: AsyncStream<MatcherNotice>
        private let continuation: AsyncStream<MatcherNotice>.Continuation
        private let refusal: ExchangeError?

        init(refusal: ExchangeError? = nil) {
            (notices, continuation) = AsyncStream.makeStream(of: MatcherNotice.self)
            self.refusal = refusal
            continuation.yield(.connected(resumed: false))
        }

        func send(_ request: MatcherRequest) async {
            switch request {
            case .publish(let op, _, _), .subscribe(let op, _, _, _):
                continuation.yield(refusal.map { .rejected(op, $0) } ?? .accepted(op, visible: []))
                try? await Task.sleep(for: .milliseconds(200))  // the manager handles the answer meanwhile
            default: break
            }
        }

        func close() async { continuation.finish() }
    }

    @Test func anAnswerHandledBeforeSendReturnsIsNotMissed() async throws {
        let manager = MessageManager(link: AnswerDuringSendLink())
        try await manager.connect(timeout: 5)
        let subscription = try await manager.subscribe(now: 0)
        // A missed accept would have returned after the accept timeout with the status still `starting`.
        #expect(await subscription.status() == .active)

        let refused = MessageManager(link: AnswerDuringSendLink(refusal: .quotaExceeded(1)))
        try await refused.connect(timeout: 5)
        await #expect(throws: ExchangeError.quotaExceeded(1)) { _ = try await refused.publish(AudioBytes.message([1]), now: 0) }
        await manager.close(now: 0)
        await refused.close(now: 0)
    }
}

@Suite struct ConsentTests {
    @Test func consentIsPersistedAndGatesOperations() async throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("sotto-consent-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let consent = Consent(directory: directory)
        #expect(!consent.isGranted)
        let changes = ChangeLog()
        consent.onChange { changes.append($0) }
        let manager = MessageManager(appID: "app", consent: consent)
        await #expect(throws: ExchangeError.consentNotGranted) { try await manager.subscribe(now: 0) }
        try consent.set(granted: true)
        try consent.set(granted: true)  // no change, no call
        #expect(Consent(directory: directory).isGranted)  // persisted
        _ = try await manager.subscribe(now: 0)
        try consent.set(granted: false)
        #expect(changes.values == [true, false])
    }
}

final class ChangeLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [Bool] = []
    func append(_ value: Bool) { lock.withLock { stored.append(value) } }
    var values: [Bool] { lock.withLock { stored } }
}

@Test func signalChangesCarrySNRAndLevel() throws {
    var core = MatcherCore(generator: CountingGenerator(state: 4))
    let b = SessionID("B")
    _ = core.handle(.openSession(b, appID: "app", broadcasts: false), now: 0)
    _ = core.handle(.subscribe(b, OperationID(1), try MessageFilter([.audioBytes(1)]), .default, lostTimeout: 10), now: 0)
    let message = try AudioBytes.message([5])
    #expect(core.handle(.observe(b, .audioBytes([5]), snr: 20, level: -20), now: 1) == [.found(b, OperationID(1), message)])
    // Small changes are smoothed away; a drop of more than 6 dB (after smoothing) is reported with the level.
    #expect(core.handle(.observe(b, .audioBytes([5]), snr: 18, level: -22), now: 2).isEmpty)
    let events = (3..<8).flatMap { core.handle(.observe(b, .audioBytes([5]), snr: 0, level: -40), now: Double($0)) }
    guard case .signalChanged(_, _, _, let snr, let level)? = events.first else { Issue.record("no signal change: \(events)"); return }
    #expect(snr < 14 && level < -25)
}

