import SottoChannel
import Testing
@testable import SottoModem

/// Frames heard far from the speaker in a reverberant room, where the sum of the reflections outweighs the direct
/// sound: the preamble detector locks onto a reflection 3-4 ms after it, and the room fit must start the frame at
/// the direct sound again (`CoherentDetector.reanchored`), or every symbol window sits across two symbols.
@Suite struct DirectSoundAnchorTests {
    /// Pairs of the link survey's rooms (`sotto bench sweep links --devices 20 --trials 12 --seed 1`) whose token
    /// frames failed alone on the air, at the survey's noise and with that noise 30 dB lower alike (room seed,
    /// speaker, listener): their room fits put the first strong arrival 11-15 grid samples (3-4 ms) before the
    /// detected start. Without the new anchor none of these decodes (checked when the anchor was added).
    static let pairs: [(seed: UInt64, from: Int, to: Int)] = [
        (12_860_671_823_995_680_371, 2, 14),
        (10_177_250_653_276_320_208, 9, 5),
        (2_648_436_617_965_840_162, 12, 13),
    ]

    @Test(arguments: 0..<pairs.count)
    func aFrameWhoseReflectionsOutweighItsDirectSoundDecodes(pair: Int) throws {
        let (seed, from, to) = Self.pairs[pair]
        let rate = 48_000.0
        let room = CrowdRoom.random(count: 20, seed: seed)
        let frame: [UInt8] = [0x10, 0x3C, 0xA5, 0x0F, 0x77, 0x81, 0x2E, 0xD4, 0x69]
        let x = try heardAlone(frame, in: room, from: from, to: to, noiseBelow: 1_000, noiseSeed: seed &+ UInt64(to), rate: rate)
        let frames = try StreamingDecoder.decode(x, sampleRate: rate, profiles: Profile.all, aliasFrames: true)
        #expect(frames.map(\.token) == [frame], "room \(seed), \(from) to \(to): \(frames.map(\.token))")
    }
}
