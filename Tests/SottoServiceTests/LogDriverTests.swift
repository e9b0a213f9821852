@testable import SottoExchangeService
import Testing

/// The link of a node to the shared log, stepped without a database: which state each event leads to and
/// what the host is told to do.
@Suite struct LogDriverTests {
    static let grace = 10.0

    static func joined() -> LogDriver { LogDriver(shared: true, grace: grace, now: 0) }

    @Test func aNodeAloneStaysStandaloneWhateverHappens() {
        var driver = LogDriver(shared: false, grace: Self.grace, now: 0)
        #expect(driver.state == .standalone)
        #expect(driver.acceptsSessions)
        #expect(!driver.needsSnapshot)
        let step1 = driver.tick(now: 1_000)
        #expect(step1 == nil, "no log: nothing to lose")
        driver.lose()
        #expect(driver.state == .standalone)
        #expect(driver.acceptsSessions)
    }

    @Test func aJoiningNodeRestoresThenServes() {
        var driver = Self.joined()
        #expect(driver.state == .restoring)
        #expect(driver.needsSnapshot)
        #expect(driver.acceptsSessions, "opens wait in the log while the snapshot is read")
        let step2 = driver.appendSucceeded(now: 1)
        #expect(!step2, "restoring is no failure: nothing to announce")
        #expect(driver.state == .restoring)
        driver.snapshotRead()
        #expect(driver.state == .serving)
        #expect(!driver.needsSnapshot)
        driver.logTruncated()
        #expect(driver.state == .restoring, "fell behind a truncation: the newest snapshot again")
        driver.snapshotRead()
        #expect(driver.state == .serving)
    }

    @Test func failingAppendsDegradeThenLoseAfterTheGrace() {
        var driver = Self.joined()
        driver.snapshotRead()
        let step3 = driver.appendFailed(now: 2, error: "refused")
        #expect(step3 == .backOff)
        #expect(driver.state == .degraded(since: 2))
        #expect(driver.acceptsSessions, "clients wait through the grace")
        let step4 = driver.appendFailed(now: 12, error: "refused")
        #expect(step4 == .backOff, "exactly the grace: still waiting")
        #expect(driver.state == .degraded(since: 2), "the failures are counted from the first")
        let step5 = driver.appendFailed(now: 12.5, error: "refused")
        #expect(step5 == .loseDatabase("cannot append to the log for 10.0 s: refused"))
        #expect(driver.state == .lost)
        #expect(!driver.acceptsSessions)
        let step6 = driver.appendFailed(now: 13, error: "refused")
        #expect(step6 == .giveUp, "lost: the next heartbeat tries again")
        let step7 = driver.appendSucceeded(now: 20)
        #expect(step7, "the database answers again")
        #expect(driver.state == .serving)
        #expect(driver.lastAppend == 20)
    }

    @Test func anAppendThatGetsThroughEndsTheDegradation() {
        var driver = Self.joined()
        driver.snapshotRead()
        _ = driver.appendFailed(now: 1, error: "x")
        let step8 = driver.appendSucceeded(now: 3)
        #expect(step8)
        #expect(driver.state == .serving)
        let step9 = driver.appendFailed(now: 20, error: "x")
        #expect(step9 == .backOff, "a new degradation counts from its own start")
        #expect(driver.state == .degraded(since: 20))
    }

    @Test func aSnapshotDueWhileDegradedIsReadOnceBack() {
        var driver = Self.joined()
        _ = driver.appendFailed(now: 1, error: "x")
        #expect(driver.state == .degraded(since: 1))
        #expect(driver.needsSnapshot, "still to be read")
        _ = driver.appendSucceeded(now: 2)
        #expect(driver.state == .restoring, "back, but the snapshot was never read")
        driver.snapshotRead()
        _ = driver.appendFailed(now: 3, error: "x")
        driver.logTruncated()
        #expect(driver.needsSnapshot)
        driver.lose()
        #expect(driver.needsSnapshot)
        _ = driver.appendSucceeded(now: 4)
        #expect(driver.state == .restoring)
    }

    @Test func noAppendForTheGraceLosesTheDatabaseOnATick() {
        var driver = Self.joined()
        driver.snapshotRead()
        _ = driver.appendSucceeded(now: 5)
        let step10 = driver.tick(now: 15)
        #expect(step10 == nil)
        let step11 = driver.tick(now: 15.5)
        #expect(step11 == "no append got through to the log for 10.0 s")
        #expect(driver.state == .lost)
        let step12 = driver.tick(now: 100)
        #expect(step12 == nil, "already lost: cut off once")
    }

    @Test func anAbandonedAppendLosesTheDatabaseOrRenewsTheID() {
        var driver = Self.joined()
        driver.snapshotRead()
        let step13 = driver.appendAbandoned(empty: true)
        #expect(step13 == .loseDatabase("an append to the log got no answer within 10.0 s"))
        #expect(driver.state == .lost)
        let step14 = driver.appendAbandoned(empty: false)
        #expect(step14 == .renewNodeID, "the abandoned entry may land: a fresh id")
        let step15 = driver.appendAbandoned(empty: true)
        #expect(step15 == .nothing)
        #expect(driver.state == .lost)
    }

    @Test func declaredDeadWhileServingOrDegradedLoses() {
        var serving = Self.joined()
        serving.snapshotRead()
        serving.lose()
        #expect(serving.state == .lost)
        #expect(!serving.needsSnapshot)
        var degraded = Self.joined()
        degraded.snapshotRead()
        _ = degraded.appendFailed(now: 1, error: "x")
        degraded.lose()
        #expect(degraded.state == .lost)
    }
}
