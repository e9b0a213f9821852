import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoLive
import SottoModem
import Synchronization
import Testing

/// Events collected from a listener on a task of their own, so that a test can wait for one with a
/// deadline instead of hanging on the stream when something goes wrong.
final class EventLog: Sendable {
    private let events = Mutex<[ListenEvent]>([])
    private let ended = Atomic<Bool>(false)

    init(_ listener: Listener) {
        Task.detached { [self] in
            for await event in listener.events { events.withLock { $0.append(event) } }
            ended.store(true, ordering: .releasing)
        }
    }

    var all: [ListenEvent] { events.withLock { $0 } }
    var hasEnded: Bool { ended.load(ordering: .acquiring) }
    var frames: [DecodedFrame] { all.compactMap { if case .frame(let frame) = $0 { frame } else { nil } } }

    /// Waits until `condition` holds for the events so far (true) or `timeout` seconds pass (false).
    func wait(timeout: Double = 20, until condition: ([ListenEvent]) -> Bool) async -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if condition(all) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition(all)
    }
}

extension ListenEvent {
    var isDeviceGoneWithRetry: Bool { if case .deviceError(.deviceGone, true) = self { true } else { false } }
    var isReopened: Bool { if case .reopened = self { true } else { false } }
    var isStopped: Bool { if case .stopped = self { true } else { false } }
    var suspensionTotal: Int? { if case .suspended(let total) = self { total } else { nil } }
}

/// A frame followed by silence, as raw capture input.
func burst(_ token: [UInt8], silenceBefore: Double = 0.1, silenceAfter: Double = 0.3) throws -> [Float] {
    [Float](repeating: 0, count: Int(silenceBefore * 48_000)) + (try Modulator().modulate(token))
        + [Float](repeating: 0, count: Int(silenceAfter * 48_000))
}

/// Device failures driven through real libasound with the fault-injection I/O plugin: a device unplugged
/// and plugged back, a suspension, a device that never returns. The plugin is paced to the sample clock,
/// so each test takes a few seconds of real time.
@Suite(.serialized) struct DeviceFailureTests {
    /// The rig of `LiveLibraryTests`: ALSA reads its configuration once per process.
    var rig: FilePluginRig { LiveLibraryTests.rig }

