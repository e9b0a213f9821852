import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeService
import SottoExchangeWire
import SwiftProtobuf
import Testing

/// Earshot through `sotto serve`: the distance type crosses the wire (exchange.proto's Strategy.distance_type)
/// and the service's matcher honours it with the SNRs its clients report.
@Suite(.serialized, .timeLimit(.minutes(1))) struct EarshotServiceTests {
    @Test func theDistanceTypeCrossesTheWire() throws {
        for strategy in [try Strategy(distanceType: .earshot, ttl: .infinite), try Strategy(discoveryMode: .scan, distanceType: .earshot, ttl: .seconds(60)),
                         try Strategy(ttl: .seconds(60))] {
            let bytes: [UInt8] = try Sotto_Exchange_V1_Strategy(strategy).serializedBytes()
            let back = try Sotto_Exchange_V1_Strategy(serializedBytes: bytes)
            #expect(try back.validated(subscription: true) == strategy)
        }
        let earshot = Sotto_Exchange_V1_Strategy(try Strategy(distanceType: .earshot))
        #expect(earshot.textFormatString().contains("distance_type: DISTANCE_TYPE_EARSHOT"), "\(earshot.textFormatString())")
        let json = try earshot.jsonString()
        #expect(json.contains("\"distanceType\":\"DISTANCE_TYPE_EARSHOT\""), "\(json)")
        // Field 4, varint 1: what any protobuf implementation of the .proto sends.
        let bytes: [UInt8] = try earshot.serializedBytes()
        #expect(bytes.suffix(2) == [0x20, 0x01], "\(bytes)")
        var unknown = earshot
        unknown.distanceType = .UNRECOGNIZED(7)
        #expect(throws: ExchangeError.self) { try unknown.validated(subscription: false) }
    }

    /// An earshot publication and an earshot subscription: a sighting at 25 dB finds nothing, a louder one
    /// (smoothed over the threshold) finds the message.
    @Test func earshotThroughTheServiceNeedsALoudSighting() async throws {
        let server = try await TestServer()
        let pair = try await EarshotPair(on: server)
        let (subscriber, message, events, frame) = (pair.subscriber, pair.message, pair.events, pair.frame)
        await subscriber.manager.heard(frame: frame, snr: 25, level: -40, now: 0)
        try await subscriber.sync()
        #expect(!(await events.waitFound(1, 0.5)), "found at 25 dB: \(events.all)")
        // The client reports a token at most every reportInterval.
        try await Task.sleep(for: .seconds(MessageManager.reportInterval + 0.2))
        await subscriber.manager.heard(frame: frame, snr: 50, level: -20, now: 0)
        #expect(await events.waitFound(1, 5))
        #expect(events.found == [message])
        await pair.close()
    }
}

/// A publisher and a subscriber of one server with an earshot publication and an earshot subscription of it, and
/// the publisher's token frame as the subscriber would hear it.
struct EarshotPair {
    let server: TestServer
    let publisher: Device, subscriber: Device
    let message: SottoExchangeCore.Message
    let events = EventRecorder()
    let frame: [UInt8]
    private let handles: (PublicationHandle, SubscriptionHandle)

    init(on server: TestServer) async throws {
        self.server = server
        publisher = try await Device.remote(server.address, key: server.apiKey, name: "publisher")
        subscriber = try await Device.remote(server.address, key: server.apiKey, name: "subscriber")
        message = try Message(type: "exhibit", content: Array("near".utf8))
        let earshot = try Strategy(distanceType: .earshot)
        let publication = try await publisher.manager.publish(message, strategy: earshot, now: 0)
        let subscription = try await subscriber.manager.subscribe(filter: .allMyTypes, strategy: earshot, lostTimeout: 30, now: 0,
                                                                  handler: events.handler)
        handles = (publication, subscription)
        frame = Payload.token(try await publisher.token()).frameBytes
    }

    /// Ends both operations, both devices and the server.
    func close() async {
        keep(handles)
        await publisher.close()
        await subscriber.close()
        await server.stop()
    }
}
