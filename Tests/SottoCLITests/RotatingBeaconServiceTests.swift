import Foundation
import Testing

/// Issue 29 from outside: a rotating beacon registered with `sotto admin`, its key file given to `sotto beacon`,
/// resolved by a running `sotto serve` from a recording reported by `sotto subscribe --server --input`.
@Suite(.serialized) struct RotatingBeaconServiceTests {
    func admin(_ arguments: [String], store: String) throws -> String {
        let result = try Sotto.run(["admin"] + arguments + ["--store", store], timeout: 30)
        #expect(result.status == 0, "\(arguments): \(result.stderr)")
        return result.stdout.split(separator: "\n").first.map(String.init) ?? ""
    }

    /// Found events of a `subscribe --beacons` reporting `recording` to the service as heard now.
    func found(_ recording: String, address: String, key: String) throws -> [String] {
        let result = try Sotto.run(["subscribe", "--server", address, "--api-key", key, "--beacons", "--input", recording,
                                    "--format", "json", "--lost-timeout", "1", "--ttl", "20"], timeout: 40)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init).filter { $0.contains("\"found\"") }
    }

    @Test(.timeLimit(.minutes(3))) func aRotatingBeaconIsResolvedByTheServiceOnUnixTime() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        let keyFile = directory.appendingPathComponent("beacon.key").path
        _ = try admin(["project", "create", "museum"], store: store)
        _ = try admin(["project", "create", "elsewhere"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)
        let otherKey = try admin(["key", "create", "elsewhere"], store: store)
        _ = try admin(["beacon", "register", "museum", "0x5077000000000029", "--rotating", "10", "--key-out", keyFile], store: store)
        _ = try admin(["beacon", "attach", "0x5077000000000029", "--namespace", "museum", "--type", "room", "--text", "Gallery 29"], store: store)

        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")
        // The beacon starts after the service: its IDs are those of Unix time, whatever the service's uptime.
        try await Task.sleep(for: .seconds(2))

        let now = Date().timeIntervalSince1970
        let live = directory.appendingPathComponent("live.wav").path
        let beacon = try Sotto.run(["beacon", "--key-file", keyFile, "--clock", String(now), "--duration", "4", "--interval", "1",
                                    "--jitter", "0", "--out", live])
        #expect(beacon.status == 0, "\(beacon.stderr)")
        let roomHex = Array("Gallery 29".utf8).map { String(format: "%02x", $0) }.joined()
        let found = try found(live, address: address, key: key)
        #expect(found.contains { $0.contains(roomHex) } && found.contains { $0.contains("5077000000000029") }, "\(found)")

        // Another project hears the same recording: nothing of a private beacon, not even its ID.
        #expect(try self.found(live, address: address, key: otherKey).isEmpty)

        // A recording made 5 minutes ago (or by a beacon whose clock is 5 minutes behind) and replayed now.
        let old = directory.appendingPathComponent("old.wav").path
        #expect(try Sotto.run(["beacon", "--key-file", keyFile, "--clock", String(now - 300), "--duration", "4", "--interval", "1",
                               "--jitter", "0", "--out", old]).status == 0)
        let replayed = try self.found(old, address: address, key: key)
        #expect(!replayed.contains { $0.contains(roomHex) || $0.contains("5077000000000029") }, "\(replayed)")
        await serve.interrupt()
    }

    /// The beacon started minutes, then hours after `sotto serve`: the service's clocks are moved forward while
    /// it runs (its hidden `--time-shift-file`, no waiting), and `sotto beacon --clock` plays the IDs of that
    /// later Unix time. Found 7 minutes and 3 hours after the start, with the beacon's clock 50 s behind at
    /// 3 hours; not with it 75 s behind (beyond the 60 s window and the 10 s period).
    @Test(.timeLimit(.minutes(4))) func aBeaconStartedMinutesOrHoursAfterSottoServeResolves() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        let keyFile = directory.appendingPathComponent("beacon.key").path
        _ = try admin(["project", "create", "museum"], store: store)
        let key = try admin(["key", "create", "museum"], store: store)
        _ = try admin(["beacon", "register", "museum", "0x5077000000000031", "--rotating", "10", "--key-out", keyFile], store: store)
        _ = try admin(["beacon", "attach", "0x5077000000000031", "--namespace", "museum", "--type", "room", "--text", "Gallery 31"], store: store)
        let shiftFile = directory.appendingPathComponent("shift")
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", store, "--time-shift-file", shiftFile.path])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")
        let roomHex = Array("Gallery 31".utf8).map { String(format: "%02x", $0) }.joined()

        for (shift, skew, resolves) in [(420.0, 0.0, true), (10_817, 0, true), (10_817, -50, true), (10_817, -75, false)] {
            try Data(String(shift).utf8).write(to: shiftFile)
            let moved = "clocks moved forward by \(String(format: "%.1f", shift)) s"
            let deadline = Date(timeIntervalSinceNow: 20)
            while !serve.standardError.contains(moved) && Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
            try #require(serve.standardError.contains(moved), "\(serve.standardError)")
            let recording = directory.appendingPathComponent("beacon-\(Int(shift))\(Int(skew)).wav").path
            let beacon = try Sotto.run(["beacon", "--key-file", keyFile, "--clock", String(Date().timeIntervalSince1970 + shift + skew),
                                        "--duration", "4", "--interval", "1", "--jitter", "0", "--out", recording])
            #expect(beacon.status == 0, "\(beacon.stderr)")
            let events = try found(recording, address: address, key: key)
            #expect(events.contains { $0.contains(roomHex) } == resolves, "\(shift) s after the start, beacon \(skew) s off: \(events)")
        }
        await serve.interrupt()
    }
}
