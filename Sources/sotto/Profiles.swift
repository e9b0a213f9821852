import ArgumentParser
import SottoModem

/// `sotto profiles`: the table of profiles.
struct Profiles: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the waveform profiles with band, symbol time, bit rate and airtime.")

    func run() {
        print(ProfileTable.render())
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

/// `value` with exactly `decimals` decimals.
func fixed(_ value: Double, _ decimals: Int) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    var rounded = (value * scale).rounded() / scale
    if rounded == 0 { rounded = 0 }  // never print a negative zero
    if decimals == 0 { return String(Int(rounded)) }
    var s = String(rounded)
    if let dot = s.firstIndex(of: ".") {
        let have = s.distance(from: dot, to: s.endIndex) - 1
        if have < decimals { s += String(repeating: "0", count: decimals - have) }
    }
    return s
}
