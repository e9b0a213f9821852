import ArgumentParser
import Foundation
import SottoAudio
import SottoLive
import SottoModem
import SottoSupport
import SottoTools

/// `sotto listen`: decode tokens from a live ALSA capture device as they arrive.
struct Listen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "listen", abstract: "Listen on an ALSA capture device and print tokens as they are decoded.")

    @Option(help: "ALSA capture PCM (default, hw:1,0, plughw:1,0, ...).") var device: String = "default"
    @OptionGroup var receiver: ReceiverOptions
    @OptionGroup var format: FormatOption
    @Option(parsing: .unconditional, help: "Stop after this many seconds of captured audio (sample clock).") var duration: Double?
    @Option(help: "Also record the capture to this file (format by extension), for offline decoding.") var record: String?
    @Option(parsing: .unconditional, help: "Preferred sample rate (Hz); the device's native rate is used when it differs.") var rate: Double = 48_000

    func validate() throws {
        try NumericOption("--duration", above: 0, upTo: 366 * 86_400, unit: "s").check(duration)
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
        if let record {
            if record == "-" { throw ValidationError("--record -: standard output carries the decoded tokens; record to a file") }
            do { _ = try AudioFileFormat(path: record) } catch { throw ValidationError(error.description) }
        }
    }

    /// The recording's path is checked before the capture starts, not found unwritable after it.
    static func checkOutput(_ path: String?) throws {
        guard let path, path != "-" else { return }
        do { try OutputPath(path).checkWritable() } catch { throw CommandError(error.description) }
    }

    func run() async throws {
        try ConsentCheck.require(mayAsk: false)
        let profiles = receiver.profile.profiles
        let minimum = profiles.map(\.minimumSampleRate).min() ?? 8_000
        try Self.checkOutput(record)
        let recorder = CaptureRecorder()
        var capture: (@Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void)?
        if let record { capture = { @Sendable block, format in recorder.write(block, to: record, sampleRate: format.sampleRate) } }
        let configuration = PCMConfiguration(device: device, preferredRate: rate, acceptableRates: minimum...384_000)
        let listener: Listener
        do {
            listener = try Listener(configuration: configuration, profiles: profiles, duration: duration,
                                    bufferingNewest: nil, onCapture: capture)
        } catch { throw CommandError(error.description) }
        let interrupt = Interruption.onStop { listener.stop() }
        defer { interrupt.cancel() }
        var frames = 0
        var failure: (any Error)?
        // One warning of a kind every 30 s at most, with the count held back.
        let warnings = WarningGate { printError($0) }
        for await event in listener.events {
            switch event {
            case .started(let negotiated), .reopened(let negotiated):
                if case .reopened = event { printError("device \(device) is back") }
                printError("listening on \(device): \(negotiated)")
                if negotiated.resampledByALSA {
                    printError("warning: ALSA resamples this device (plug/dmix): its linear converter costs about 5 dB at 19 kHz; prefer a hw: device at a native rate")
                }
            case .frame(let frame):
                frames += 1
                Output.line(FrameText.line(frame, format: format.format, file: nil))
            case .overrun(let total):
                warnings.warn("warning: capture overrun (\(total) so far): samples were lost", kind: "capture overrun")
            case .suspended(let total):
                printError("warning: the device was suspended and has resumed (\(total) so far): audio in between was lost")
            case .bandFiltered(let level):
                printError("warning: the 17.5-20.5 kHz band is \(Int(-level)) dB below 12-16 kHz: the capture path filters it (echo cancellation, noise suppression?); see the live audio guide")
            case .deviceError(let error, let retry):
                if retry { warnings.warn("device error: \(error) (retrying)") } else { printError("device error: \(error)") }
                if !retry { failure = error }
            case .stopped(let seconds, let overruns):
                warnings.finish()
                printError("stopped: \(frames) frame\(frames == 1 ? "" : "s") in \(fixed(seconds, 1)) s of audio, \(overruns) overrun\(overruns == 1 ? "" : "s")")
            }
        }
        listener.stop()
        recorder.close()
        if let error = failure ?? recorder.error { throw CommandError("\(error)") }
    }
}

/// `sotto devices`: ALSA PCMs.
struct Devices: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "devices", abstract: "List ALSA PCMs (capture and playback) with the rates they accept.")

    @OptionGroup var format: FormatOption

    func validate() throws { try format.refuseHex("devices") }

    func run() throws {
        let devices = ALSADevices.list()
        if devices.isEmpty && format.format == .text { printError("no ALSA PCMs found"); return }
        for device in devices {
            let capture = device.direction == nil || device.direction == "Input"
            let playback = device.direction == nil || device.direction == "Output"
            let record = DeviceRecord(device, captureRates: capture ? ALSADevices.rates(of: device.name, capture: true) : nil,
                                      playbackRates: playback ? ALSADevices.rates(of: device.name, capture: false) : nil)
            if format.format == .json { Output.record(record); continue }
            var columns = [device.name]
            for (label, applies, rates, anyRate) in [("capture", capture, record.captureRates, record.captureAnyRate),
                                                 ("playback", playback, record.playbackRates, record.playbackAnyRate)] where applies {
                let range = anyRate == true ? "any rate" : rates.map { "\(Int($0[0]))-\(Int($0[1])) Hz" } ?? "(cannot open now)"
                columns.append("\(label) \(range)")
            }
            columns.append(device.description)
            Output.line(columns.joined(separator: "\t"))
        }
    }
}
