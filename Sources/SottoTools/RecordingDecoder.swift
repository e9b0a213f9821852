import SottoAudio
import SottoModem

/// Decodes a recording (a file in any format libsndfile reads, standard input as `-`, or headerless PCM of
/// a stated layout) block by block through the streaming decoder: memory stays flat for any length, and
/// frames are passed on as soon as they are found.
public enum RecordingDecoder {
    /// Input frames read per block.
    public static let blockFrames = 1 << 16

    /// The decoder could not be made for this recording (a rate the asked profile cannot carry).
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// A read error part-way through the recording, thrown after every frame decoded before it was passed on.
    public struct ReadFailure: Error, CustomStringConvertible {
        public let error: AudioFileError
        /// Audio read before the error (s).
        public let secondsRead: Double
        public var description: String { error.description }
    }

    /// What a decode found.
    public struct Summary: Sendable {
        /// Frames found.
        public var frames: Int
        /// Audio read (s): counted, not taken from the header.
        public var seconds: Double
        /// What the caller should warn of: the file is shorter than its header says.
        public var warnings: [String] = []
    }

    /// How far a decode has come, for a progress display.
    public struct Progress: Sendable {
        /// Audio read so far (s).
        public var seconds: Double
        /// The fraction read, 0...1, when the header announces a length.
        public var fraction: Double?
    }

    /// Decodes `path` (`-`: standard input), calling `onFrame` as frames are found and `onProgress` after
    /// each block. With several profiles, only those the rate can carry are searched (a 16 kHz file can only
    /// hold the audible profile); a single profile the rate cannot carry is an error. A read error part-way
    /// is thrown as ``ReadFailure`` after the frames decoded up to it have been passed to `onFrame`.
    @discardableResult
    public static func decode(path: String, raw: RawPCMFormat? = nil, profiles: [Profile], channel: ChannelSelection,
                              onProgress: (Progress) -> Void = { _ in }, onFrame: (DecodedFrame) -> Void) throws -> Summary {
        let reader = try AudioFileReader(path: path, channel: channel, raw: raw)
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
        // The announcement is a hint: the loop ends at the end of the data.
        let announced = reader.info.frames.map { max(1, $0) }
        func finish() {
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
            onProgress(Progress(seconds: Double(reader.framesRead) / reader.info.sampleRate,
                                fraction: announced.map { Double(min(reader.framesRead, $0)) / Double($0) }))
        }
        finish()
        return Summary(frames: count, seconds: Double(reader.framesRead) / reader.info.sampleRate,
                       warnings: reader.headerWarning.map { [$0] } ?? [])
    }
}
