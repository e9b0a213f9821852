import Foundation
import Testing

/// One word, one meaning, from outside: -o/--out for every output, --profile a,b|all for receivers and
/// sweeps, the renamed options under their new names and their old spellings (kept with a deprecation
/// warning; both at once is a usage error).
struct VocabularyTests {
    @Test func everyOutputTakesDashO() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let sent = directory.appendingPathComponent("sent.wav").path
        let send = try Sotto.run(["send", "0x0102", "-o", sent], timeout: 30)
        #expect(send.status == 0 && FileManager.default.fileExists(atPath: sent), "\(send.stderr)")
        let heard = directory.appendingPathComponent("heard.wav").path
        let simulate = try Sotto.run(["simulate", sent, "-o", heard, "--snr", "30"], timeout: 30)
        #expect(simulate.status == 0 && FileManager.default.fileExists(atPath: heard), "\(simulate.stderr)")
        // The positional spelling still works; both at once, or neither, is a usage error.
        let positional = directory.appendingPathComponent("positional.wav").path
        #expect(try Sotto.run(["simulate", sent, positional], timeout: 30).status == 0)
        let both = try Sotto.run(["simulate", sent, positional, "-o", heard], timeout: 30)
        #expect(both.status == 64 && both.stderr.contains("give the output once"), "\(both.stderr)")
        let neither = try Sotto.run(["simulate", sent], timeout: 30)
        #expect(neither.status == 64 && neither.stderr.contains("-o/--out"), "\(neither.stderr)")
        let published = directory.appendingPathComponent("published.wav").path
        let publish = try Sotto.run(["publish", "--text", "hi", "--ttl", "2", "-o", published], timeout: 30)
        #expect(publish.status == 0 && FileManager.default.fileExists(atPath: published), "\(publish.stderr)")
        for command in [["tune"], ["make-fixtures"]] {
            #expect(try Sotto.run(command + ["--help"]).stdout.contains("-o, --out"), "\(command)")
        }
    }

    @Test func receiversTakeAListOfProfiles() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fast = directory.appendingPathComponent("fast.wav").path
        #expect(try Sotto.run(["send", "0x0a0b", "--profile", "fast", "-o", fast], timeout: 30).status == 0)
        let listed = try Sotto.run(["decode", fast, "--profile", "robust,fast", "--format", "hex"], timeout: 30)
        #expect(listed.status == 0 && listed.stdout == "0a0b\n", "\(listed.stdout) \(listed.stderr)")
        let other = try Sotto.run(["decode", fast, "--profile", "default,robust", "--format", "hex"], timeout: 30)
        #expect(other.status == 0 && other.stdout.isEmpty, "\(other.stdout) \(other.stderr)")
        let unknown = try Sotto.run(["decode", fast, "--profile", "fast,nope"], timeout: 30)
        #expect(unknown.status == 64, "\(unknown.stderr)")
        // Sweeps take --profile too (and --profiles, the old spelling): both parse.
        for spelling in ["--profile", "--profiles"] {
            let help = try Sotto.run(["bench", "sweep", "snr", spelling, "nope"], timeout: 30)
            #expect(help.status == 64 && help.stderr.contains("unknown profile 'nope' in --profile"), "\(spelling): \(help.stderr)")
        }
    }

    @Test func renamedRatesKeepTheirOldSpellingWithAWarning() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = "sqlite:" + directory.appendingPathComponent("exchange.sqlite").path
        #expect(try Sotto.run(["admin", "project", "create", "museum", "--store", store], timeout: 30).status == 0)
        let new = try Sotto.run(["admin", "key", "create", "museum", "--requests-per-second", "7", "--store", store], timeout: 30)
        #expect(new.status == 0 && !new.stderr.contains("deprecated"), "\(new.stderr)")
        let old = try Sotto.run(["admin", "key", "create", "museum", "--rate", "9", "--store", store], timeout: 30)
        #expect(old.status == 0, "\(old.stderr)")
        #expect(old.stderr.contains("warning: sotto admin key create --rate is deprecated: use --requests-per-second"), "\(old.stderr)")
        let listed = try Sotto.run(["admin", "key", "list", "--store", store], timeout: 30)
        #expect(listed.stdout.contains("7.0/s") && listed.stdout.contains("9.0/s"), "\(listed.stdout)")
        let both = try Sotto.run(["admin", "key", "create", "museum", "--rate", "9", "--requests-per-second", "7", "--store", store], timeout: 30)
        #expect(both.status == 64, "\(both.stderr)")
        // load: checked before it connects anywhere.
        let load = try Sotto.run(["load", "--server", "127.0.0.1:1", "--api-key", "k", "--rate", "0"], timeout: 30)
        #expect(load.status == 64 && load.stderr.contains("deprecated: use --sightings-per-second") && load.stderr.contains("--rate must be"),
                "\(load.stderr)")
        let loadNew = try Sotto.run(["load", "--server", "127.0.0.1:1", "--api-key", "k", "--sightings-per-second", "0"], timeout: 30)
        #expect(loadNew.status == 64 && loadNew.stderr.contains("--sightings-per-second must be") && !loadNew.stderr.contains("deprecated"),
                "\(loadNew.stderr)")
        // simulate --volume (m^3) is --room-volume.
        let sent = directory.appendingPathComponent("sent.wav").path
        #expect(try Sotto.run(["send", "0x01", "-o", sent], timeout: 30).status == 0)
        let room = try Sotto.run(["simulate", sent, "-o", "-", "--rt60", "0.3", "--volume", "80"], timeout: 30)
        #expect(room.status == 0 && room.stderr.contains("sotto simulate --volume is deprecated: use --room-volume"), "\(room.stderr)")
    }
}
