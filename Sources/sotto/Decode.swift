import ArgumentParser
import Foundation
import SottoAudio
import SottoModem

/// `sotto decode`: find every frame in recordings.
struct Decode: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Find and decode every frame in audio files (WAV, FLAC, AIFF, any rate and sample format).")

    enum Format: String, ExpressibleByArgument, CaseIterable { case text, json, hex }

    @Argument(help: "Audio files to decode.")
    var files: [String]
    @Option(help: "Output: text (one line per frame), json (one object per line), hex (token only).")
    var format: Format = .text
    @Option(help: "Profile to search for, or all.")
    var profile: ProfileSelection = ProfileSelection(Profile.all)
    @Option(help: "Channel of multi-channel files: an index from 0, or mix.")
    var channel: ChannelArgument = ChannelArgument(.mix)

    func validate() throws {
        if files.isEmpty { throw ValidationError("give at least one audio file") }
    }

    func run() throws {
        var failures: [String] = []
        for file in files {
            do {
                let frames = try FileDecoder.decode(path: file, profiles: profile.profiles, channel: channel.selection) { frame in
                    print(FrameOutput.line(frame, format: format, file: files.count > 1 ? file : nil))
                }
                if format == .text && frames.frames == 0 && standardErrorIsTerminal { printError("\(file): no frames found") }
            } catch {
                printError("error: \(file): \(error)")
                failures.append(file)
            }
        }
        if !failures.isEmpty { throw ExitCode(2) }
    }
}

/// Decodes a file block by block through the streaming decoder (bounded memory).
enum FileDecoder {
    /// Input frames read per block.
    static let blockFrames = 1 << 16

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// A read error part-way through the file, thrown after every frame decoded before it was reported.
    struct ReadFailure: Error, CustomStringConvertible {
        let error: AudioFileError
        /// Audio read before the error (s).
        let secondsRead: Double
        var description: String { error.description }
    }

    /// What a decode found.
    struct Summary {
        /// Frames found.
        var frames: Int
        /// Audio read (s): counted, not taken from the header.
        var seconds: Double
    }

    /// Decodes `path`, calling `onFrame` as frames are found. A read error part-way is thrown as
    /// ``ReadFailure`` after the frames decoded up to it have been passed to `onFrame`.
    @discardableResult
    static func decode(path: String, profiles: [Profile], channel: ChannelSelection,
                       onFrame: (DecodedFrame) -> Void) throws -> Summary {
        let reader = try AudioFileReader(path: path, channel: channel)
        // With several profiles, search for those the file's rate can carry (an 8 kHz file can only hold
        // the audible profile); a single profile the rate cannot carry is an error.
        var usable = profiles
        if profiles.count > 1 {
            usable = Profile.carried(atSampleRate: reader.info.sampleRate, among: profiles)
            if usable.isEmpty { usable = profiles }
        }
        let decoder: StreamingDecoder
        do { decoder = try StreamingDecoder(sampleRate: reader.info.sampleRate, profiles: usable) }
        catch { throw Failure(description: error.description) }
        var buffer = [Float](repeating: 0, count: blockFrames)
        var count = 0
        // Progress only when the header announces a length (a hint: the loop ends at the end of the data).
        let announcedFrames = reader.info.frames ?? 0
        let showProgress = standardErrorIsTerminal && announcedFrames > Int64(60 * reader.info.sampleRate)
        var lastPercent = -1
        func finish() {
            if showProgress { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            for frame in decoder.finish() { onFrame(frame); count += 1 }
        }
        while true {
            let n: Int
            do {
                n = try buffer.withUnsafeMutableBufferPointer { (block) throws(AudioFileError) -> Int in try reader.read(into: block) }
            } catch {
                finish()
                throw ReadFailure(error: error, secondsRead: Double(reader.framesRead) / reader.info.sampleRate)
            }
            if n == 0 { break }
            let frames = buffer.withUnsafeBufferPointer { decoder.process(UnsafeBufferPointer(rebasing: $0[0..<n])) }
            for frame in frames { onFrame(frame); count += 1 }
            if showProgress {
                let percent = Int(100 * min(decoder.sampleCount, announcedFrames) / announcedFrames)
                if percent != lastPercent { FileHandle.standardError.write(Data("\r\(path): \(percent)%".utf8)); lastPercent = percent }
            }
        }
        finish()
        return Summary(frames: count, seconds: Double(reader.framesRead) / reader.info.sampleRate)
    }
}

/// Formats decoded frames.
enum FrameOutput {
    struct JSONFrame: Encodable {
        var file: String?
        var token: String
        var text: String?
        var profile: String
        var start: Double
        var end: Double
        var snr: Double
        var level: Double
        var clockOffsetPPM: Double
        var correctedBits: Int
    }

    static func line(_ frame: DecodedFrame, format: Decode.Format, file: String?) -> String {
        switch format {
        case .hex:
            return frame.token.hex
        case .text:
            let prefix = file.map { "\($0): " } ?? ""
            let offset = frame.clockOffsetPPM >= 0 ? "+\(Int(frame.clockOffsetPPM))" : "\(Int(frame.clockOffsetPPM))"
            return "\(prefix)\(fixed(frame.startTime, 3)) s  \(frame.token.hex)\(printable(frame.token).map { "  \"\($0)\"" } ?? "")  profile \(frame.profile)  SNR \(fixed(frame.snr, 1)) dB  level \(fixed(frame.level, 1)) dBFS  offset \(offset) ppm  corrected \(frame.correctedBits)"
        case .json:
            let object = JSONFrame(file: file, token: frame.token.hex, text: printable(frame.token), profile: frame.profile,
                                   start: (frame.startTime * 1e6).rounded() / 1e6, end: (frame.endTime * 1e6).rounded() / 1e6,
                                   snr: frame.snr, level: frame.level, clockOffsetPPM: frame.clockOffsetPPM, correctedBits: frame.correctedBits)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return String(decoding: (try? encoder.encode(object)) ?? Data(), as: UTF8.self)
        }
    }

    /// The token as text when it is printable UTF-8.
    static func printable(_ token: [UInt8]) -> String? {
        guard let s = String(validating: token, as: UTF8.self),
              s.unicodeScalars.allSatisfy({ !$0.properties.isDefaultIgnorableCodePoint && ($0.value >= 0x20 && $0.value != 0x7F) }) else { return nil }
        return s
    }
}