    @Test func listenerReportsAnUnpluggedDeviceAndReopensItWhenItReturns() async throws {
        let rig = self.rig
        try rig.setUnplugged(false)
        let first: [UInt8] = [0xAA, 1, 2, 3], second: [UInt8] = [0xBB, 4, 5, 6, 7]
        try FilePluginRig.raw(try burst(first)).write(to: rig.faultyInput)
        let listener = try Listener(configuration: PCMConfiguration(device: "sotto_faulty_capture"), profiles: [.standard],
                                    retryInterval: 0.1)
        let log = EventLog(listener)
        defer { listener.stop(); try? rig.setUnplugged(false) }
        #expect(await log.wait { _ in log.frames.count == 1 })

        // Unplugged: the running capture fails with a typed error, and the listener keeps trying.
        try rig.setUnplugged(true)
        #expect(await log.wait { $0.contains { $0.isDeviceGoneWithRetry } })
        // Attempts while it is away fail (opening an unplugged device fails); nothing ends the stream.
        try await Task.sleep(for: .milliseconds(400))
        #expect(!log.all.contains { $0.isReopened } && !log.hasEnded)

        // Plugged back with new audio: reopened, and the new frame is decoded with a time after the first.
        try FilePluginRig.raw(try burst(second)).write(to: rig.faultyInput)
        try rig.setUnplugged(false)
        #expect(await log.wait { _ in log.frames.count == 2 })
        #expect(log.all.contains { $0.isReopened })
        #expect(log.frames.map(\.token) == [first, second])
        if log.frames.count == 2 { #expect(log.frames[1].startTime > log.frames[0].endTime) }

        listener.stop()
        #expect(await log.wait { _ in log.hasEnded })
        #expect(log.all.last?.isStopped == true)
    }

    @Test func listenerResumesASuspendedDeviceInPlace() async throws {
        let rig = self.rig
        try rig.setUnplugged(false)
        let token: [UInt8] = [0x5E, 0x5E, 0x01]
        // Half a second of silence, then the frame: the suspension falls in the silence.
        try FilePluginRig.raw(try burst(token, silenceBefore: 1.0)).write(to: rig.faultyInput)
        let listener = try Listener(configuration: PCMConfiguration(device: "sotto_faulty_capture"), profiles: [.standard],
                                    retryInterval: 0.1)
        let log = EventLog(listener)
        defer { listener.stop(); try? rig.setSuspended(false) }
        #expect(await log.wait { $0.contains { if case .started = $0 { true } else { false } } })
        try await Task.sleep(for: .milliseconds(200))
        try rig.setSuspended(true)
        try await Task.sleep(for: .milliseconds(300))
        try rig.setSuspended(false)
        #expect(await log.wait { $0.contains { $0.suspensionTotal == 1 } })
        #expect(await log.wait { _ in log.frames.count == 1 })
        #expect(log.frames.first?.token == token)
        // Resumed in place: no device error, no reopening, and the suspension is not counted as an overrun.
        #expect(!log.all.contains { if case .deviceError = $0 { true } else { false } })
        #expect(!log.all.contains { $0.isReopened })
        #expect(!log.all.contains { if case .overrun = $0 { true } else { false } })
    }

    @Test func stoppingWhileTheDeviceIsAwayEndsTheStream() async throws {
        let rig = self.rig
        try FilePluginRig.raw([Float](repeating: 0, count: 48_000)).write(to: rig.faultyInput)
        let opened = ContinuousClock.now
        let listener = try Listener(configuration: PCMConfiguration(device: "sotto_faulty_capture"), profiles: [.standard],
                                    retryInterval: 0.1)
        let log = EventLog(listener)
        defer { try? rig.setUnplugged(false) }
        try await Task.sleep(for: .milliseconds(200))
        try rig.setUnplugged(true)
        #expect(await log.wait { $0.contains { $0.isDeviceGoneWithRetry } })
        listener.stop()
        #expect(await log.wait { _ in log.hasEnded })
        guard case .stopped(let seconds, _) = log.all.last else {
            Issue.record("the stream did not end with .stopped: \(log.all)")
            return
        }
        // Captured before the unplugging (about 0.2 s; the device is paced, so never more than the time that
        // passed), counted once: not doubled across the reopening attempts.
        #expect(seconds > 0.05 && seconds <= (ContinuousClock.now - opened).inSeconds + 0.5, "\(seconds) s captured")
    }

    @Test func broadcasterReopensAnUnpluggedDeviceAndSendsEveryFrame() async throws {
        let rig = self.rig
        try rig.setUnplugged(false)
        try? FileManager.default.removeItem(at: rig.faultyOutput)
        let token: [UInt8] = [0xB0, 0xAD, 0xCA, 0x57]
        let broadcaster = try Broadcaster(configuration: PCMConfiguration(device: "sotto_faulty_playback"), token: token)
        let statuses = Mutex<[String]>([])
        let ending = Mutex<String?>("not ended")
        broadcaster.start(interval: 0.6, jitter: 0, count: 3, generator: SystemRandomNumberGenerator(), retryInterval: 0.1,
                          onSent: { index in
                              // Unplug while the second frame is being played.
                              if index == 1 {
                                  DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { try? rig.setUnplugged(true) }
                              }
                          },
                          onStatus: { status in
                              statuses.withLock {
                                  switch status {
                                  case .deviceError(let error, let retry): $0.append("error \(error == .deviceGone("sotto_faulty_playback")) \(retry)")
                                  case .reopened(let format): $0.append("reopened \(Int(format.sampleRate))")
                                  }
                              }
                              // Plugged back once the loss was seen, not after a fixed time: a busy machine
                              // (other suites decoding beside this one) may not let the broadcaster write
                              // within a fixed window, and then it never saw the device go.
                              if case .deviceError = status {
                                  DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { try? rig.setUnplugged(false) }
                              }
                          },
                          onEnd: { error in ending.withLock { $0 = error.map { "\($0)" } } })
        broadcaster.wait()
        #expect(statuses.withLock { $0 } == ["error true true", "reopened 48000"])
        #expect(broadcaster.sent == 3)
        #expect(ending.withLock { $0 } == nil)
        // Every frame counted as sent is in what the device played, and decodes; the one cut off does not count.
        let played = FilePluginRig.samples(try Data(contentsOf: rig.faultyOutput)).map { Float($0) / 32_768 }
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: [.standard])
        let frames = decoder.process(played) + decoder.finish()
        #expect(frames.map(\.token) == [[UInt8]](repeating: token, count: 3))
    }

