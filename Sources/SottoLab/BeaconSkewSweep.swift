import SottoTools
import SottoChannel
import SottoExchange
import SottoExchangeCore

extension SweepRunner {
    /// The skew sweep: a rotating beacon and the matcher with clocks `skew` s apart (0 to twice
    /// `BeaconRotation.clockSkewWindow`, half of the trials each way), at a random Unix time of a day; the
    /// share of heard IDs that resolve to the beacon, through `MatcherCore`, per rotation period.
    mutating func sweepSkew() throws {
        let window = BeaconRotation.clockSkewWindow
        let skews: [Double] = [0, 15, 30, 45, 55, 60, 65, 70, 75, 90, 105, 120]
        let periods: [Double] = [5, 60, 300, 900]
        output.table("Rotating beacons: IDs heard that resolve to their beacon when its clock and the matcher's differ by the skew (either way), clock-skew window \(fixed(window, 0)) s, \(trials) IDs per point at random times of a day, through the matcher core.",
                     ["period (s)"] + skews.map { "\(fixed($0, 0)) s" })
        let stable: [UInt8] = [0xE1, 0xD0, 0, 0, 0, 0, 0, 29]
        let raw = Message(delivered: ExchangeLimits.reservedNamespace, type: ExchangeLimits.beaconIDType, content: stable)
        let filter = try MessageFilter([.beaconIDs])
        for period in periods {
            let rotation = try BeaconRotation(key: BeaconIdentityKey.generate(), period: period)
            var cells: [String] = []
            for skew in skews {
                output.status("period \(fixed(period, 0)) s, skew \(fixed(skew, 0)) s")
                var resolved = 0
                for trial in 0..<trials {
                    let beaconTime = 1_800_000_000 + random.uniform() * 86_400
                    let matcherTime = beaconTime + (trial % 2 == 0 ? skew : -skew)
                    var core = MatcherCore(generator: SeededRandom(seed: UInt64(trial) &+ 1))
                    let s = SessionID("S")
                    _ = core.handle(.openSession(s, appID: "museum", broadcasts: false), now: 0, unixTime: matcherTime)
                    _ = core.handle(.registerBeacon(id: stable, appID: "museum", attachments: [], publicVisibility: false, rotation: rotation),
                                    now: 0, unixTime: matcherTime)
                    _ = core.handle(.subscribe(s, OperationID(1), filter, .default, lostTimeout: 10), now: 0, unixTime: matcherTime)
                    let heard = rotation.id(atUnixTime: beaconTime, length: stable.count)
                    let events = core.handle(.observe(s, .beacon(heard), snr: 20, level: -30), now: 1, unixTime: matcherTime)
                    if events.contains(.found(s, OperationID(1), raw)) { resolved += 1 }
                }
                cells.append("\(fixed(100 * Double(resolved) / Double(max(1, trials)), 1))%")
            }
            output.row([fixed(period, 0)] + cells)
        }
    }
}
