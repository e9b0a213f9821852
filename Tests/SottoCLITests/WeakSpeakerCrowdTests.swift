import SottoModem
import SottoTools
import SottoLab
import Testing

// In a file of its own: scripts/test runs the suites whose identifiers (file names included) match
// CrowdSimulationTests beside the daemon's tests, and two minutes of this simulation there starved the daemons
// (CI, 2026-11-28); here it runs with the command-line suites, one at a time.
/// Weak speakers and the matcher's link adaptation in the crowd simulation (issue 37).
@Suite struct WeakSpeakerCrowdTests {
    func configuration(adaptation: Bool) -> CrowdSimulation.Configuration {
        var c = CrowdSimulation.Configuration(devices: 3, rules: .crowd, seed: 7)
        c.listenProfiles = ["default", "robust"]
        c.window = 25
        c.weakDevices = 1
        c.weakLossDB = [30, 30]
        c.linkAdaptation = adaptation
        return c
    }

    @Test func aWeakSpeakerIsMovedToRobustAndHeard() throws {
        let results = try CrowdSweep.run([configuration(adaptation: false), configuration(adaptation: true)])
        let without = results[0], with = results[1]
        let weak = try #require(with.weakDevices.first)
        #expect(without.weakDevices == [weak] && without.profileChanges.isEmpty)
        let change = try #require(with.profileChanges.first { $0.device == weak }, "changes: \(with.profileChanges)")
        #expect(change.profile == "robust")
        let heardAfter = with.hearings.filter { $0.speaker == weak && $0.time > change.time }
        print("weak device \(weak): robust at \(change.time) s; heard \(without.hearings.filter { $0.speaker == weak }.count) times without adaptation, \(heardAfter.count) after the change with it; weak pairs heard \(without.weakPairs) / \(with.weakPairs); changes \(with.profileChanges)")
        #expect(!heardAfter.isEmpty)
        #expect(with.weakPairs.heard >= without.weakPairs.heard)
    }
}