    /// Here, not in `LiveLibraryTests`: it plays on the faulty playback device, whose unplugged marker and
    /// output file this suite's tests change; the two suites run in parallel (it once saw "device gone").
    @Test func framePlayerChangesTheFrameEachPeriodAndEndsAtTheDuration() throws {
        let rig = self.rig
        try rig.setUnplugged(false)
        try? FileManager.default.removeItem(at: rig.faultyOutput)
        // A rotating ID: one frame for the first second, another for the second; the paced test device
        // follows the sample clock, so periods fall where they would on a sound card.
        let first: [UInt8] = [1, 1, 1, 1], second: [UInt8] = [2, 2, 2, 2]
        let player = try FramePlayer(configuration: PCMConfiguration(device: "sotto_faulty_playback"), profile: .fast,
                                     frameAt: { $0 < 1 ? first : second }, changesEvery: 1)
        let started = Mutex(0)
        let summary = try player.run(.init(interval: 0.5, duration: 2)) { event in
            if case .started = event { started.withLock { $0 += 1 } }
        }
        #expect(started.withLock { $0 } == 1)
        #expect(summary.sent == 4 && summary.ownTokenMissed == nil)
        let played = FilePluginRig.samples(try Data(contentsOf: rig.faultyOutput)).map { Float($0) / 32_768 }
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: [.fast])
        let frames = played.withUnsafeBufferPointer { decoder.process($0) } + decoder.finish()
        #expect(frames.map(\.token) == [first, first, second, second])

