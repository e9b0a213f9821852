import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoModem
import SottoSupport

/// The JSON Lines that every `sotto` command prints with `--format json`: one object per line, each with
/// the schema version (``schemaVersion``) and its record type (``JSONRecord/recordType``), encoded by
/// `JSONEncoder` with sorted keys. Documented, with an example per record type, in the JSONLines article.
public enum JSONLines {
    /// Version of the schema; raised when a field changes meaning or disappears (new fields keep it).
    public static let schemaVersion = 2

    /// Every record type, by its `record` name.
    public static var recordTypes: [String: any JSONRecord.Type] {
        let types: [any JSONRecord.Type] = [FrameRecord.self, EventRecord.self, ProfileRecord.self, DeviceRecord.self,
                                            FixtureGroupRecord.self, FixtureProblemRecord.self, SweepRowRecord.self,
                                            OperationRecord.self, NoticeRecord.self]
        return Dictionary(uniqueKeysWithValues: types.map { ($0.recordType, $0) })
    }

    /// `record` as one line of JSON (no newline).
    public static func line(_ record: some JSONRecord) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Every field is a string, number, boolean or array of them: encoding cannot fail.
        return String(decoding: (try? encoder.encode(record)) ?? Data(), as: UTF8.self)
    }

    /// The token as text when it is printable UTF-8 (no control or invisible characters), else nil.
    public static func printable(_ bytes: [UInt8]) -> String? {
        guard let s = String(validating: bytes, as: UTF8.self),
              s.unicodeScalars.allSatisfy({ !$0.properties.isDefaultIgnorableCodePoint && ($0.value >= 0x20 && $0.value != 0x7F) }) else { return nil }
        return s
    }

    /// `value` rounded to `decimals` decimals (times and levels are printed to the precision they have).
    static func rounded(_ value: Double, _ decimals: Int) -> Double {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let result = (value * scale).rounded() / scale
        return result == 0 ? 0 : result
    }
}

/// One record type of the JSON Lines schema: `schema` and `record` are the first fields of every line.
public protocol JSONRecord: Codable, Sendable {
    /// The `record` field of this type.
    static var recordType: String { get }
    /// The schema version (``JSONLines/schemaVersion``).
    var schema: Int { get }
    /// ``recordType``, stored so that it is encoded.
    var record: String { get }
}

