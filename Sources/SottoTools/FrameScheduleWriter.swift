import SottoChannel
import SottoAudio
import SottoModem
import SottoSupport

/// Writes frames on a schedule into an audio file: exactly what a transmitter would play, silence between
/// the frames, block by block (flat memory for any length; a pipe gets it as it is made where the format
/// allows).
public enum FrameScheduleWriter {
    /// A frame could not be modulated, or the output is too long for its format.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The longest audio written (s), in every format and to pipes alike: a day, the longest --ttl. WAV and
    /// AIFF hold less at high rates (4 GiB of samples: 12.4 h of 16-bit mono at 48 kHz).
    public static let longestDuration: Double = 86_400

    /// Why `duration` seconds cannot be written to `path` in `format` at `sampleRate` (Hz), or nil when it can:
    /// beyond ``longestDuration``, or beyond what the format's sizes can describe.
    public static func lengthProblem(duration: Double, path: String, format: AudioFileFormat, sampleRate: Double) -> String? {
        guard duration.isFinite, duration <= longestDuration else {
            return "\(path): \(fixed(duration, 0)) s of audio asked for; an output holds at most \(Int(longestDuration)) s (24 h) in any format"
        }
        if let longest = format.maximumDuration(sampleRate: sampleRate), duration > longest {
            return "\(path): a \(format.rawValue) file holds at most \(Int(longest)) s at \(Int(sampleRate)) Hz: write FLAC (.flac) for longer"
        }
        return nil
    }

    /// Writes `duration` seconds at `sampleRate` (Hz) to `path` (`-`: standard output) in `format`: the frame
    /// `frameAt(t)` at each start time `t` (s, ascending) of `times` whose frame ends within the duration.
    /// Returns the number of frames written. A `stop` set (SIGINT) ends the write, leaving no file behind.
    /// - Throws: ``Failure`` for a duration beyond ``lengthProblem(duration:path:format:sampleRate:)``
    ///   (checked before anything is written), `AudioFileError` for the write.
    @discardableResult
    public static func write(to path: String, format: AudioFileFormat, sampleRate: Double, modulator: Modulator,
                             times: some Sequence<Double>, duration: Double, stop: StopFlag? = nil,
                             frameAt: (Double) -> [UInt8]) throws -> Int {
        if let problem = lengthProblem(duration: duration, path: path, format: format, sampleRate: sampleRate) {
            throw Failure(description: problem)
        }
        var bursts: [[UInt8]: [Float]] = [:]
        func burst(_ frame: [UInt8]) throws -> [Float] {
            if let cached = bursts[frame] { return cached }
            do { bursts[frame] = try modulator.modulate(frame) } catch { throw Failure(description: error.description) }
            return bursts[frame]!
        }
        let totalSamples = Int(duration * sampleRate)
        var iterator = times.makeIterator()
        var nextTime = iterator.next()
        var mixer = BurstMixer()
        var block = [Float](repeating: 0, count: 1 << 16)
        var frameCount = 0
        let writer = try AudioFileWriter(path: path, sampleRate: sampleRate, format: format, stop: stop, expectedFrames: Int64(totalSamples))
        while mixer.position < totalSamples {
            let count = min(block.count, totalSamples - mixer.position)
            while let t = nextTime, Int(t * sampleRate) < mixer.position + count {
                let samples = try burst(frameAt(t))
                let start = Int(t * sampleRate)
                if start + samples.count <= totalSamples {
                    mixer.add(samples, at: start)
                    frameCount += 1
                }
                nextTime = iterator.next()
            }
            try block.withUnsafeMutableBufferPointer { buffer throws(AudioFileError) in
                let part = UnsafeMutableBufferPointer(rebasing: buffer[0..<count])
                mixer.render(into: part)
                try writer.write(UnsafeBufferPointer(part))
            }
        }
        try writer.close()
        return frameCount
    }
}

/// Start times (s) of the frames a transmitter sends, in order and one at a time (a day at one frame per
/// 0.1 s is 864 000 of them): frame k starts at `offset` + k x `interval` + a uniform random delay of
/// 0...`jitter` seconds drawn from a generator seeded with `seed` (the same file for the same seed). The
/// sequence ends after `count` frames, or before the first frame that would not end (start + `airtime`) by
/// `end` seconds, whichever comes first; with neither it does not end.
public struct FrameTimes: Sequence, IteratorProtocol, Sendable {
    private let offset: Double
    private let interval: Double
    private let jitter: Double
    private let firstWithoutJitter: Bool
    private let count: Int?
    private let end: Double?
    private let airtime: Double
    private var random: SeededRandom
    private var index = 0

    /// With `firstWithoutJitter`, the first frame starts exactly at `offset` (no random draw for it).
    public init(interval: Double, jitter: Double = 0, seed: UInt64 = 1, offset: Double = 0, firstWithoutJitter: Bool = false,
                count: Int? = nil, end: Double? = nil, airtime: Double = 0) {
        self.offset = offset; self.interval = interval; self.jitter = jitter; self.firstWithoutJitter = firstWithoutJitter
        self.count = count; self.end = end; self.airtime = airtime
        random = SeededRandom(seed: seed)
    }

    public mutating func next() -> Double? {
        if let count, index >= count { return nil }
        let delay = firstWithoutJitter && index == 0 ? 0 : random.uniform() * jitter
        let time = offset + Double(index) * interval + delay
        if let end, time + airtime > end { return nil }
        index += 1
        return time
    }
}
