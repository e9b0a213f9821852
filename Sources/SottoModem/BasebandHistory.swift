/// The recent complex baseband of one receiver: a ring buffer of the last `capacity` samples, addressed
/// by stream position (baseband samples since the stream started; position `n` lives at `n & mask`).
///
/// The band extractor appends to it; every later stage reads it: the tone metric, the noise probes of
/// the SNR report and the coherent detector's interpolation. It is a class because it owns its buffers
/// (allocated once, sized for the longest frame): one owner, the receiver, which lends it to its stages.
final class BasebandHistory {
    /// Samples held (a power of two).
    let capacity: Int
    /// `capacity - 1`.
    let mask: Int
    /// Real and imaginary parts (full scale: a cosine of amplitude 1 in the band has magnitude 1).
    let real: UnsafeMutableBufferPointer<Float>
    let imaginary: UnsafeMutableBufferPointer<Float>
    /// Samples appended so far: the stream position of the next one.
    private(set) var count = 0

    /// - Parameter minimumCapacity: samples that must stay readable (rounded up to a power of two).
    init(minimumCapacity: Int) {
        var capacity = 1024
        while capacity < minimumCapacity { capacity *= 2 }
        self.capacity = capacity
        mask = capacity - 1
        real = .zeroed(capacity)
        imaginary = .zeroed(capacity)
    }

    deinit {
        real.deallocate()
        imaginary.deallocate()
    }

    /// Appends a run of samples: copied in at most two contiguous pieces per buffer (the ring wraps once at
    /// most per piece; a run longer than the ring keeps its last `capacity` samples).
    func append(real re: UnsafeBufferPointer<Float>, imaginary im: UnsafeBufferPointer<Float>) {
        precondition(im.count == re.count, "baseband history: \(re.count) real and \(im.count) imaginary samples")
        let total = re.count
        var done = max(0, total - capacity)
        while done < total {
            let slot = (count + done) & mask
            let run = min(total - done, capacity - slot)
            (real.baseAddress! + slot).update(from: re.baseAddress! + done, count: run)
            (imaginary.baseAddress! + slot).update(from: im.baseAddress! + done, count: run)
            done += run
        }
        count += total
    }

    /// True when position `position` is still held once `now` samples have been written (positions
    /// before the stream's start read as silence and count as held). Decisions use the stage's own
    /// clock for `now`, not `count`, so that they do not depend on how far the last block reached.
    func holds(_ position: Int, at now: Int) -> Bool { position > now - mask }

    /// Mean power |x|^2 per sample over `length` samples from `first`.
    func meanPower(from first: Int, length: Int) -> Double {
        var sum = 0.0
        for n in first..<(first + length) {
            let r = real[n & mask], i = imaginary[n & mask]
            sum += Double(r * r + i * i)
        }
        return sum / Double(max(length, 1))
    }
}

extension UnsafeMutableBufferPointer<Float> {
    /// A buffer of `count` zeros (the caller deallocates it).
    static func zeroed(_ count: Int) -> Self {
        let buffer = Self.allocate(capacity: count)
        buffer.initialize(repeating: 0)
        return buffer
    }
}
