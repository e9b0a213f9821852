import SottoAudio
import SottoChannel
import SottoDSP

/// The first channel of an audio file, resampled (windowed sinc) to `rate` (Hz) when it differs. Held whole:
/// at most ``ChannelFile/longestBenchInput`` s (a longer one is an error saying so, before it is read).
public func readFirstChannel(_ path: String, at rate: Double) throws -> [Float] {
    let (samples, info) = try ChannelFile.read(path, channel: .channel(0), longest: ChannelFile.longestBenchInput,
                                               role: "a recording", tool: "bench")
    return info.sampleRate == rate ? samples : Channel.resample(samples, from: info.sampleRate, to: rate)
}

/// Power of `x` inside `band` (Hz): the mean square of the band-pass filtered signal, from one FFT.
/// - Throws: `FFTError` when the transform cannot be allocated or planned (out of memory).
public func bandPower(_ x: [Float], sampleRate: Double, band: ClosedRange<Double>) throws(FFTError) -> Double {
    guard !x.isEmpty else { return 0 }
    let n = fastFFTSize(atLeast: x.count)
    let fft = try RealFFT(checkedSize: n)
    for i in 0..<n { fft.input[i] = i < x.count ? x[i] : 0 }
    fft.execute()
    var sum = 0.0
    let lo = Int((band.lowerBound / sampleRate * Double(n)).rounded(.up))
    let hi = min(n / 2, Int((band.upperBound / sampleRate * Double(n)).rounded(.down)))
    guard hi >= lo else { return 0 }
    for k in lo...hi {
        let re = Double(fft.output[2 * k]), im = Double(fft.output[2 * k + 1])
        sum += re * re + im * im
    }
    // Parseval for a one-sided spectrum: mean square = 2 * sum |X_k|^2 / n^2 (k inside (0, n/2)).
    return 2 * sum / (Double(n) * Double(n)) * Double(n) / Double(x.count)
}
