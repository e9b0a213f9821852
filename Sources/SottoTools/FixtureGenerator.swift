import Foundation
import SottoAudio
import SottoChannel
import SottoDSP
import SottoModem

/// Builds every fixture from the modem, the channel simulator and the measured data (fixed seeds: the same
/// inputs give the same files).
public struct FixtureGenerator {
    let directory: String
    let dataDirectory: String
    let speech: [Float]
    let speechRate: Double
    /// The manifest of what has been written so far.
    public private(set) var manifest = FixtureManifest(fixtures: [])
    var random = SeededRandom(seed: 2026)
    /// Called with each file's path (relative to the directory) as it is written.
    public var onFile: (String) -> Void = { _ in }

    /// Fixtures go to `directory`; measured rooms and noise come from `dataDirectory` (rir_*.wav,
    /// noise_*.wav, MANIFEST.md); `speech` is a recording for the interference fixtures.
    public init(directory: String, dataDirectory: String, speech: (samples: [Float], info: AudioFileInfo)) {
        self.directory = directory
        self.dataDirectory = dataDirectory
        self.speech = speech.samples
        speechRate = speech.info.sampleRate
    }

    /// A token of `bytes` random bytes.
    mutating func token(_ bytes: Int) -> [UInt8] { Self.token(bytes, using: &random) }

