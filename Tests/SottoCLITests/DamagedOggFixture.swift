import Foundation
import Testing

/// An Ogg recording of six frames 1.7 s apart and a copy with one body byte flipped in the first page that starts
/// after its first quarter (so that page's checksum fails), for the damaged-input tests.
struct DamagedOggFixture {
    /// The intact file, the damaged copy (paths), and the damaged copy's bytes.
    let reference: String, damaged: String, damagedBytes: [UInt8]

    /// Writes both files into `dir`.
    init(in dir: URL) throws {
        reference = dir.appendingPathComponent("ref.ogg").path
        damaged = dir.appendingPathComponent("damaged.ogg").path
        let sent = try Sotto.run(["send", "0x0123456789abcdef", "--repeat", "6", "--interval", "1.7", "--jitter", "0", "--seed", "2", "--out", reference], timeout: 50)
        try #require(sent.status == 0, "\(sent.stderr)")
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: reference)))
        let capture = Array("OggS".utf8)
        let page = try #require((bytes.count / 4..<(bytes.count - 200)).first { bytes[$0..<($0 + 4)].elementsEqual(capture) })
        bytes[page + 27 + Int(bytes[page + 26]) + 40] ^= 0x10
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        damagedBytes = bytes
    }
}

/// Start times (s) of the frames `decode`'s text output lists (the first column).
func decodedFrameTimes(_ text: String) -> [Double] {
    text.split(separator: "\n").compactMap { line in line.split(separator: " ").first.flatMap { Double($0) } }
}
