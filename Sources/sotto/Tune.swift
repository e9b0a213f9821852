import ArgumentParser
import Foundation
import SottoSupport
import SottoDSP
import SottoTools

/// `sotto tune`: measures this machine's fastest FFT plans for the decoder and saves them as FFTW wisdom.
struct Tune: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tune",
        abstract: "Measure the decoder's FFT plans on this machine and save them as FFTW wisdom (faster decoding).",
        discussion: """
            Every decoder reads the system's wisdom (\(FFTWisdom.systemPath)) and then the user's \
            ($\(FFTWisdom.environmentVariable) when set, else $XDG_CACHE_HOME/sotto/fftw-wisdomf, by default \
            ~/.cache/sotto/fftw-wisdomf) before its first transform, and plans from them instead of FFTW's \
            estimates. tune writes the user's file unless told otherwise: --system writes the system's file \
            instead (as root; every user's decoders read it), -o another file. Run once per machine: the wisdom \
            already there is kept and reused, so to measure again (another CPU), delete the file first; wisdom \
            of another FFTW version is ignored. Results stay the same from run to run, but move within float \
            round-off from those of an untuned machine.
            """)

    @Option(name: .customLong("rate"), help: "Sample rate to tune for (Hz); repeat for several.")
    var rates: [Double] = [44_100, 48_000]
    @Option(name: [.customShort("o"), .customLong("out"), .customLong("output")],
            help: "Where to write the wisdom (default: the user's file, see above); - writes it to standard output (--output: the old spelling, kept for a release).")
    var out: String?
    @Flag(help: "Write the system's wisdom file, \(FFTWisdom.systemPath), read by every user's decoders (as root), instead of the user's.")
    var system = false

    func validate() throws {
        if system && out != nil { throw ValidationError("--system writes \(FFTWisdom.systemPath): give either --system or -o") }
    }

    /// Where the wisdom goes: -o, the system's file with --system, else the user's.
    func destination() throws -> String {
        if let out { return out }
        if system { return FFTWisdom.systemPath }
        guard let user = FFTWisdom.userPath() else {
            throw CommandError("no home directory to keep the user's wisdom in (HOME is not set): give -o FILE or --system")
        }
        return user
    }

    func run() throws {
        let output = try destination()
        // Before seconds of measurements: the wisdom's path must be writable (a symlink is followed, a device
        // written through). Its directory is made when missing, as for the system's path.
        if output != "-" {
            do {
                let path = try OutputPath(output)
                var isDirectory: ObjCBool = false
                let directory = (path.target as NSString).deletingLastPathComponent
                if directory.isEmpty || FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) { try path.checkWritable() }
            } catch { throw CommandError(error.description) }
        }
        let summary = try TransformTuning.tune(sampleRates: rates, path: output)
        guard let path = summary.path else {
            Output.line(summary.wisdom)
            return
        }
        let rates = self.rates.map { fixed($0, 0) + " Hz" }.joined(separator: ", ")
        let whose = system ? "the system's wisdom file, read by every user's decoders" : out == nil ? "your wisdom file, read by every decoder you run" : nil
        Output.line("measured the decoder's transforms at \(rates) in \(fixed(summary.seconds, 1)) s; wisdom written to \(path)\(whose.map { " (\($0))" } ?? "")")
    }
}
