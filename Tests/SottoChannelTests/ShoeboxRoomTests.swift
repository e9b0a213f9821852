import Foundation
import Testing
@testable import SottoChannel

@Suite struct ShoeboxRoomTests {
    /// The direct sound arrives at distance / c with gain 1 (the fractional-delay kernel's sum), and the
    /// energy decays at least as slowly as Sabine's RT60 says: the Schroeder curve's fall from -5 to -25 dB,
    /// times 3, is 1.17 s for the nominal 0.9 s (the image sources along the hall's length meet fewer walls
    /// per metre than a diffuse field's).
    @Test func directSoundAndDecay() {
        let room = ShoeboxRoom(size: [20, 12, 6], source: [4, 5, 1.5], microphone: [8.8, 6.4, 1.5], rt60: 0.9)
        #expect(abs(room.distance - 5) < 1e-9)
        let rate = 48_000.0
        let h = room.impulseResponse(sampleRate: rate)
        let arrival = Int((5 / ShoeboxRoom.speedOfSound * rate).rounded())
        #expect(h[0..<(arrival - 10)].allSatisfy { $0 == 0 }, "nothing before the direct sound")
        let direct = h[(arrival - 8)...(arrival + 8)].reduce(0, +)
        #expect(abs(direct - 1) < 0.05, "direct sound \(direct)")
        // Schroeder backward integration of the energy.
        var remaining = [Double](repeating: 0, count: h.count + 1)
        for i in stride(from: h.count - 1, through: 0, by: -1) { remaining[i] = remaining[i + 1] + Double(h[i]) * Double(h[i]) }
        func time(atDB level: Double) -> Double {
            let target = remaining[0] * pow(10, level / 10)
            return Double(remaining.firstIndex { $0 <= target }!) / rate
        }
        let rt60 = 3 * (time(atDB: -25) - time(atDB: -5))
        #expect(rt60 > 0.9 && rt60 < 1.4, "RT60 \(rt60) s")
    }

    /// Random placements keep both points 1 m inside the walls, the distance asked for apart.
    @Test func randomPlacements() {
        var random = SeededRandom(seed: 3)
        for _ in 0..<50 {
            let room = ShoeboxRoom.random(size: ShoeboxRoom.hallSize, rt60: 0.9, distance: 5, rng: &random)
            #expect(abs(room.distance - 5) < 1e-6)
            for point in [room.source, room.microphone] {
                #expect(point.x >= 1 && point.x <= 19 && point.y >= 1 && point.y <= 11 && point.z > 0 && point.z < 6)
            }
        }
    }
}