/// Lowercase hex without prefix.
func hexString(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

/// A decoded frame (`decode`, `listen`). Its measurement fields have the names of the C library's
/// `sotto_frame` and Python's `sotto.Frame` (`start_time_s`, `snr_db`, ...), units last; the names of schema 1
/// (`start`, `end`, `snr`, `level`, `clockOffsetPPM`, `correctedBits`) are still written, with the same
/// values, for this release only.
public struct FrameRecord: JSONRecord {
    public static let recordType = "frame"
    public var schema = JSONLines.schemaVersion
    public var record = FrameRecord.recordType
    /// The input it was found in, when there are several.
    public var file: String?
    /// The token as lowercase hex.
    public var token: String
    /// The token as text, when it is printable UTF-8.
    public var text: String?
    public var profile: String
    /// First sample of the preamble (s from the start of the input, 6 decimals): `start_time_s`.
    public var startTimeS: Double
    /// End of the frame (s from the start of the input, 6 decimals): `end_time_s`.
    public var endTimeS: Double
    /// Estimated in-band SNR (dB): `snr_db`.
    public var snrDB: Double
    /// Received peak level (dBFS): `level_dbfs`.
    public var levelDBFS: Double
    /// Time-scale offset (ppm; positive: arrived stretched): `clock_offset_ppm`.
    public var clockOffsetPPM: Double
    /// Coded bits the error-correcting code corrected: `corrected_bits`.
    public var correctedBits: Int
    /// Schema 1's names of the same values (`start`, `end`, `snr`, `level`; `clockOffsetPPM` and
    /// `correctedBits` under `clockOffsetPPMOld`, `correctedBitsOld`), written for one release.
    public var start: Double?
    public var end: Double?
    public var snr: Double?
    public var level: Double?
    public var clockOffsetPPMOld: Double?
    public var correctedBitsOld: Int?

    /// The JSON names: the C and Python names, then schema 1's.
    public enum CodingKeys: String, CodingKey {
        case schema, record, file, token, text, profile
        case startTimeS = "start_time_s", endTimeS = "end_time_s", snrDB = "snr_db", levelDBFS = "level_dbfs"
        case clockOffsetPPM = "clock_offset_ppm", correctedBits = "corrected_bits"
        case start, end, snr, level
        case clockOffsetPPMOld = "clockOffsetPPM", correctedBitsOld = "correctedBits"
    }

    /// The record of `frame`.
    /// - Parameters:
    ///   - frame: the decoded frame.
    ///   - file: the input it was found in, when there are several.
    public init(_ frame: DecodedFrame, file: String? = nil) {
        self.file = file
        token = hexString(frame.token)
        text = JSONLines.printable(frame.token)
        profile = frame.profile
        startTimeS = JSONLines.rounded(frame.startTime, 6)
        endTimeS = JSONLines.rounded(frame.endTime, 6)
        snrDB = frame.snr
        levelDBFS = frame.level
        clockOffsetPPM = frame.clockOffsetPPM
        correctedBits = frame.correctedBits
        (start, end, snr, level) = (startTimeS, endTimeS, snrDB, levelDBFS)
        (clockOffsetPPMOld, correctedBitsOld) = (clockOffsetPPM, correctedBits)
    }
}

/// A subscription event (`subscribe`).
public struct EventRecord: JSONRecord {
    public static let recordType = "event"
    public var schema = JSONLines.schemaVersion
    public var record = EventRecord.recordType
    /// When it happened (s since the subscription started; on the sample clock for a recording).
    public var time: Double
    /// found, lost, signal (the SNR of a found message moved by 6 dB or more) or expired.
    public var event: String
    /// The message (absent for expired).
    public var namespace: String?
    public var type: String?
    /// The content as lowercase hex.
    public var content: String?
    /// The content as text, when it is printable UTF-8.
    public var text: String?
    /// Received SNR (dB) and level (dBFS), for signal events.
    public var snr: Double?
    public var level: Double?
    /// Estimated distance (m) of the message's loudest source, for signal events: from the SNR, for the
    /// nominal speaker in a quiet room (`AudioDistance`; accuracy low, capped at 10 m).
    public var distance: Double?
    /// The daemon's operation it belongs to (`sotto ops watch`).
    public var operation: String?
    /// Its notification group key (`sotto ops watch`).
    public var group: String?

    public init(_ event: SubscriptionEvent, at time: Double) {
        self.time = JSONLines.rounded(time, 3)
        var message: Message?
        switch event {
        case .found(let m):
            self.event = "found"
            message = m
        case .lost(let m):
            self.event = "lost"
            message = m
        case .signalChanged(let m, let snr, let level):
            self.event = "signal"
            message = m
            self.snr = JSONLines.rounded(snr, 1)
            self.level = JSONLines.rounded(level, 1)
            let meters = AudioDistance().meters(snr: snr)
            if meters.isFinite { self.distance = JSONLines.rounded(meters, 1) }
        case .expired:
            self.event = "expired"
        }
        if let message {
            namespace = message.namespace
            type = message.type
            content = hexString(message.content)
            text = JSONLines.printable(message.content)
        }
    }
}

/// A waveform profile (`profiles`).
public struct ProfileRecord: JSONRecord {
    public static let recordType = "profile"
    public var schema = JSONLines.schemaVersion
    public var record = ProfileRecord.recordType
    public var name: String
    /// The band (Hz).
    public var lowFrequency: Double
    public var highFrequency: Double
    /// Sub-bands hopped between, tones in each, and their spacing (Hz).
    public var subBands: Int
    public var tonesPerSubBand: Int
    public var toneSpacing: Double
    /// One symbol (s).
    public var symbolTime: Double
    /// Net bit rate of an 8-byte token (bit/s).
    public var bitRate8Bytes: Double
    /// Airtime of a frame for 4, 8 and 16-byte tokens (s), fades and preamble included.
    public var airtime4Bytes: Double
    public var airtime8Bytes: Double
    public var airtime16Bytes: Double
    /// Lowest sample rate that carries it (Hz).
    public var minimumSampleRate: Double
    public var summary: String

    public init(_ p: Profile) {
        name = p.name
        lowFrequency = p.lowFrequency
        highFrequency = p.highFrequency
        subBands = p.subBands
        tonesPerSubBand = p.tonesPerSubBand
        toneSpacing = p.toneSpacing
        symbolTime = p.symbolTime
        bitRate8Bytes = JSONLines.rounded(p.netBitRate(payloadBytes: 8), 3)
        airtime4Bytes = JSONLines.rounded(p.airtime(payloadBytes: 4), 6)
        airtime8Bytes = JSONLines.rounded(p.airtime(payloadBytes: 8), 6)
        airtime16Bytes = JSONLines.rounded(p.airtime(payloadBytes: 16), 6)
        minimumSampleRate = p.minimumSampleRate
        summary = p.summary
    }
}

/// An ALSA PCM (`devices`).
public struct DeviceRecord: JSONRecord {
    public static let recordType = "device"
    public var schema = JSONLines.schemaVersion
    public var record = DeviceRecord.recordType
    /// The PCM name to pass to --device.
    public var name: String
    public var description: String
    /// Whether it captures and plays (ALSA's hint; both when it does not say).
    public var capture: Bool
    public var playback: Bool
    /// The rates it accepts now (Hz), absent when it cannot be opened now (busy, missing) or for a direction it lacks;
    /// `anyRate` when a plugin converts any rate.
    public var captureRates: [Double]?
    public var playbackRates: [Double]?
    public var captureAnyRate: Bool?
    public var playbackAnyRate: Bool?

    public init(_ device: PCMDeviceInfo, captureRates: ClosedRange<Double>?, playbackRates: ClosedRange<Double>?) {
        name = device.name
        description = device.description
        capture = device.direction == nil || device.direction == "Input"
        playback = device.direction == nil || device.direction == "Output"
        func bounds(_ range: ClosedRange<Double>?) -> ([Double]?, Bool?) {
            guard let range else { return (nil, nil) }
            return range.upperBound > 1e7 ? (nil, true) : ([range.lowerBound, range.upperBound], false)
        }
        (self.captureRates, captureAnyRate) = capture ? bounds(captureRates) : (nil, nil)
        (self.playbackRates, playbackAnyRate) = playback ? bounds(playbackRates) : (nil, nil)
    }
}

/// One group of the fixture benchmark (`bench fixtures`); the group `all` sums them.
public struct FixtureGroupRecord: JSONRecord {
    public static let recordType = "fixtureGroup"
    public var schema = JSONLines.schemaVersion
    public var record = FixtureGroupRecord.recordType
    public var group: String
    public var files: Int
    public var expected: Int
    public var found: Int
    /// found / expected, absent when nothing is expected.
    public var successRate: Double?
    public var falseTokens: Int
    /// Audio decoded (s) and CPU time it took (s).
    public var audioSeconds: Double
    public var cpuSeconds: Double

    public init(group: String, files: Int, expected: Int, found: Int, falseTokens: Int, audioSeconds: Double, cpuSeconds: Double) {
        self.group = group
        self.files = files
        self.expected = expected
        self.found = found
        successRate = expected == 0 ? nil : JSONLines.rounded(Double(found) / Double(expected), 4)
        self.falseTokens = falseTokens
        self.audioSeconds = JSONLines.rounded(audioSeconds, 3)
        self.cpuSeconds = JSONLines.rounded(cpuSeconds, 3)
    }
}

/// A fixture that did not give its manifest's tokens (`bench fixtures`).
public struct FixtureProblemRecord: JSONRecord {
    public static let recordType = "fixtureProblem"
    public var schema = JSONLines.schemaVersion
    public var record = FixtureProblemRecord.recordType
    /// Relative to the manifest.
    public var file: String
    /// missed (an expected token not decoded), unexpected (a token decoded that was not expected), or unreadable.
    public var problem: String
    public var token: String?
    public var profile: String?
    /// Why it was unreadable.
    public var reason: String?

    public init(file: String, problem: String, token: String? = nil, profile: String? = nil, reason: String? = nil) {
        self.file = file
        self.problem = problem
        self.token = token
        self.profile = profile
        self.reason = reason
    }
}

/// One row of a robustness sweep's table (`bench sweep KIND`): its cells by column title.
public struct SweepRowRecord: JSONRecord {
    public static let recordType = "sweepRow"
    public var schema = JSONLines.schemaVersion
    public var record = SweepRowRecord.recordType
    /// The sweep (snr, offset, reverb, rooms, speech, false, latency, exchange).
    public var sweep: String
    /// What was measured and how (the table's caption).
    public var caption: String
    /// The cells, keyed by column title, as printed in the table.
    public var cells: [String: String]
    /// The column titles in the table's order (`cells` and `values` are objects, whose keys a reader may sort).
    public var columns: [String]
    /// The numeric cells as numbers, keyed by the column title in snake case with its unit last
    /// (``valueKey(column:percent:)``): `"Eb/N0 90% (dB)": "4.5"` is `"eb_n0_90_percent_db": 4.5`,
    /// `"-300 ppm": "99.5%"` is `"minus_300_ppm_percent": 99.5`. Cells that are not numbers ("-", names,
    /// "3 of 10") are in `cells` only.
    public var values: [String: Double]
    /// true for the row under way when the sweep was interrupted (Ctrl-C): the cells not measured are "-";
    /// absent for a whole row.
    public var partial: Bool?

    /// A row of `cells` under `columns` (titles in order); `values` are read from the cells.
    /// - Parameters:
    ///   - sweep: The sweep's name.
    ///   - caption: The table's caption.
    ///   - columns: The column titles, in order.
    ///   - cells: The row's cells as printed, in column order.
    public init(sweep: String, caption: String, columns: [String], cells: [String]) {
        self.sweep = sweep
        self.caption = caption
        self.columns = columns
        self.cells = Dictionary(zip(columns, cells), uniquingKeysWith: { first, _ in first })
        var values: [String: Double] = [:]
        for (column, cell) in zip(columns, cells) {
            let text = cell.trimmingCharacters(in: .whitespaces)
            let percent = text.hasSuffix("%")
            guard let number = Double(percent ? String(text.dropLast()) : text), number.isFinite else { continue }
            values[Self.valueKey(column: column, percent: percent)] = number
        }
        self.values = values
    }

    /// The key of a numeric cell: the column title in lower snake case ("%" as "percent", a leading minus
    /// as "minus", a decimal point as "_"), then "percent" when the cell is a percentage.
    /// - Parameters:
    ///   - column: The column title, e.g. "SNR 90% (dB)".
    ///   - percent: Whether the cell ends with "%".
    /// - Returns: The key, e.g. "snr_90_percent_db".
    public static func valueKey(column: String, percent: Bool) -> String {
        var words: [String] = []
        var word = ""
        var previous: Character = " "
        for character in column.lowercased() {
            if character.isLetter || character.isNumber {
                if previous == "-" && word.isEmpty && character.isNumber { words.append("minus") }
                word.append(character)
            } else {
                if !word.isEmpty { words.append(word); word = "" }
                if character == "%" { words.append("percent") }
            }
            previous = character
        }
        if !word.isEmpty { words.append(word) }
        if percent && words.last != "percent" { words.append("percent") }
        return words.joined(separator: "_")
    }
}

/// An operation of the daemon (`sotto ops list`, and the reply to `publish|subscribe|beacon --daemon`).
public struct OperationRecord: JSONRecord, Equatable {
    public static let recordType = "operation"
    public var schema = JSONLines.schemaVersion
    public var record = OperationRecord.recordType
    /// Its id (12 hex digits).
    public var id: String
    /// publish, subscribe or beacon.
    public var kind: String
    /// running, waiting (for the device or the matcher), paused (no consent) or ended.
    public var status: String
    /// Seconds left to run (absent: until cancelled).
    public var remaining: Double?
    /// Whether it survives a restart of the daemon.
    public var persistent: Bool
    /// Its notification group key.
    public var group: String
    /// What it publishes, subscribes to or broadcasts, in words.
    public var summary: String

    public init(id: String, kind: String, status: String, remaining: Double?, persistent: Bool, group: String, summary: String) {
        self.id = id
        self.kind = kind
        self.status = status
        self.remaining = remaining.map { JSONLines.rounded($0, 1) }
        self.persistent = persistent
        self.group = group
        self.summary = summary
    }
}

/// A status change the daemon reports (`sotto ops watch`): consent granted or revoked, a device fault or
/// its recovery, an operation started, ended or expired, a matcher connection change.
public struct NoticeRecord: JSONRecord, Equatable {
    public static let recordType = "notice"
    public var schema = JSONLines.schemaVersion
    public var record = NoticeRecord.recordType
    /// When it happened (s since the Unix epoch, 3 decimals).
    public var time: Double
    /// permission, device, operation or matcher.
    public var notice: String
    /// The new state: granted/revoked (permission); fault/running (device); started/ended/expired
    /// (operation); connected/disconnected (matcher).
    public var status: String
    /// The operation concerned (operation notices).
    public var operation: String?
    /// Its notification group key (operation notices).
    public var group: String?
    /// Details in words (the device error, why an operation ended).
    public var detail: String?

    public init(time: Double, notice: String, status: String, operation: String? = nil, group: String? = nil, detail: String? = nil) {
        self.time = JSONLines.rounded(time, 3)
        self.notice = notice
        self.status = status
        self.operation = operation
        self.group = group
        self.detail = detail
    }
}
