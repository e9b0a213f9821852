import SottoDSP
import Testing
@testable import SottoModem

/// Receivers of profiles that need the same band share one front end, and a preamble belongs to the
/// profile whose templates matched it best.
@Suite struct FrontEndSharingTests {
    @Test func theDefaultAndRobustProfilesShareOneFrontEnd() throws {
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: Profile.all)
        #expect(decoder.frontEnds.count == 3)
        let shared = try #require(decoder.frontEnds.first { $0.receivers.count == 2 })
        #expect(Set(shared.receivers.map(\.profile.name)) == ["default", "robust"])
        // The shared history is long enough for the robust profile's longest frame.
        let robust = FrameReceiver.historyNeeded(profile: .robust, basebandRate: shared.frontEnd.decimator.outputRate)
        #expect(shared.frontEnd.history.capacity >= robust)
        #expect(shared.receivers.allSatisfy { $0.history === shared.frontEnd.history })
    }

    @Test func aPreambleBelongsToTheReceiverThatMatchedItBest() {
        let frontEnd = BasebandFrontEnd(FrameReceiver.frontEndParameters(profile: .standard, sampleRate: 48_000), profiles: [.standard])
        let first = ObjectIdentifier(Profile.self), second = ObjectIdentifier(Int.self)
        frontEnd.record(.init(receiver: first, start: 1_000, strength: 1.6))
        #expect(frontEnd.isOutranked(second, start: 1_050, strength: 0.9, window: 160))
        #expect(!frontEnd.isOutranked(second, start: 1_050, strength: 1.7, window: 160))
        #expect(!frontEnd.isOutranked(second, start: 1_500, strength: 0.9, window: 160))
        #expect(!frontEnd.isOutranked(first, start: 1_000, strength: 0.5, window: 160))
        frontEnd.recordDecoded(first, start: 1_000, end: 3_000)
        #expect(frontEnd.isInsideOtherFrame(second, 2_000) && !frontEnd.isInsideOtherFrame(second, 3_000))
        #expect(!frontEnd.isInsideOtherFrame(first, 2_000))
        // Bounded: the oldest detections are forgotten.
        for n in 0..<BasebandFrontEnd.detectionsKept { frontEnd.record(.init(receiver: first, start: Double(10_000 + n), strength: 0.1)) }
        #expect(frontEnd.detections.count == BasebandFrontEnd.detectionsKept)
        #expect(!frontEnd.isOutranked(second, start: 1_050, strength: 0.9, window: 160))
    }
}
