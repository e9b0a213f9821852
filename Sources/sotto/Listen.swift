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
        if let duration, !(duration.isFinite && duration > 0) { throw ValidationError("--duration must be a positive number of seconds") }
        if !(rate.isFinite && rate >= 8_000 && rate <= 384_000) { throw ValidationError("--rate must be 8000 to 384000 Hz") }
    }

    func run() throws {
        let minimum = profile.profiles.map(\.minimumSampleRate).min() ?? 8_000
        let session: CaptureSession
        do {
            session = try CaptureSession(configuration: PCMConfiguration(device: device, preferredRate: rate, acceptableRates: minimum...384_000))
        } catch { throw CommandError(error.description) }
        let negotiated = session.negotiated
        let usable = profile.profiles.filter { negotiated.sampleRate >= $0.minimumSampleRate }
        let decoder: StreamingDecoder
        do { decoder = try StreamingDecoder(sampleRate: negotiated.sampleRate, profiles: usable) }
        catch { throw CommandError(error.description) }
        printError("listening on \(device): \(negotiated) for \(usable.map(\.name).joined(separator: ", "))")
        if negotiated.resampledByALSA {
            printError("warning: ALSA resamples this device (plug/dmix): its linear converter costs about 5 dB at 19 kHz; prefer a hw: device at a native rate")
        }
        let writer: AudioFileWriter?
        do { writer = try record.map { try AudioFileWriter(path: $0, sampleRate: negotiated.sampleRate, format: AudioFileFormat(path: $0)) } }
        catch { throw CommandError("\(error)") }
        let state = ListenState(decoder: decoder, writer: writer, format: format,
                                limit: duration.map { Int64($0 * negotiated.sampleRate) })
        let done = DispatchSemaphore(value: 0)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        signal(SIGINT, SIG_IGN)
        interrupt.setEventHandler { state.stopRequested.set() }
        interrupt.resume()
        session.start(onBlock: { block, _ in state.handle(block) }, onEnd: { error in
            state.finish(error: error)
            done.signal()
        })
        done.wait()
        session.stop()
        let seconds = Double(state.captured) / negotiated.sampleRate
        printError("stopped: \(state.frames) frame\(state.frames == 1 ? "" : "s") in \(fixed(seconds, 1)) s of audio, \(session.overruns) overrun\(session.overruns == 1 ? "" : "s")")
        if let error = state.error { throw CommandError("\(error)") }
    }
}

/// Everything the capture thread touches, owned by it while it runs.
final class ListenState: @unchecked Sendable {
    let decoder: StreamingDecoder
    let writer: AudioFileWriter?
    let format: Decode.Format
    let limit: Int64?
    let stopRequested = StopFlag()
    let monitor: BandMonitor
    private(set) var captured: Int64 = 0
    private(set) var frames = 0
    private(set) var error: (any Error)?

    init(decoder: StreamingDecoder, writer: AudioFileWriter?, format: Decode.Format, limit: Int64?) {
        self.decoder = decoder
        monitor = BandMonitor(sampleRate: decoder.sampleRate)
        self.writer = writer
        self.format = format
        self.limit = limit
    }

    /// Runs on the capture thread for every period; false stops the capture.
    func handle(_ block: UnsafeBufferPointer<Float>) -> Bool {
        var block = block
        if let limit, captured + Int64(block.count) > limit {
            block = UnsafeBufferPointer(rebasing: block[0..<Int(max(0, limit - captured))])
        }
        do { try writer?.write(block) } catch { self.error = error; return false }
        captured += Int64(block.count)
        emit(decoder.process(block))
        if let level = monitor.add(block) {
            printError("warning: the 17.5-20.5 kHz band is \(Int(-level)) dB below 12-16 kHz: the capture path filters it (echo cancellation, noise suppression?); see the live audio guide")
        }
        if let limit, captured >= limit { return false }
        return !stopRequested.isSet
    }

    func finish(error: (any Error)?) {
        if let error { self.error = error }
        emit(decoder.finish())
    }

    private func emit(_ decoded: [DecodedFrame]) {
        for frame in decoded {
            frames += 1
            // Unbuffered: each token appears as soon as it is decoded, even through a pipe.
            FileHandle.standardOutput.write(Data((FrameOutput.line(frame, format: format, file: nil) + "\n").utf8))
        }
    }
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
