import ArgumentParser
import SottoModem
import SottoTools

/// `sotto profiles`: the table of profiles.
struct Profiles: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "profiles", abstract: "List the waveform profiles with band, symbol time, bit rate and airtime.")

    @OptionGroup var format: FormatOption

    func validate() throws { try format.refuseHex("profiles") }

    func run() {
        if format.format == .json {
            for profile in Profile.all { Output.record(ProfileRecord(profile)) }
        } else {
            Output.line(ProfileTable.render())
        }
    }
}

/// The profiles table, shared by `sotto profiles` and the README.
enum ProfileTable {
    static func render() -> String {
        var lines = ["| profile | band (kHz) | tones | symbol (ms) | bit/s (8 B) | airtime 4 B (s) | 8 B (s) | 16 B (s) | use |",
                     "|---|---|---|---|---|---|---|---|---|"]
        for p in Profile.all {
            let band = "\(fixed(p.lowFrequency / 1000, 2))-\(fixed(p.highFrequency / 1000, 2))"
            let tones = p.subBands > 1 ? "\(p.subBands)x\(p.tonesPerSubBand) @ \(fixed(p.toneSpacing, 2)) Hz" : "\(p.tonesPerSubBand) @ \(fixed(p.toneSpacing, 1)) Hz"
            lines.append("| \(p.name) | \(band) | \(tones) | \(fixed(p.symbolTime * 1000, 2)) | \(fixed(p.netBitRate(payloadBytes: 8), 0)) | \(fixed(p.airtime(payloadBytes: 4), 3)) | \(fixed(p.airtime(payloadBytes: 8), 3)) | \(fixed(p.airtime(payloadBytes: 16), 3)) | \(p.summary) |")
        }
        return lines.joined(separator: "\n")
    }
}

/// Prints tables as Markdown, or their rows as JSON Lines records.
struct TablePrinter {
    let json: Bool
    /// The record of one row, for JSON.
    var record: (_ caption: String, _ columns: [String], _ cells: [String]) -> any JSONRecord
    private var caption = ""
    private var columns: [String] = []

    init(json: Bool, record: @escaping (_ caption: String, _ columns: [String], _ cells: [String]) -> any JSONRecord) {
        self.json = json
        self.record = record
    }

    mutating func table(_ caption: String, _ columns: [String]) {
        self.caption = caption
        self.columns = columns
        guard !json else { return }
        Output.line(caption)
        Output.line("| " + columns.joined(separator: " | ") + " |")
        Output.line("|" + String(repeating: "---|", count: columns.count))
    }

    /// Prints a row; `partial` marks the row under way of an interrupted sweep (JSON: `"partial":true`).
    func row(_ cells: [String], partial: Bool = false) {
        if json {
            var line = record(caption, columns, cells)
            if partial, var row = line as? SweepRowRecord { row.partial = true; line = row }
            Output.line(JSONLines.line(line))
        } else { Output.line("| " + cells.joined(separator: " | ") + " |") }
    }
}
