/// Mixes bursts (frames as samples) placed at given sample positions into consecutive blocks of output,
/// for files of any length: only the bursts that reach into the block being rendered are kept, so memory
/// is bounded by the bursts in flight, not by the length of the output.
public struct BurstMixer: Sendable {
    private var active: [(start: Int, samples: [Float])] = []
    /// Index (samples) of the first sample of the next block.
    public private(set) var position = 0

    public init() {}

    /// Adds `samples` starting at sample `start`; the part before `position` (already rendered) is dropped.
    public mutating func add(_ samples: [Float], at start: Int) {
        guard start + samples.count > position else { return }
        active.append((start, samples))
    }

    /// Fills `block` with the sum of the bursts over samples `position ..< position + block.count`, then
    /// advances `position` and forgets the bursts that have ended.
    public mutating func render(into block: UnsafeMutableBufferPointer<Float>) {
        let blockStart = position, blockEnd = position + block.count
        block.update(repeating: 0)
        for burst in active {
            let from = max(blockStart, burst.start), to = min(blockEnd, burst.start + burst.samples.count)
            guard from < to else { continue }
            burst.samples.withUnsafeBufferPointer { samples in
                for i in from..<to { block[i - blockStart] += samples[i - burst.start] }
            }
        }
        position = blockEnd
        active.removeAll { $0.start + $0.samples.count <= blockEnd }
    }
}
