import Foundation
import Testing

/// `sotto tune` writes the user's wisdom file by default (it wrote /etc/fftw/wisdomf, as root without a word),
/// says where, and decoders read that file; the system's file only with --system (issue 33).
struct TuneDestinationTests {
    @Test(.timeLimit(.minutes(3))) func tuneWritesTheUsersFileByDefault() throws {
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let system = "/etc/fftw/wisdomf"
        let systemBefore = try? FileManager.default.attributesOfItem(atPath: system)[.modificationDate] as? Date
        // Empty values are as unset: the default under HOME.
        let environment = ["HOME": home.path, "XDG_CACHE_HOME": "", "SOTTO_FFTW_WISDOM": ""]
        let user = home.appendingPathComponent(".cache/sotto/fftw-wisdomf").path

        let tune = try Sotto.run(["tune", "--rate", "48000"], environment: environment, timeout: 120)
        #expect(tune.status == 0, "\(tune.stderr)")
        #expect(tune.stdout.contains("wisdom written to \(user) (your wisdom file, read by every decoder you run)"), "\(tune.stdout)")
        let text = try String(contentsOfFile: user, encoding: .utf8)
        #expect(text.hasPrefix("(fftw-3") && text.contains("fftwf_wisdom"), "\(text.prefix(200))")
        let after = try? FileManager.default.attributesOfItem(atPath: system)[.modificationDate] as? Date
        #expect(after == systemBefore, "the system's wisdom file was written")

        // A later process reads the user's file without being told: all its entries are in that process's wisdom.
        let read = try Sotto.run(["tune", "--rate", "48000", "-o", "-"], environment: environment, timeout: 120)
        #expect(read.status == 0, "\(read.stderr)")
        let entries = Set(text.split(separator: "\n").map(String.init))
        #expect(entries.isSubset(of: Set(read.stdout.split(separator: "\n").map(String.init))))

        // --system is the system's file and does not go with -o.
        let help = try Sotto.run(["tune", "--help"])
        #expect(help.stdout.contains("--system") && help.stdout.contains("~/.cache/sotto/fftw-wisdomf"), "\(help.stdout)")
        let both = try Sotto.run(["tune", "--system", "-o", user], environment: environment)
        #expect(both.status == 64 && both.stderr.contains("--system"), "\(both.stderr)")
    }

    /// `--system` writes the system's file, /etc/fftw/wisdomf, and says whose it is: run as root (as CI runs) in a
    /// mount namespace of the test's own whose /etc is a copy, so that the machine's /etc is never touched.
    @Test(.timeLimit(.minutes(3)), .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare"),
                                            "needs root and unshare (a private mount namespace)"))
    func tuneWritesTheSystemsFileWithSystem() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let systemBefore = try? FileManager.default.attributesOfItem(atPath: "/etc/fftw/wisdomf")[.modificationDate] as? Date
        let etc = dir.appendingPathComponent("etc").path
        let copy = Process()
        copy.executableURL = URL(fileURLWithPath: "/bin/cp")
        copy.arguments = ["-a", "/etc", etc]
        try copy.run()
        copy.waitUntilExit()
        try #require(copy.terminationStatus == 0)
        try? FileManager.default.removeItem(atPath: etc + "/fftw/wisdomf")
        let script = "mount --bind \"$1\" /etc && exec \"$2\" tune --system --rate 48000"
        let system = try Sotto.run(["-c", script, "sh", etc, Sotto.executable.path], timeout: 120,
                                   launcher: "/usr/bin/unshare", prefix: ["--mount", "--propagation", "private", "/bin/sh"])
        #expect(system.status == 0 && system.stdout.contains("wisdom written to /etc/fftw/wisdomf (the system's wisdom file, read by every user's decoders)"),
                "\(system.stdout) \(system.stderr)")
        let written = try? String(contentsOfFile: etc + "/fftw/wisdomf", encoding: .utf8)
        #expect(written?.hasPrefix("(fftw-3") == true && written?.contains("fftwf_wisdom") == true, "written to the namespace's /etc (the copy)")
        #expect((try? FileManager.default.attributesOfItem(atPath: "/etc/fftw/wisdomf")[.modificationDate] as? Date) == systemBefore,
                "the machine's /etc is untouched")
    }
}
