import Foundation
import Testing
@testable import SottoChannel

@Suite struct CrowdRoomTests {
    @Test func devicesStandInsideTheRoomAndTheRoomIsReproducible() {
        let room = CrowdRoom.random(count: 30, size: [7, 5, 2.6], levelSpreadDB: 6, ppmSpread: 100, seed: 9)
        #expect(room.devices.count == 30)
        for d in room.devices {
            #expect(d.position.x >= 0.5 && d.position.x <= 6.5 && d.position.y >= 0.5 && d.position.y <= 4.5)
            #expect(d.position.z >= 0.7 && d.position.z <= 2.5)
            #expect(d.levelDB <= 0 && d.levelDB >= -6 && abs(d.ppm) <= 100)
        }
        #expect(room == CrowdRoom.random(count: 30, size: [7, 5, 2.6], levelSpreadDB: 6, ppmSpread: 100, seed: 9))
        #expect(room != CrowdRoom.random(count: 30, size: [7, 5, 2.6], levelSpreadDB: 6, ppmSpread: 100, seed: 10))
        #expect(abs(room.volume - 91) < 1e-9)
    }

    @Test func distancesAreSymmetricAndADeviceHearsItselfClose() {
        let room = CrowdRoom.random(count: 5, seed: 3)
        for a in 0..<5 {
            #expect(room.distance(a, a) == CrowdRoom.ownDistance)
            for b in 0..<5 where b != a {
                #expect(room.distance(a, b) == room.distance(b, a))
                #expect(room.distance(a, b) > 0)
            }
        }
    }

    @Test func theDirectPathFallsWithDistanceAndFollowsTheSpeakersLevel() {
        var room = CrowdRoom(size: [7, 5, 2.6], rt60: 0.5, devices: [
            .init(position: [1, 1, 1]), .init(position: [2, 1, 1]), .init(position: [5, 1, 1], levelDB: -6),
        ], seed: 1)
        let rate = 48_000.0
        // The direct sound: nothing before it, then the gain 10^(level / 20) / distance (a reflection may land
        // on the same sample and add to it).
        func direct(_ from: Int, _ to: Int) -> (before: Float, at: Float) {
            let h = try! room.impulseResponse(from: from, to: to, sampleRate: rate)
            let index = Int((room.distance(from, to) / 343 * rate).rounded())
            return (h[..<index].map(abs).max() ?? 0, h[index])
        }
        // 1 m and 4 m from device 0; device 2 plays 6 dB lower.
        #expect(direct(1, 0).before == 0 && abs(direct(1, 0).at - 1) < 0.01)
        #expect(direct(2, 0).before == 0 && direct(2, 0).at >= 0.5012 / 4 - 0.001)
        #expect(direct(2, 0).at < direct(1, 0).at / 3)
        #expect(abs(direct(0, 0).at - 10) < 0.1)
        // A device's clock offset stretches what it plays.
        room.devices[1].ppm = 1_000
        let tone = (0..<48_000).map { Float(sin(Double($0) * 0.3)) }
        #expect(room.played(tone, by: 1, sampleRate: rate).count != tone.count)
        #expect(room.played(tone, by: 0, sampleRate: rate) == tone)
    }
}
