import ArgumentParser
import Dispatch
import Foundation
import SottoAudio
import SottoLive
import SottoModem

/// `sotto listen`: decode tokens from a live ALSA capture device as they arrive.
struct Listen: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Listen on an ALSA capture device and print tokens as they are decoded.")

    @Option(help: "ALSA capture PCM (default, hw:1,0, plughw:1,0, ...).") var device: String = "default"
    @Option(help: "Profile to listen for, or all.") var profile: ProfileSelection = ProfileSelection(Profile.all)
    @Option(help: "Output: text, json or hex.") var format: Decode.Format = .text
    @Option(help: "Stop after this many seconds of captured audio (sample clock).") var duration: Double?
    @Option(help: "Also record the capture to this file, for offline decoding.") var record: String?
    @Option(help: "Preferred sample rate (Hz); the device's native rate is used when it differs.") var rate: Double = 48_000

    func validate() throws {
        try NumericOption("--duration", above: 0, upTo: 366 * 86_400, unit: "s").check(duration)
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
    }

    func run() throws {
        let minimum = profile.profiles.map(\.minimumSampleRate).min() ?? 8_000
        let recorder = Recorder()
        var capture: (@Sendable (UnsafeBufferPointer<Float>, NegotiatedFormat) -> Void)?
        if let record { capture = { @Sendable block, format in recorder.write(block, to: record, sampleRate: format.sampleRate) } }
        let configuration = PCMConfiguration(device: device, preferredRate: rate, acceptableRates: minimum...384_000)
        let listener: Listener
        do {
            listener = try Listener(configuration: configuration, profiles: profile.profiles, duration: duration,
                                    bufferingNewest: nil, onCapture: capture)
        } catch { throw CommandError(error.description) }
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        signal(SIGINT, SIG_IGN)
        interrupt.setEventHandler { listener.stop() }
        interrupt.resume()
        let outcome = ListenOutcome()
        let done = DispatchSemaphore(value: 0)
        let format = self.format, device = self.device
        Task.detached {
            for await event in listener.events {
                switch event {
                case .started(let negotiated), .reopened(let negotiated):
                    if case .reopened = event { printError("device \(device) is back") }
                    printError("listening on \(device): \(negotiated)")
                    if negotiated.resampledByALSA {
                        printError("warning: ALSA resamples this device (plug/dmix): its linear converter costs about 5 dB at 19 kHz; prefer a hw: device at a native rate")
                    }
                case .frame(let frame):
                    outcome.frames += 1
                    FileHandle.standardOutput.write(Data((FrameOutput.line(frame, format: format, file: nil) + "\n").utf8))
                case .overrun(let total):
                    printError("warning: capture overrun (\(total) so far): samples were lost")
                case .suspended(let total):
                    printError("warning: the device was suspended and has resumed (\(total) so far): audio in between was lost")
                case .bandFiltered(let level):
                    printError("warning: the 17.5-20.5 kHz band is \(Int(-level)) dB below 12-16 kHz: the capture path filters it (echo cancellation, noise suppression?); see the live audio guide")
                case .deviceError(let error, let retry):
                    printError("device error: \(error)\(retry ? " (retrying)" : "")")
                    if !retry { outcome.error = error }
                case .stopped(let seconds, let overruns):
                    printError("stopped: \(outcome.frames) frame\(outcome.frames == 1 ? "" : "s") in \(fixed(seconds, 1)) s of audio, \(overruns) overrun\(overruns == 1 ? "" : "s")")
                }
            }
            done.signal()
        }
        done.wait()
        listener.stop()
        recorder.close()
        if let error = outcome.error ?? recorder.error { throw CommandError("\(error)") }
    }
}

/// Writes the capture to a file on the capture thread (only that thread touches the writer; the file is
/// opened with the first block, when the device's rate is known).
final class Recorder: @unchecked Sendable {
    private var writer: AudioFileWriter?
    private var sampleRate: Double?
    private var failed = false
    private(set) var error: (any Error)?

    func write(_ block: UnsafeBufferPointer<Float>, to path: String, sampleRate: Double) {
        guard !failed else { return }
        do {
            if writer == nil {
                // Written in place: after a crash, what was captured until then is still there.
                writer = try AudioFileWriter(path: path, sampleRate: sampleRate, format: AudioFileFormat(path: path), atomically: false)
                self.sampleRate = sampleRate
            }
            // A reopened device may come back at another rate; one file has one rate.
            guard sampleRate == self.sampleRate else {
                throw CommandError("the device came back at \(Int(sampleRate)) Hz instead of \(Int(self.sampleRate ?? 0)) Hz: the recording \(path) stops there")
            }
            try writer?.write(block)
        } catch {
            self.error = error
            failed = true
        }
    }

    /// Finishes the file (call after the capture thread has ended).
    func close() {
        do { try writer?.close() } catch { if self.error == nil { self.error = error } }
        writer = nil
    }
}

/// What the listening task found.
final class ListenOutcome: @unchecked Sendable {
    var frames = 0
    var error: (any Error)?
}

/// `sotto devices`: ALSA PCMs.
struct Devices: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List ALSA PCMs (capture and playback) with the rates they accept.")

    func run() throws {
        let devices = ALSADevices.list()
        if devices.isEmpty { print("no ALSA PCMs found"); return }
        for device in devices {
            var columns = [device.name]
            for (label, capture) in [("capture", true), ("playback", false)]
            where device.direction == nil || device.direction == (capture ? "Input" : "Output") {
                let range = ALSADevices.rates(of: device.name, capture: capture)
                columns.append("\(label) " + (range.map { $0.upperBound > 1e7 ? "any rate" : "\(Int($0.lowerBound))-\(Int($0.upperBound)) Hz" } ?? "(cannot open now)"))
            }
            columns.append(device.description)
            print(columns.joined(separator: "\t"))
        }
    }
}
