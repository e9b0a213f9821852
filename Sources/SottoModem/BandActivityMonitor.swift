import RealModule
import SottoDSP

/// Carrier sense for listen-before-talk: tells whether someone is transmitting in a band right now.
///
/// The input is cut into blocks of `blockDuration` (about 10 ms); the power in the band (Hann window, FFTW)
/// of each block and the one before it together is compared with the band's noise floor, the smallest such
/// power of the last `floorMemory` seconds (minimum statistics, kept as the minima of eight sub-windows).
/// A block more than `thresholdDB` above the floor is busy: with the default 6 dB, a burst whose in-band power
/// is about that of the noise or more (in-band SNR from about 0 dB). Pairs of blocks, not single ones, keep
/// the floor's estimate steady: the least of hundreds of single 10 ms powers lies far below their mean, and
/// a threshold over it is crossed by noise alone. A burst of any profile in the band, and its echoes while they
/// stay above the threshold, make the band busy; steady noise does not, whatever its level. A band that has
/// been busy without a break for the whole `floorMemory` raises the floor; the default of 4 s is longer than
/// any frame with its echoes.
///
/// No I/O: feed it the samples the decoder gets. Not thread-safe (one owner).
public final class BandActivityMonitor {
    /// The band watched (Hz).
    public let band: ClosedRange<Double>
    /// Input sample rate (Hz).
    public let sampleRate: Double
    /// Samples per block.
    public let blockSize: Int
    /// How far above the noise floor a block is busy (dB).
    public let thresholdDB: Double
    private let threshold: Double
    private let fft: RealFFT
    private let window: [Float]
    private let bins: Range<Int>
    private var filled = 0
    private var subWindowMinima: [Double]
    private var subWindowBlocks: Int
    private var currentMinimum = Double.infinity
    private var blocksInSubWindow = 0
    private var subWindowIndex = 0
    private var floorKnown = false
    private var previousPower = 0.0
    /// Blocks seen so far.
    public private(set) var blocks = 0
    /// Power of the latest block in the band over the noise floor (dB); 0 before the floor is known.
    public private(set) var latestExcessDB = 0.0
    /// Whether the latest complete block was busy.
    public private(set) var isBusy = false
    /// Samples consumed so far (time = samples / sampleRate).
    public private(set) var samplesSeen = 0
    /// Sample index just after the last busy block (0 if none yet).
    public private(set) var lastBusyEnd = 0

    /// - Parameters:
    ///   - band: the band to watch (Hz), for instance every inaudible profile's band together.
    ///   - sampleRate: input rate (Hz).
    ///   - blockDuration: block length (s), rounded to a power of two of samples.
    ///   - thresholdDB: margin over the noise floor that counts as busy (dB).
    ///   - floorMemory: how far back the noise floor looks (s).
    /// - Throws: `FFTError` (SottoDSP) when its transform cannot be allocated or planned (out of memory).
    public init(band: ClosedRange<Double>, sampleRate: Double, blockDuration: Double = 0.01,
                thresholdDB: Double = 6, floorMemory: Double = 4) throws(FFTError) {
        self.band = band
        self.sampleRate = sampleRate
        var size = 64
        while Double(size) < blockDuration * sampleRate { size *= 2 }
        blockSize = size
        self.thresholdDB = thresholdDB
        threshold = pow10(thresholdDB / 10)
        fft = try RealFFT(checkedSize: size)
        window = (0..<size).map { Float(0.5 - 0.5 * Double.cos(2 * Double.pi * Double($0) / Double(size))) }
        let binWidth = sampleRate / Double(size)
        let low = max(1, Int((band.lowerBound / binWidth).rounded(.up)))
        let high = min(size / 2, Int((band.upperBound / binWidth).rounded(.down)))
        bins = low..<max(low + 1, high + 1)
        let blocksInMemory = max(8, Int(floorMemory * sampleRate / Double(size)))
        subWindowBlocks = blocksInMemory / 8
        subWindowMinima = [Double](repeating: .infinity, count: 8)
    }

    /// Takes samples of any count.
    public func process(_ samples: UnsafeBufferPointer<Float>) {
        var index = 0
        while index < samples.count {
            let take = min(blockSize - filled, samples.count - index)
            for i in 0..<take { fft.input[filled + i] = samples[index + i] * window[filled + i] }
            filled += take
            index += take
            samplesSeen += take
            if filled == blockSize {
                filled = 0
                finishBlock()
            }
        }
    }

    /// Takes samples of any count.
    public func process(_ samples: [Float]) {
        samples.withUnsafeBufferPointer { process($0) }
    }

    /// Whether the band has been idle (no busy block) for at least `duration` seconds up to now.
    public func idle(for duration: Double) -> Bool {
        !isBusy && Double(samplesSeen - lastBusyEnd) >= duration * sampleRate
    }

    private func finishBlock() {
        fft.execute()
        var power = 0.0
        for k in bins {
            let re = Double(fft.output[2 * k]), im = Double(fft.output[2 * k + 1])
            power += re * re + im * im
        }
        blocks += 1
        let blockPower = power
        power = blocks == 1 ? blockPower : 0.5 * (blockPower + previousPower)
        previousPower = blockPower
        let floor = subWindowMinima.reduce(currentMinimum, min)
        if floorKnown && floor > 0 {
            latestExcessDB = 10 * Double.log10(max(power, 1e-30) / floor)
            isBusy = power > threshold * floor
        } else {
            latestExcessDB = 0
            isBusy = false
        }
        if isBusy { lastBusyEnd = samplesSeen }
        // Minimum statistics: the floor is the least block power of the last eight sub-windows.
        currentMinimum = min(currentMinimum, max(power, 1e-30))
        blocksInSubWindow += 1
        if blocksInSubWindow >= subWindowBlocks {
            subWindowMinima[subWindowIndex] = currentMinimum
            subWindowIndex = (subWindowIndex + 1) % subWindowMinima.count
            currentMinimum = .infinity
            blocksInSubWindow = 0
        }
        // The floor is usable after a few blocks (the first sub-window's minimum so far).
        if blocks >= 4 { floorKnown = true }
    }
}
