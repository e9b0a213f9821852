import Foundation
@testable import SottoExchangeService
@testable import SottoExchange
@testable import SottoExchangeCore
import SottoExchangeWire
import SwiftProtobuf
import Testing

/// Issue 29: a subscription's low-power preference crosses the wire (exchange.proto's Strategy.low_power)
/// and survives the matcher's snapshots; the earshot threshold is the service's option (`serve --earshot-snr`),
/// kept by every replica, restored ones included.
@Suite(.serialized, .timeLimit(.minutes(1))) struct LowPowerAndThresholdTests {
    @Test func lowPowerCrossesTheWireAndTheSnapshot() throws {
        let strategies = [try Strategy(ttl: .infinite, lowPower: true), try Strategy(distanceType: .earshot, ttl: .seconds(60), lowPower: true),
                          try Strategy(discoveryMode: .scan, ttl: .seconds(60)), try Strategy(distanceType: .earshot, ttl: .infinite)]
        for strategy in strategies {
            let bytes: [UInt8] = try Sotto_Exchange_V1_Strategy(strategy).serializedBytes()
            #expect(try Sotto_Exchange_V1_Strategy(serializedBytes: bytes).validated(subscription: true) == strategy)
            #expect(try SnapshotProto.Strategy(strategy).value() == strategy)
            let roundTrip = try SnapshotProto.Strategy(serializedBytes: try SnapshotProto.Strategy(strategy).serializedBytes() as [UInt8])
            #expect(try roundTrip.value() == strategy)
        }
        // Field 5, varint 1: what any protobuf implementation of the .proto sends; absent when false.
        let low = Sotto_Exchange_V1_Strategy(try Strategy(ttl: .infinite, lowPower: true))
        let lowBytes: [UInt8] = try low.serializedBytes()
        #expect(lowBytes.suffix(2) == [0x28, 0x01], "\(lowBytes)")
        #expect(try low.jsonString().contains("\"lowPower\":true"))
        let plainBytes: [UInt8] = try Sotto_Exchange_V1_Strategy(try Strategy(ttl: .infinite)).serializedBytes()
        #expect(!plainBytes.contains(0x28))
        #expect(lowBytes.count == plainBytes.count + 2)
        // A hand-written snapshot (format 4) of a strategy: mode (2: both), distance tag (1: earshot; bit 1: low
        // power), TTL tag (0: seconds) and zigzag seconds (120: 60 s). One written before low power existed (distance
        // tag 0 or 1) reads as not low power; a tag beyond the two bits is refused.
        let legacy: [UInt8] = [2, 1, 0, 120]
        var reader = SnapshotReader(legacy, from: 0)
        #expect(try Strategy(from: &reader) == Strategy(distanceType: .earshot, ttl: .seconds(60)))
        var lowReader = SnapshotReader([2, 3, 0, 120], from: 0)
        #expect(try Strategy(from: &lowReader) == Strategy(distanceType: .earshot, ttl: .seconds(60), lowPower: true))
        var damagedReader = SnapshotReader([2, 4, 0, 120], from: 0)
        #expect(throws: MatcherSnapshotError.self) { try Strategy(from: &damagedReader) }
        // Protobuf (format 5): low power is field 3, absent when false.
        let plainSnapshot: [UInt8] = try SnapshotProto.Strategy(try Strategy(distanceType: .earshot, ttl: .seconds(60))).serializedBytes()
        let lowSnapshot: [UInt8] = try SnapshotProto.Strategy(try Strategy(distanceType: .earshot, ttl: .seconds(60), lowPower: true)).serializedBytes()
        #expect(!plainSnapshot.contains(0x18) && lowSnapshot.count == plainSnapshot.count + 2)
    }

    /// The threshold is the service's: at 20 dB a 25 dB sighting supports an earshot subscription (the
    /// default 30 dB refuses it: `EarshotServiceTests`).
    @Test func theEarshotThresholdIsTheServicesOption() async throws {
        var configuration = TestServer.fastConfiguration
        configuration.earshotSNR = 20
        let server = try await TestServer(configuration: configuration)
        let pair = try await EarshotPair(on: server)
        let (subscriber, message, events, frame) = (pair.subscriber, pair.message, pair.events, pair.frame)
        await subscriber.manager.heard(frame: frame, snr: 25, level: -40, now: 0)
        #expect(await events.waitFound(1, 10), "not found at 25 dB with a 20 dB threshold: \(events.all)")
        #expect(events.found == [message])
        await pair.close()
    }

    /// Every replica applies the node's threshold, a replica restored from a snapshot too (the core's
    /// snapshot does not hold it: nodes of one store are configured alike, as for the publication quota).
    @Test func aRestoredReplicaKeepsTheConfiguredThreshold() throws {
        var timings = ReplicaTests.timings
        timings.earshotSNR = 22.5
        let replica = ExchangeReplica(core: MatcherCore(), timings: timings)
        #expect(replica.core.earshotSNR == 22.5)
        let restored = try ExchangeReplica(snapshot: replica.snapshot(), timings: timings)
        #expect(restored.core.earshotSNR == 22.5)
        #expect(ExchangeReplica(core: MatcherCore(), timings: ReplicaTests.timings).core.earshotSNR == MatcherCore.defaultEarshotSNR)
        var configuration = ServiceConfiguration()
        configuration.earshotSNR = 41
        #expect(configuration.timings.earshotSNR == 41)
    }
}
