import Foundation
import SottoDSP
import SottoModem

/// The sender's rules on a live sound card: a `TransmitScheduler` that a ``Broadcaster`` asks before every
/// device period whether to start its frame, fed from the capture side with whether the band is busy (its
/// ``CarrierSense``) and with the frames heard from other devices.
///
/// Capture and playback run on threads of their own; this class is the one place they meet, behind a lock.
/// Time is the monotonic clock since its creation.
public final class MediumAccess: @unchecked Sendable {
    private let lock = NSLock()
    private var scheduler: TransmitScheduler
    /// The device's carrier sense (shared with its other senders, fed by its capture).
    public let sense: CarrierSense
    /// Why the band cannot be sensed (its transform could not be made: out of memory), or nil; frames then go
    /// out without carrier sense.
    public var senseFailure: FFTError? { sense.senseFailure }
    private let ownFrames: Set<[UInt8]>
    private let origin = ContinuousClock.now
    /// How long after the decision to send a frame its sound leaves the device (s): the playback buffer ahead of
    /// the period being written. The matcher's slots are for the sound, so the decisions come this much earlier.
    private let playoutDelay: Double
    /// The frame of the room alias the matcher's latest turns named, played in their alias slots.
    private var aliasFrame: [UInt8]?
    /// The alias the matcher's latest turns named, played as the short alias frame (`FrameFormat`), if given.
    private var alias: UInt16?

    /// - Parameters:
    ///   - rules: the sender's rules.
    ///   - airtime: one frame's airtime (s).
    ///   - ownFrames: the frames this device sends, which are not counted as other devices when heard.
    ///   - sense: the device's carrier sense, fed by its capture; by default one of this sender's own over every
    ///     inaudible profile's band (fed through ``captured(_:sampleRate:)``). A device with several senders, or
    ///     whose senders come and go while it listens, shares one that lives as long as its capture.
    ///   - seed: seed of the jitter and backoff draws; by default from the system's generator, so that no
    ///     two devices draw alike.
    ///   - playoutDelay: how long after the decision to send a frame its sound leaves the device (s), by which
    ///     the matcher's slots are brought forward.
    public init(rules: TransmitScheduler.Rules, airtime: Double, ownFrames: Set<[UInt8]>,
                sense: CarrierSense = CarrierSense(),
                seed: UInt64 = UInt64.random(in: .min ... .max), playoutDelay: Double = 0) {
        self.playoutDelay = playoutDelay.isFinite ? max(0, playoutDelay) : 0
        scheduler = TransmitScheduler(rules: rules, airtime: airtime, start: 0, seed: seed)
        self.ownFrames = ownFrames
        self.sense = sense
    }

    /// The band every inaudible profile uses together (Hz).
    public static let inaudibleBand: ClosedRange<Double> = {
        let bands = Profile.all.map(\.band).filter { $0.lowerBound > 10_000 }
        return bands.map(\.lowerBound).min()!...bands.map(\.upperBound).max()!
    }()

    private var now: Double {
        let elapsed = ContinuousClock.now - origin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
    }

    /// Captured samples at `sampleRate` (Hz), from the capture thread (a ``Listener``'s `onCapture`): passed to
    /// ``sense``.
    public func captured(_ block: UnsafeBufferPointer<Float>, sampleRate: Double) {
        sense.captured(block, sampleRate: sampleRate)
    }

    /// A frame was decoded on the capture side.
    public func heard(_ frame: [UInt8]) {
        guard !ownFrames.contains(frame) else { return }
        lock.withLock {
            guard frame != aliasFrame else { return }
            scheduler.heard(frame, at: now)
        }
    }

    /// Follows the matcher's turns: start the frame's sound at each of `slotOffsets` (s from now; the decision
    /// comes the playout delay earlier) and at no other time
    /// for `followFor` (s from now), then the sender's own rules again (`TransmitScheduler.follow`).
    /// - Parameters:
    ///   - slotOffsets: starts of the frame's slots (s from now).
    ///   - followFor: how long to follow them (s from now).
    public func follow(slotOffsets: [Double], followFor: Double) {
        lock.withLock {
            let time = now
            scheduler.follow(slots: slotOffsets.map { time + $0 - playoutDelay }, until: time + followFor, now: time)
        }
    }

    /// Follows the matcher's turns for a room alias: as ``follow(slotOffsets:followFor:)``, with `aliasFrame` (the
    /// alias's frame bytes) played in these slots instead of the device's own frame.
    /// - Parameters:
    ///   - slotOffsets: starts of the alias frame's slots (s from now).
    ///   - followFor: how long to follow them (s from now).
    ///   - aliasFrame: the frame to play in these slots (as decoded frames report it); nil: the device's own frame.
    ///   - alias: the alias itself, played as the short alias frame (``Decision/alias(_:)``) instead of `aliasFrame`
    ///     as a token frame; nil: `aliasFrame` as a token frame.
    public func follow(slotOffsets: [Double], followFor: Double, aliasFrame: [UInt8]?, alias: UInt16? = nil) {
        lock.withLock {
            let time = now
            if let aliasFrame { self.aliasFrame = aliasFrame; self.alias = alias }
            scheduler.follow(slots: slotOffsets.map { time + $0 - playoutDelay }, until: time + followFor, now: time,
                             alias: aliasFrame != nil)
        }
    }

    /// What the sender does in the coming device period.
    public enum Decision: Sendable, Equatable {
        /// Nothing: a period of silence.
        case silence
        /// Start the device's own frame.
        case ownFrame
        /// Start this frame (the room alias a slot of the matcher's turns names).
        case frame([UInt8])
        /// Start the short alias frame of this alias (the room alias a slot of the matcher's turns names).
        case alias(UInt16)
    }

    /// What to send in the coming device period (from the playback thread, once per device period). Without
    /// any captured audio yet, the band counts as idle since sensing cannot say otherwise.
    public func decide() -> Decision {
        let idleFor = sense.idleFor(at: .now)
        return lock.withLock {
            let time = now
            // Before any captured audio, idle for as long as this sender exists.
            switch scheduler.step(now: time, bandIdleFor: idleFor ?? time) {
            case .wait: return .silence
            case .transmit: return .ownFrame
            case .transmitAlias:
                if let alias { return .alias(alias) }
                return aliasFrame.map(Decision.frame) ?? .ownFrame
            }
        }
    }

    /// Whether the sender follows the matcher's turns now.
    public var isFollowing: Bool { lock.withLock { scheduler.isFollowing } }

    /// Whether to start a frame now (``decide()`` other than silence).
    public func shouldTransmit() -> Bool { decide() != .silence }

    /// Devices heard within the rules' memory.
    public var neighbours: Int { lock.withLock { scheduler.neighbours(at: now) } }
}
