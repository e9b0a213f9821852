import SottoModem
import SottoTools
import SottoLab
import Testing

/// The crowd simulation at a size CI can afford (debug build): the sender's rules against fixed repetition.
@Suite struct CrowdSimulationTests {
    func configuration(_ devices: Int, _ rules: TransmitScheduler.Rules, seed: UInt64) -> CrowdSimulation.Configuration {
        var c = CrowdSimulation.Configuration(devices: devices, rules: rules, seed: seed)
        c.listenProfiles = ["default"]
        return c
    }

    @Test func listenBeforeTalkLetsEveryoneHearEveryoneWhereFixedRepetitionCollides() throws {
        let results = try CrowdSweep.run([configuration(3, .crowd, seed: 5), configuration(3, .fixed(), seed: 5)])
        let crowd = results[0], fixed = results[1]
        #expect(crowd.pairs == 6)
        #expect(crowd.everyoneHeard)
        #expect(crowd.pairsFound == 6)
        #expect(crowd.falseTokens == 0 && fixed.falseTokens == 0)
        #expect(fixed.pairsHeard < crowd.pairsHeard)
        // Nobody started a frame while another device's frame it could hear was on the air (one period of
        // sensing lag, the sound's flight and a device buffer allowed: 0.1 s).
        let airtime = Profile.standard.airtime(payloadBytes: 9)
        for a in crowd.transmissions {
            for b in crowd.transmissions where b.device != a.device && b.start > a.start + 0.1 {
                #expect(b.start >= a.start + airtime, "device \(b.device) started at \(b.start) s during \(a.device)'s frame from \(a.start) s")
            }
        }
        // Every hearing comes after the speaker's first frame, and the first hearings are the ones reported.
        for (listener, row) in crowd.firstHeard.enumerated() {
            for (speaker, first) in row.enumerated() where listener != speaker {
                let times = crowd.hearings.filter { $0.listener == listener && $0.speaker == speaker }.map(\.time)
                #expect(first.map { abs($0 - (times.min()! - max(crowd.starts[listener], crowd.starts[speaker]))) < 1e-9 } == true)
            }
        }
    }

    /// With the matcher's turns, once the room has formed no two frames overlap and everyone hears everyone.
    @Test func theMatchersTurnsKeepFramesApart() throws {
        var c = try #require(CrowdSweep.configuration(devices: 4, rules: "coordinated", seed: 3))
        c.listenProfiles = ["default"]
        let result = try CrowdSimulation(c).run()
        #expect(result.everyoneHeard && result.pairsFound == 12 && result.falseTokens == 0)
        // The first frame heard forms the room; its turns start within a second or so. Four members are a crowded
        // room: most slots carry room aliases (the short alias frame), a token at least every 3 s.
        let firstHeard = try #require(result.hearings.map(\.time).min())
        let late = result.transmissions.filter { $0.start > firstHeard + 1.5 }.sorted { $0.start < $1.start }
        #expect(late.count >= 4)
        for (a, b) in zip(late, late.dropFirst()) {
            #expect(b.start - a.start >= a.airtime, "frames at \(a.start) s and \(b.start) s overlap")
        }
        let aliasAirtime = Profile.standard.aliasAirtime, tokenAirtime = Profile.standard.airtime(payloadBytes: 9)
        #expect(late.contains { abs($0.airtime - aliasAirtime) < 0.01 } && result.transmissions.contains { abs($0.airtime - tokenAirtime) < 0.01 })
        // Once everyone heard everyone the room is quiet until hearings grow stale (5 s): far fewer frames than
        // the one a second each (some 40 here) that the sender's rules alone send in a quiet room.
        #expect(result.framesSent <= 24, "\(result.framesSent) frames")
    }

    @Test func theSameConfigurationGivesTheSameRoom() throws {
        let c = configuration(2, .crowd, seed: 11)
        let a = try CrowdSimulation(c).run(), b = try CrowdSimulation(c).run()
        #expect(a == b)
        #expect(a.framesSent > 0)
    }

    /// The link survey runs the simulation's room: the same paths and noise levels (its direct SNRs are the
    /// simulation's), and in a small room every pair decodes every kind of frame alone on the air; a room seen
    /// again gives the same counts.
    @Test func theLinkSurveyHearsEveryPairOfASmallRoomAlone() throws {
        let c = configuration(3, .crowd, seed: 7)
        let survey = try CrowdSweep.survey([c], repeats: 1)[0]
        #expect(survey.seed == 7 && survey.devices == 3 && survey.pairs == 6)
        #expect(survey.directSNR == (try CrowdSimulation(c).run().directSNR))
        // The devices listen for the default profile only: no robust frames.
        #expect(survey.decoded.keys.sorted() == ["alias", "token"])
        for kind in [CrowdLinkSurvey.Kind.token, .alias] {
            #expect(survey.neverDecoded(kind).isEmpty, "\(kind): \(survey.neverDecoded(kind))")
            #expect(survey.share(kind) == 1)
        }
        #expect(try CrowdLinkSurvey(c, repeats: 1).run(kinds: [.alias]).decoded == ["alias": survey.decoded["alias"]!])
    }
}
