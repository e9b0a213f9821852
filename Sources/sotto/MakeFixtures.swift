import ArgumentParser
import SottoAudio
import SottoTools

/// `sotto make-fixtures`: writes the fixture recordings and their manifest (used by scripts/make-fixtures).
struct MakeFixtures: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-fixtures",
        abstract: "Generate the fixture recordings and manifest (reproducible: fixed seeds).",
        shouldDisplay: false)

    @Option(name: [.customShort("o"), .long], help: "Output directory.") var out: String = "Fixtures"
    @Option(help: "Directory of measured impulse responses and noise recordings (rir_*.wav, noise_*.wav).") var data: String = "../shared/data"
    @Option(help: "A speech recording (e.g. from espeak-ng) for the interference fixtures.") var speech: String
    @OptionGroup var progress: ProgressOptions

    func run() throws {
        progress.apply()
        do {
            var generator = FixtureGenerator(directory: out, dataDirectory: data, speech: try ChannelFile.readWhole(speech, tool: "make-fixtures"))
            generator.onFile = { ProgressLine.shared.update("wrote \($0)") }
            try generator.generateAll()
            ProgressLine.shared.clear()
            printError("wrote \(generator.manifest.fixtures.count) fixtures and \(out)/manifest.json")
        } catch {
            throw CommandError("\(error)")
        }
    }
}
