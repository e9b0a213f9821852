import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import Synchronization

/// A link that records every notice its matcher sends (tokens, accepts, invalid tokens, expiries) on the
/// way to its manager, which sees the same notices in the same order.
final class RecordingLink: MatcherLink {
    let base: any MatcherLink
    let notices: AsyncStream<MatcherNotice>
    /// Everything received so far, recorded before the manager is given it.
    let received = ConnectionLog()
    private let pump: Task<Void, Never>

    init(_ base: any MatcherLink) {
        self.base = base
        let (stream, continuation) = AsyncStream.makeStream(of: MatcherNotice.self)
        notices = stream
        let received = self.received
        pump = Task {
            for await notice in base.notices {
                received.append(notice)
                continuation.yield(notice)
            }
            continuation.finish()
        }
    }

    func send(_ request: MatcherRequest) async { await base.send(request) }
    func close() async { await base.close() }
}

/// One device of a scenario: a manager on a link whose notices are recorded.
final class Device: Sendable {
    let manager: MessageManager
    let link: RecordingLink
    /// A name for messages (`node 2 #5`, `embedded #1`).
    let name: String
    private let closed = Atomic<Bool>(false)

    init(manager: MessageManager, link: RecordingLink, name: String) {
        self.manager = manager
        self.link = link
        self.name = name
    }

    /// A connected device of the service at `address` (waits at most 10 s for the Welcome).
    static func remote(_ address: MatcherAddress, key: String, broadcasts: Bool = true, lostTimeout: Double = 2,
                       name: String) async throws -> Device {
        let link = RecordingLink(try RemoteMatcher(options: .init(endpoint: address, apiKey: key, broadcasts: broadcasts)))
        let manager = MessageManager(link: link, appID: "test", lostTimeout: lostTimeout)
        let device = Device(manager: manager, link: link, name: name)
        do { try await manager.connect(timeout: 10) } catch {
            await device.close()
            throw error
        }
        return device
    }

    /// Every notice the link received, in order.
    var notices: [MatcherNotice] { link.received.all }

    /// The tokens the matcher answered were invalid (unknown, retired, or another project's).
    var invalidTokens: [[UInt8]] { notices.compactMap { if case .invalidToken(let token) = $0 { return token } else { return nil } } }

    /// The operations the matcher said expired.
    var expired: [OperationID] { notices.compactMap { if case .expired(let op) = $0 { return op } else { return nil } } }

    /// The token this device broadcasts (waits at most 10 s for it).
    func token() async throws -> [UInt8] { try await SottoServiceTests.token(of: manager, 10) }

    /// Reports hearing `other`'s token over the air.
    func hear(_ other: Device) async throws { await hear(token: try await other.token()) }

    /// Reports hearing `token` over the air.
    func hear(token: [UInt8]) async { await heard(manager, token: token) }

    /// Returns once everything this device sent before has been applied by its matcher and every notice it
    /// caused has reached the device: a probe subscription (of a type nobody publishes) is accepted after
    /// them, on the same stream. In a cluster, a device synced after another also sees what the other's
    /// commands caused (its probe is appended to the log after theirs).
    func sync() async throws {
        let probe = try await manager.subscribe(filter: Self.probeFilter, now: 0)
        let status = await probe.status()
        await probe.cancel()
        guard status == .active else { throw TimedOut(what: "the probe subscription of \(name) to be accepted (\(status))") }
    }

    static let probeFilter = try! MessageFilter([.namespacedType(namespace: "sync", type: "probe")])

    /// Ends the device's session (once).
    func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        await manager.close(now: 0)
    }
}

/// Syncs `devices` one after the other (see ``Device/sync()``): what each caused has reached the later ones.
func sync(_ devices: Device...) async throws {
    for device in devices { try await device.sync() }
}