    /// A token of `bytes` random bytes from `rng`.
    static func token(_ bytes: Int, using rng: inout SeededRandom) -> [UInt8] {
        (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    /// Frames placed one after the other with gaps, at `rate`.
    func frames(_ tokens: [[UInt8]], profile: Profile, rate: Double, gap: Double = 0.25, level: Double = Modulator.defaultLevel) throws -> (samples: [Float], power: Double) {
        let modulator = try Modulator(profile: profile, sampleRate: rate, level: level)
        var x = [Float](repeating: 0, count: Int(gap * rate))
        for token in tokens {
            x += try modulator.modulate(token)
            x += [Float](repeating: 0, count: Int(gap * rate))
        }
        return (x, Double(modulator.amplitude * modulator.amplitude) / 2)
    }

    mutating func add(_ file: String, group: String, _ description: String, samples: [Float], rate: Double,
                      format: AudioFileFormat = .wav16, expected: [([UInt8], Profile)], attribution: String? = nil) throws {
        let path = (directory as NSString).appendingPathComponent(file)
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try AudioFile.write(samples, sampleRate: rate, to: path, format: format)
        onFile(file)
        manifest.fixtures.append(.init(file: file, group: group, description: description,
                                       expected: expected.map { .init(token: hexString($0.0), profile: $0.1.name) },
                                       attribution: attribution))
    }

    func speechAt(_ rate: Double) -> [Float] {
        speechRate == rate ? speech : Channel.resample(speech, from: speechRate, to: rate)
    }

    func loadAt48k(_ name: String) throws -> [Float] {
        try readFirstChannel((dataDirectory as NSString).appendingPathComponent(name), at: 48_000)
    }

    /// Writes every fixture and the manifest.
    public mutating func generateAll() throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Clean: every profile, token lengths 1, 4, 8, 16 back to back, 48 kHz 16-bit.
        for profile in Profile.all {
            let tokens = [1, 4, 8, 16].map { token($0) }
            let (x, _) = try frames(tokens, profile: profile, rate: 48_000, gap: 0.1)
            try add("clean/\(profile.name)-lengths-48k.wav", group: "clean", "\(profile.name) profile, tokens of 1, 4, 8 and 16 bytes back to back",
                    samples: x, rate: 48_000, expected: tokens.map { ($0, profile) })
        }
        // Rates and formats.
        let formats: [(String, Double, AudioFileFormat, String)] = [
            ("rates/default-44k1-24bit.wav", 44_100, .wav24, "44.1 kHz, 24-bit WAV"),
            ("rates/default-96k-float.wav", 96_000, .wavFloat, "96 kHz, 32-bit float WAV"),
            ("rates/default-48k.flac", 48_000, .flac16, "48 kHz FLAC"),
            ("rates/default-48k.aiff", 48_000, .aiff16, "48 kHz AIFF"),
            ("rates/fast-44k1.wav", 44_100, .wav16, "fast profile at 44.1 kHz"),
        ]
        for (file, rate, format, description) in formats {
            let profile: Profile = file.contains("fast") ? .fast : .standard
            let tokens = [token(8)]
            var (x, power) = try frames(tokens, profile: profile, rate: rate)
            Channel.addWhiteNoise(&x, snrDB: 0, signalPower: power, rng: &random)
            try add(file, group: "rates-formats", "\(description), 0 dB SNR", samples: x, rate: rate, format: format, expected: tokens.map { ($0, profile) })
        }
        // Noisy: white noise near the 99% point.
        for (profile, snr) in [(Profile.standard, -12.0), (.fast, -10), (.robust, -14), (.audible, -14)] {
            let tokens = [token(8), token(4)]
            var (x, power) = try frames(tokens, profile: profile, rate: 48_000)
            Channel.addWhiteNoise(&x, snrDB: snr, signalPower: power, rng: &random)
            try add("noisy/\(profile.name)-snr\(Int(snr)).wav", group: "noisy", "\(profile.name), white noise at \(Int(snr)) dB SNR (0..fs/2)",
                    samples: x, rate: 48_000, expected: tokens.map { ($0, profile) })
        }
        // Clock offsets.
        for ppm in [-5000.0, -300, 300, 5000] {
            let tokens = [token(8)]
            var (x, power) = try frames(tokens, profile: .standard, rate: 48_000)
            x = Channel.clockOffset(x, ppm: ppm)
            Channel.addWhiteNoise(&x, snrDB: 0, signalPower: power, rng: &random)
            try add("clock/default-\(ppm > 0 ? "+" : "")\(Int(ppm))ppm.wav", group: "clock", "receiver clock offset \(Int(ppm)) ppm, 0 dB SNR",
                    samples: x, rate: 48_000, expected: tokens.map { ($0, .standard) })
        }
        // Synthetic rooms.
        // Rooms inside the design envelope (>= 98% in `sotto bench sweep reverb`); the harder ones are
        // measured by that sweep with hundreds of frames, not by two fixture tokens.
        for (profile, rt60, distance) in [(Profile.standard, 0.3, 1.0), (.standard, 0.5, 1.0), (.robust, 0.3, 3.0)] {
            let tokens = [token(8), token(8)]
            var (x, power) = try frames(tokens, profile: profile, rate: 48_000, gap: 0.4)
            var model = ChannelModel(seed: random.next())
            model.rt60 = rt60
            model.distance = distance
            model.snrDB = 20
            let y = try model.apply(x, sampleRate: 48_000).samples
            x = y
            _ = power
            try add("reverb/\(profile.name)-rt\(rt60)-\(Int(distance))m.wav", group: "reverb-simulated",
                    "\(profile.name), synthetic room RT60 \(rt60) s at \(Int(distance)) m, 20 dB SNR",
                    samples: x, rate: 48_000, expected: tokens.map { ($0, profile) })
        }
        // Speech interference at SIR -10 dB.
        for profile in [Profile.standard, .robust] {
            let tokens = [token(8), token(8)]
            var (x, power) = try frames(tokens, profile: profile, rate: 48_000)
            let voice = speechAt(48_000)
            Channel.mix(&x, interference: Array(voice.prefix(x.count)), sirDB: -10, signalPower: power, offset: 0)
            Channel.addWhiteNoise(&x, snrDB: 30, signalPower: power, rng: &random)
            try add("speech/\(profile.name)-sir-10.wav", group: "speech", "\(profile.name) under espeak-ng speech at SIR -10 dB",
                    samples: x, rate: 48_000, expected: tokens.map { ($0, profile) })
        }
        // Multi-channel: the frame on channel 0 of a stereo file is read as channel 0 (the bench's choice).
        // Noise only: white, real recordings, speech.
        var white = [Float](repeating: 0, count: 10 * 48_000)
        Channel.addWhiteNoise(&white, snrDB: 0, signalPower: 0.01, rng: &random)
        try add("noise-only/white-10s.wav", group: "noise-only", "white noise, no frames", samples: white, rate: 48_000, expected: [])
        try add("noise-only/speech.wav", group: "noise-only", "espeak-ng speech, no frames", samples: speechAt(48_000), rate: 48_000, expected: [])
        try generateRealRooms()
        try manifest.write(directory: directory)
    }

    /// Frames convolved with the measured impulse responses of ../shared/data plus real noise at 20 dB
    /// in-band SNR, with the profile that passes that room (see the design article); then the extra
    /// (room, profile) pairs of `RealRoomProfiles.extra`, whose tokens come from a random stream of their
    /// own so that adding one leaves every earlier file unchanged.
    mutating func generateRealRooms() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: dataDirectory).sorted()
        let noises = try names.filter { $0.hasPrefix("noise_") && $0.hasSuffix(".wav") }.map { ($0, try loadAt48k($0)) }
        let rirs = names.filter { $0.hasPrefix("rir_") && $0.hasSuffix(".wav") }
        for (index, rir) in rirs.enumerated() {
            guard let profile = RealRoomProfiles.profile(for: rir) else { continue }
            let tokens = [token(8), token(8)]
            try addRealRoom(rir, profile: profile, tokens: tokens, noise: noises[index % noises.count])
        }
        var extraRandom = SeededRandom(seed: 2027)
        for (rir, profile) in RealRoomProfiles.extra {
            guard let index = rirs.firstIndex(of: rir) else { continue }
            let tokens = (0..<2).map { _ in Self.token(8, using: &extraRandom) }
            try addRealRoom(rir, profile: profile, tokens: tokens, noise: noises[index % noises.count])
        }
    }

    /// `tokens` sent with `profile` through the measured impulse response `rir`, plus `noise` at 20 dB
    /// in-band SNR, written as rooms/<room>-<profile>.wav.
    mutating func addRealRoom(_ rir: String, profile: Profile, tokens: [[UInt8]], noise: (String, [Float])) throws {
        var response = try loadAt48k(rir)
        let peak = response.map { abs($0) }.max() ?? 1
        for i in response.indices { response[i] /= max(peak, 1e-9) }
        let (x, _) = try frames(tokens, profile: profile, rate: 48_000, gap: 0.4)
        var y = try fftConvolve(x, response)
        let (noiseName, noiseSamples) = noise
        let signalPower = Channel.power(y) * Double(y.count) / Double(x.count)
        let gain = Float((signalPower / 100 / max(try bandPower(noiseSamples, sampleRate: 48_000, band: profile.band), 1e-20)).squareRoot())
        for i in y.indices { y[i] += gain * noiseSamples[i % noiseSamples.count] }
        let room = String(rir.dropFirst(4).dropLast(4))
        try add("rooms/\(room)-\(profile.name).wav", group: "real-rooms",
                "\(profile.name) through measured RIR \(rir) with \(noiseName) at 20 dB in-band SNR",
                samples: y, rate: 48_000, expected: tokens.map { ($0, profile) },
                attribution: "\(rir): \(RealRoomProfiles.attribution(rir, dataDirectory: dataDirectory)); \(noiseName): \(RealRoomProfiles.attribution(noiseName, dataDirectory: dataDirectory))")
    }
}