        // On a clock that starts half-way through a period (a rotating beacon on Unix time): periods fall on the
        // clock's multiples of the period, not on the start. Frames at 1000.5 | 1001, 1001.5 | 1002.
        try? FileManager.default.removeItem(at: rig.faultyOutput)
        let aligned = try FramePlayer(configuration: PCMConfiguration(device: "sotto_faulty_playback"), profile: .fast,
                                      frameAt: { clock in [UInt8](repeating: UInt8(Int(clock) % 256), count: 4) }, changesEvery: 1,
                                      clockAtStart: 1000.5)
        #expect(try aligned.run(.init(interval: 0.5, duration: 2)).sent == 4)
        let alignedPlayed = FilePluginRig.samples(try Data(contentsOf: rig.faultyOutput)).map { Float($0) / 32_768 }
        let alignedDecoder = try StreamingDecoder(sampleRate: 48_000, profiles: [.fast])
        let alignedFrames = alignedPlayed.withUnsafeBufferPointer { alignedDecoder.process($0) } + alignedDecoder.finish()
        let slot = { (second: Int) in [UInt8](repeating: UInt8(second % 256), count: 4) }
        #expect(alignedFrames.map(\.token) == [slot(1000), slot(1001), slot(1001), slot(1002)])
    }

    @Test func broadcasterGivesUpOnErrorsReopeningCannotCure() throws {
        // With reopening off, an unplugged device ends the broadcast with the typed error.
        let rig = self.rig
        try rig.setUnplugged(false)
        let broadcaster = try Broadcaster(configuration: PCMConfiguration(device: "sotto_faulty_playback"), token: [1])
        let ended = Mutex<(any Error)?>(nil)
        broadcaster.start(interval: 0.3, jitter: 0, count: 100, generator: SystemRandomNumberGenerator(), retryInterval: nil,
                          onSent: { index in if index == 1 { try? rig.setUnplugged(true) } },
                          onEnd: { error in ended.withLock { $0 = error } })
        broadcaster.wait()
        try rig.setUnplugged(false)
        #expect(ended.withLock { $0 as? ALSAError } == .deviceGone("sotto_faulty_playback"))
        #expect(broadcaster.sent < 100)
    }

    @Test func listenCommandSaysWhenTheDeviceGoesAndComesBack() throws {
        // The command line on a rig of its own (a separate process reads its own configuration).
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        try FilePluginRig.raw(try burst([0xC1, 0x1C], silenceAfter: 0.5)).write(to: rig.faultyInput)
        // Unplugged after the frame; while it is away its input becomes silence (the plugin reads its input
        // from the start at each open), so the frame must be reported exactly once.
        DispatchQueue.global().asyncAfter(deadline: .now() + 1.0) {
            try? rig.setUnplugged(true)
            try? FilePluginRig.raw([Float](repeating: 0, count: 4_800)).write(to: rig.faultyInput)
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + 2.0) { try? rig.setUnplugged(false) }
        let listen = try Sotto.run(["listen", "--device", "sotto_faulty_capture", "--profile", "default", "--format", "hex", "--duration", "2.5"],
                                   environment: rig.environment)
        #expect(listen.status == 0, "\(listen.stderr)")
        #expect(listen.stdout == "c11c\n")
        #expect(listen.stderr.contains("device error: audio device 'sotto_faulty_capture' is gone") && listen.stderr.contains("(retrying)"),
                "\(listen.stderr)")
        #expect(listen.stderr.contains("device sotto_faulty_capture is back"), "\(listen.stderr)")
        #expect(listen.stderr.contains("stopped: 1 frame in 2.5 s of audio"), "\(listen.stderr)")
    }

    @Test func openingErrorsAreTypedAndSayWhatToDo() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        let cases: [(Int32, String)] = [
            (EBUSY, "audio device 'sotto_faulty_capture' is busy: another program is using it"),
            (EACCES, "no permission to open audio device 'sotto_faulty_capture': add your user to the 'audio' group"),
            (ENODEV, "audio device 'sotto_faulty_capture' is gone"),
        ]
        for (code, message) in cases {
            try rig.setRefusal(code)
            let listen = try Sotto.run(["listen", "--device", "sotto_faulty_capture", "--duration", "1"], environment: rig.environment)
            #expect(listen.status != 0 && listen.stderr.contains(message), "\(code): \(listen.stderr)")
            let send = try Sotto.run(["send", "0x01", "--device", "sotto_faulty_playback"], environment: rig.environment)
            #expect(send.status != 0 && send.stderr.contains(message.replacingOccurrences(of: "capture", with: "playback")),
                    "\(code): \(send.stderr)")
        }
        try rig.setRefusal(nil)
        // A device that offers only packed 24-bit samples is refused with the remedy.
        let format = try Sotto.run(["listen", "--device", "sotto_24bit_only", "--duration", "1"], environment: rig.environment)
        #expect(format.status != 0 && format.stderr.contains("supports neither float nor 16-bit samples: use its plughw: variant"),
                "\(format.stderr)")
        // And once the refusal is gone, the same device opens and plays.
        let send = try Sotto.run(["send", "0x01", "--device", "sotto_faulty_playback"], environment: rig.environment)
        #expect(send.status == 0, "\(send.stderr)")
    }

    @Test func publishKeepsGoingThroughAnUnpluggedDevice() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.6) { try? rig.setUnplugged(true) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 1.2) { try? rig.setUnplugged(false) }
        let publish = try Sotto.run(["publish", "--text", "hi", "--ttl", "3", "--device", "sotto_faulty_playback"], environment: rig.environment)
        #expect(publish.status == 0, "\(publish.stderr)")
        #expect(publish.stderr.contains("device error: audio device 'sotto_faulty_playback' is gone") && publish.stderr.contains("(retrying)"),
                "\(publish.stderr)")
        #expect(publish.stderr.contains("device sotto_faulty_playback is back"), "\(publish.stderr)")
        // What was played after the device came back still carries the message.
        let played = FilePluginRig.samples(try Data(contentsOf: rig.faultyOutput)).map { Float($0) / 32_768 }
        let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: [.standard])
        let frames = decoder.process(played) + decoder.finish()
        let message = Payload.audioBytes(try AudioBytes.message(Array("hi".utf8)).content).frameBytes
        #expect(frames.count >= 2 && frames.allSatisfy { $0.token == message }, "\(frames.map(\.token))")
    }
}
