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
            Every decoder reads the system's wisdom (\(FFTWisdom.systemPath)) and the file named by \
            \(FFTWisdom.environmentVariable), if set, before its first transform, and plans from them instead of \
            FFTW's estimates. Run once per machine: the wisdom already there is kept and reused, so to measure \
            again (another CPU), delete the file first; wisdom of another FFTW version is ignored. Results stay \
            the same from run to run, but move within float round-off from those of an untuned machine.
            """)

    @Option(name: .customLong("rate"), help: "Sample rate to tune for (Hz); repeat for several.")
    var rates: [Double] = [44_100, 48_000]
    @Option(name: [.customShort("o"), .customLong("out"), .customLong("output")],
            help: "Where to write the wisdom; - writes it to standard output (--output: the old spelling, kept for a release).")
    var output: String = FFTWisdom.systemPath

    func run() throws {
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
        Output.line("measured the decoder's transforms at \(rates) in \(fixed(summary.seconds, 1)) s; wisdom written to \(path)")
    }
}