/// Which profile passes each measured room, and the attribution the data's MANIFEST.md requires.
///
/// From `sotto bench sweep rooms --profiles default,fast,robust,audible --trials 50` (8-byte tokens,
/// real noise at 20 dB in-band SNR): the first profile, in the order default, robust, that decoded at least
/// 98% of the frames. The cafe lobby (best: robust 66%), the home office (robust 94%, it rolls off above
/// 14 kHz) and the studio live room (audible 94%, robust 88%) are below that with every profile and have
/// no fixture; the design article reports them.
enum RealRoomProfiles {
    static let choices: [String: Profile] = [
        "rir_auditorium_arthursykes_s1r4.wav": .standard,
        "rir_hallway_near_oldhome.wav": .standard,
        "rir_livingroom_close_arroyo.wav": .standard,
        "rir_livingroom_far_arroyo.wav": .standard,
        "rir_seminarroom_clap.wav": .robust,
    ]

    /// Further (room, profile) fixtures, written after those of `choices`: the audible profile through the
    /// close living room, where its down-chirp peaks low (`ReceiverTuning.downChirpFloor`).
    static let extra: [(String, Profile)] = [
        ("rir_livingroom_close_arroyo.wav", .audible),
    ]

    static func profile(for rir: String) -> Profile? { choices[rir] }

    /// The attribution column of ../shared/data/MANIFEST.md for `file`.
    static func attribution(_ file: String, dataDirectory: String) -> String {
        guard let text = try? String(contentsOfFile: (dataDirectory as NSString).appendingPathComponent("MANIFEST.md"), encoding: .utf8) else { return "see ../shared/data/LICENSES.md" }
        for line in text.split(separator: "\n") where line.hasPrefix("| `\(file)`") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            // Cells: "", file, kind, room, distance, format, bandwidth, length, source, license, attribution, notes.
            if cells.count > 10 { return "\(cells[10]) (license: \(cells[9]); source: \(cells[8]))" }
        }
        return "see ../shared/data/LICENSES.md"
    }
}
