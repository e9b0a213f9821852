import ArgumentParser
import Foundation
import SottoAudio
import SottoModem
import SottoTools

/// The receiver's options shared by `decode` and `listen`.
struct ReceiverOptions: ParsableArguments {
    @Option(help: "Profiles to search for (comma-separated: default,fast), or all.")
    var profile: ProfileSelection = ProfileSelection(Profile.all)
}

/// `sotto decode`: find every frame in recordings.
struct Decode: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode",
        abstract: "Find and decode every frame in recordings (any format libsndfile reads, any rate; - reads standard input).",
        discussion: """
            Frames are printed as they are found. Headerless PCM (arecord -t raw) is read with --rate, --encoding \
            and --channels, e.g. arecord -f S16_LE -r 48000 -t raw | sotto decode - --rate 48000.
            """)

    @Argument(help: "Recordings to decode; - reads standard input.")
    var files: [String]
    @OptionGroup var format: FormatOption
    @OptionGroup var receiver: ReceiverOptions
    @Option(help: "Channel of multi-channel files: an index from 0, or mix.")
    var channel: ChannelArgument = ChannelArgument(.mix)
    @OptionGroup(title: "Raw input") var raw: RawInputOptions
    @OptionGroup var progress: ProgressOptions

    func validate() throws {
        if files.isEmpty { throw ValidationError("give at least one recording (- for standard input)") }
        if files.filter({ $0 == "-" }).count > 1 { throw ValidationError("standard input (-) can be read once") }
    }

    func run() throws {
        progress.apply()
        var failures: [String] = []
        var misused: [String] = []
        let named = files.count > 1
        for file in files {
            do {
                let label = file == "-" ? "standard input" : file
                let summary = try RecordingDecoder.decode(path: file, raw: raw.format, profiles: receiver.profile.profiles, channel: channel.selection,
                                                          onProgress: ProgressLine.shared.decoding(label)) { frame in
                    Output.line(FrameText.line(frame, format: format.format, file: named ? file : nil))
                }
                ProgressLine.shared.clear()
                for warning in summary.warnings { printError("warning: \(label): \(warning)") }
                if format.format == .text && summary.frames == 0 && standardErrorIsTerminal { printError("\(label): no frames found") }
            } catch {
                ProgressLine.shared.clear()
                let label = file == "-" ? "standard input" : file
                // The reader's messages name the file already: said once, not "x.wav: cannot open x.wav".
                let message = "\(error)"
                printError("error: \(message.contains(label) ? message : "\(label): \(message)")")
                if case .rawLayoutForHeader? = error as? AudioFileError { misused.append(file) } else { failures.append(file) }
            }
        }
        // A headerless layout given for a file with a header: options that do not go together (usage).
        if !misused.isEmpty && failures.isEmpty { throw ExitCode(ExitStatus.usage.rawValue) }
        if !failures.isEmpty || !misused.isEmpty { throw ExitCode(ExitStatus.failure.rawValue) }
    }
}

/// A decoded frame as a line of text, JSON or hex.
enum FrameText {
    static func line(_ frame: DecodedFrame, format: OutputFormat, file: String?) -> String {
        switch format {
        case .hex:
            return frame.token.hex
        case .text:
            let prefix = file.map { "\($0): " } ?? ""
            let offset = frame.clockOffsetPPM >= 0 ? "+\(Int(frame.clockOffsetPPM))" : "\(Int(frame.clockOffsetPPM))"
            return "\(prefix)\(fixed(frame.startTime, 3)) s  \(frame.token.hex)\(JSONLines.printable(frame.token).map { "  \"\($0)\"" } ?? "")  profile \(frame.profile)  SNR \(fixed(frame.snr, 1)) dB  level \(fixed(frame.level, 1)) dBFS  offset \(offset) ppm  corrected \(frame.correctedBits)"
        case .json:
            return JSONLines.line(FrameRecord(frame, file: file))
        }
    }
}
