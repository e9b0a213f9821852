import Foundation
import SottoDSP
import SottoModem
import SottoSupport

/// `sotto tune`: measures the decoder's FFT plans on this machine and keeps them as FFTW wisdom, which every
/// later decoder (of any program using Sotto on the machine) plans from instead of FFTW's estimates.
public enum TransformTuning {
    /// What a tuning run did.
    public struct Summary: Sendable {
        /// Where the wisdom went (nil: returned as `wisdom`, for standard output).
        public var path: String?
        /// The wisdom written (FFTW's text format).
        public var wisdom: String
        /// Wall-clock time of the measurements (s).
        public var seconds: Double
    }

    /// Measures the transforms of decoders at `sampleRates` (Hz; every profile set each rate carries) and
    /// writes the process's wisdom (the system's, read first, and the new measurements) to `path`, creating
    /// its directory; `path` "-" writes nothing (the caller prints `wisdom`).
    /// - Throws: `ToolError` for a rate no profile can use or a file that cannot be written.
    public static func tune(sampleRates: [Double], path: String) throws(ToolError) -> Summary {
        let start = Date()
        let wisdom: String
        do { wisdom = try StreamingDecoder.measureTransforms(sampleRates: sampleRates) } catch {
            throw ToolError("\(error)")
        }
        let seconds = Date().timeIntervalSince(start)
        guard path != "-" else { return Summary(path: nil, wisdom: wisdom, seconds: seconds) }
        do {
            // A symbolic link is followed and a device written through, never replaced by a regular file.
            let output = try OutputPath(path)
            let directory = URL(fileURLWithPath: output.target).deletingLastPathComponent()
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try output.write(Array(wisdom.utf8))
        } catch let error as OutputPathError {
            throw ToolError("cannot write the wisdom to \(path): \(error.reason) (the system's file needs root; or give -o FILE)")
        } catch {
            throw ToolError("cannot write the wisdom to \(path): \(error.localizedDescription) (the system's file needs root; or give -o FILE)")
        }
        return Summary(path: path, wisdom: wisdom, seconds: seconds)
    }
}
