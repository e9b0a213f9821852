import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeRadio
import SottoTools
import Testing

/// Issue 29, low-power scanning for beacon subscriptions (the seeds' `lowPowerPreferred`): `sotto subscribe
/// --beacons --low-power` listens duty-cycled and still finds a beacon; the duty cycle itself; bad options.
@Suite(.serialized) struct LowPowerScanTests {
    @Test func theDutyCycleListensAtTheStartOfEachPeriod() throws {
        let cycle = try ScanDutyCycle(listen: 2, period: 5)
        #expect([0, 1.9, 5, 6.5, 100.1].allSatisfy { cycle.listens(at: $0) })
        #expect(![2, 4.99, 7.2, 104].contains { cycle.listens(at: $0) })
        #expect(cycle.dutyFraction == 0.4 && cycle.longestAddedLatency == 3)
        // A find survives the closed part of a period: the lost timeout covers a period and a window.
        #expect(ExchangeSession.lowPowerLostTimeout(1, scan: cycle) == 8)
        #expect(ExchangeSession.lowPowerLostTimeout(30, scan: cycle) == 30)
        #expect(ExchangeSession.lowPowerLostTimeout(1, scan: try ScanDutyCycle(listen: 40, period: 59)) == ExchangeLimits.lostTimeoutRange.upperBound)
        for (listen, period) in [(0.0, 5.0), (5, 5), (6, 5), (-1, 5), (1, 60), (.nan, 5), (1, .infinity)] {
            #expect(throws: InvalidScanDutyCycle.self, "\(listen)/\(period)") { try ScanDutyCycle(listen: listen, period: period) }
        }
        #expect(ScanDutyCycle.lowPower.listen == 3 && ScanDutyCycle.lowPower.period == 10)
    }

    @Test func badLowPowerAndThresholdOptionsAreUsageErrors() throws {
        let server = ["--server", "127.0.0.1:9", "--api-key", "k"]
        for arguments in [["subscribe", "--low-power"] + server,
                          ["subscribe", "--beacons", "--scan-listen", "2"] + server,
                          ["subscribe", "--beacons", "--low-power", "--scan-listen", "5", "--scan-every", "5"] + server,
                          ["subscribe", "--beacons", "--low-power", "--scan-every", "90"] + server,
                          ["subscribe", "--beacons", "--low-power", "--scan-listen", "nan"] + server,
                          ["subscribe", "--beacons", "--low-power", "--input", "x.wav"] + server,
                          ["subscribe", "--beacons", "--low-power", "--daemon"] + server,
                          ["serve", "--listen", "127.0.0.1:0", "--earshot-snr", "61"],
                          ["serve", "--listen", "127.0.0.1:0", "--earshot-snr", "-1"],
                          ["serve", "--listen", "127.0.0.1:0", "--earshot-snr", "nan"]] {
            let result = try Sotto.run(arguments, timeout: 30)
            #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("low-power") || result.stderr.contains("scan") || result.stderr.contains("earshot-snr"),
                    "\(arguments): \(result.stderr)")
        }
        let help = try Sotto.run(["serve", "--help"], timeout: 30)
        #expect(help.stdout.contains("--earshot-snr") && help.stdout.contains("(default: 30"), "\(help.stdout)")
    }

    /// A beacon sounds in the room all along (the paced test PCM reads it at the wall-clock position at each
    /// open, as a microphone hears a room that went on while it was closed); the subscriber listens 2 s of
    /// every 5 s, still finds the beacon's attachment through `sotto serve`, and opens its microphone once per
    /// window, not once.
    @Test(.timeLimit(.minutes(3))) func aLowPowerBeaconSubscriptionStillFindsTheBeacon() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        func admin(_ arguments: [String]) throws -> String {
            let result = try Sotto.run(["admin"] + arguments + ["--store", store], timeout: 30)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return result.stdout.split(separator: "\n").first.map(String.init) ?? ""
        }
        _ = try admin(["project", "create", "museum"])
        let key = try admin(["key", "create", "museum"])
        _ = try admin(["beacon", "register", "museum", "0x5077000000000031"])
        _ = try admin(["beacon", "attach", "0x5077000000000031", "--namespace", "museum", "--type", "room", "--text", "Gallery 31"])
        let serve = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        let address = try #require(listening.map { String($0.dropFirst("listening on ".count)) }, "\(serve.standardError)")

        let room = directory.appendingPathComponent("room.raw"), clock = directory.appendingPathComponent("t0")
        let opens = directory.appendingPathComponent("opens")
        let beacon = try Sotto.run(["beacon", "0x5077000000000031", "--duration", "90", "--interval", "1", "--jitter", "0", "--out", room.path],
                                   timeout: 120)
        #expect(beacon.status == 0, "\(beacon.stderr)")
        let plugin = FilePluginRig.faultPlugin.path
        var asoundrc = "pcm_type.sottofault { lib \"\(plugin)\" }\n"
        asoundrc += "pcm.lp_microphone { type sottofault; rate 48000; infile \"\(room.path)\"; clock \"\(clock.path)\"; opens \"\(opens.path)\" }\n"
        asoundrc += "pcm.lp_speaker { type sottofault; rate 48000; outfile \"\(directory.path)/speaker.raw\" }\n"
        let configuration = directory.appendingPathComponent("asoundrc")
        try Data(asoundrc.utf8).write(to: configuration)
        #expect(FileManager.default.createFile(atPath: clock.path, contents: Data()))

        let subscriber = try BackgroundSotto(["subscribe", "--server", address, "--api-key", key, "--beacons", "--low-power",
                                              "--scan-listen", "2", "--scan-every", "5", "--device", "lp_speaker",
                                              "--capture-device", "lp_microphone", "--format", "json", "--ttl", "17"],
                                             environment: ["ALSA_CONFIG_PATH": configuration.path])
        defer { subscriber.process.terminate() }
        let roomHex = Array("Gallery 31".utf8).map { String(format: "%02x", $0) }.joined()
        let found = await subscriber.line(timeout: 60) { $0.contains("\"found\"") && $0.contains(roomHex) }
        #expect(found != nil, "\(subscriber.output) \(subscriber.standardError)")
        // It ends at its TTL by itself.
        let deadline = Date(timeIntervalSinceNow: 60)
        while subscriber.process.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(!subscriber.process.isRunning && subscriber.process.terminationStatus == 0, "\(subscriber.standardError)")
        // Windows at 0, 5, 10 and 15 s: at least three opens, never two within a window's closed part.
        let times = String(decoding: (try? Data(contentsOf: opens)) ?? Data(), as: UTF8.self).split(separator: "\n").compactMap { Double($0) }
        #expect(times.count >= 3 && times.count <= 4, "\(times)")
        #expect(zip(times, times.dropFirst()).allSatisfy { $1 - $0 > 2.5 }, "\(times)")
        await serve.interrupt()
    }
}
