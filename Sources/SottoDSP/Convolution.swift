/// Full linear convolution of `x` and `h` (length x.count + h.count - 1) by FFT (FFTW).
/// - Throws: ``FFTError`` when the transforms cannot be allocated or planned (out of memory).
public func fftConvolve(_ x: [Float], _ h: [Float]) throws(FFTError) -> [Float] {
    guard !x.isEmpty, !h.isEmpty else { return [] }
    let length = x.count + h.count - 1
    let size = fastFFTSize(atLeast: length)
    let fx = try RealFFT(checkedSize: size), fh = try RealFFT(checkedSize: size), inverse = try InverseRealFFT(checkedSize: size)
    for i in 0..<size {
        fx.input[i] = i < x.count ? x[i] : 0
        fh.input[i] = i < h.count ? h[i] : 0
    }
    fx.execute()
    fh.execute()
    let scale = 1 / Float(size)
    for k in 0...(size / 2) {
        let ar = fx.output[2 * k], ai = fx.output[2 * k + 1], br = fh.output[2 * k], bi = fh.output[2 * k + 1]
        inverse.input[2 * k] = (ar * br - ai * bi) * scale
        inverse.input[2 * k + 1] = (ar * bi + ai * br) * scale
    }
    inverse.execute()
    return Array(inverse.output[0..<length])
}

/// Linear convolution of a signal of any length with a fixed response, block by block (FFTW, overlap-add):
/// feed the signal in pieces of any size with ``process(_:)``, then call ``finish()``; the outputs joined are
/// `fftConvolve(x, response)` (`x.count + response.count - 1` samples) within float rounding. Memory: a few
/// transforms of at least twice the response's length, whatever the signal's length.
///
/// One owner; not for concurrent use.
public final class OverlapAddConvolver {
    /// Samples of the response.
    public let responseLength: Int
    /// Input samples per transform.
    public let blockLength: Int
    private let forward: RealFFT
    private let inverse: InverseRealFFT
    /// The response's spectrum scaled by 1 / size (interleaved re, im).
    private let spectrum: [Float]
    /// Input gathered for the next block.
    private var pending: [Float] = []
    /// The tail of earlier blocks still to be added (`responseLength - 1` samples).
    private var overlap: [Float]

    /// Prepares the transforms for `response` (non-empty).
    /// - Parameters:
    ///   - response: the impulse response (samples).
    ///   - minimumBlock: fewest input samples per transform (more only cost memory; default 16 384).
    /// - Throws: ``FFTError`` when the transforms cannot be allocated or planned.
    public init(response: [Float], minimumBlock: Int = 16_384) throws(FFTError) {
        let h = response
        responseLength = max(1, h.count)
        let size = fastFFTSize(atLeast: max(2 * responseLength, minimumBlock + responseLength - 1))
        blockLength = size - responseLength + 1
        forward = try RealFFT(checkedSize: size)
        inverse = try InverseRealFFT(checkedSize: size)
        for i in 0..<size { forward.input[i] = i < h.count ? h[i] : 0 }
        forward.execute()
        let scale = 1 / Float(size)
        spectrum = forward.output.map { $0 * scale }
        overlap = [Float](repeating: 0, count: responseLength - 1)
        pending.reserveCapacity(blockLength)
    }

    /// Takes the next input samples; returns the output samples now complete (a whole number of blocks).
    /// - Parameter input: the next samples of the signal.
    public func process(_ input: some Collection<Float>) -> [Float] {
        var output: [Float] = []
        var index = input.startIndex
        while index != input.endIndex {
            let take = min(blockLength - pending.count, input.distance(from: index, to: input.endIndex))
            let end = input.index(index, offsetBy: take)
            pending += input[index..<end]
            index = end
            if pending.count == blockLength { output += transformBlock(emitting: blockLength) }
        }
        return output
    }

    /// Ends the signal: returns the rest of the output (the last partial block and the response's tail).
    public func finish() -> [Float] {
        let count = pending.count
        let rest = transformBlock(emitting: count + responseLength - 1)
        overlap = [Float](repeating: 0, count: responseLength - 1)
        return rest
    }

    /// Convolves `pending` (zero-padded) with the response, adds the overlap, returns the first `emitting`
    /// samples and keeps the following `responseLength - 1` as the new overlap.
    private func transformBlock(emitting: Int) -> [Float] {
        let size = forward.size
        let count = pending.count
        for i in 0..<size { forward.input[i] = i < count ? pending[i] : 0 }
        pending.removeAll(keepingCapacity: true)
        forward.execute()
        for k in 0...(size / 2) {
            let ar = forward.output[2 * k], ai = forward.output[2 * k + 1], br = spectrum[2 * k], bi = spectrum[2 * k + 1]
            inverse.input[2 * k] = ar * br - ai * bi
            inverse.input[2 * k + 1] = ar * bi + ai * br
        }
        inverse.execute()
        let y = inverse.output
        var output = [Float](repeating: 0, count: emitting)
        for i in 0..<emitting { output[i] = y[i] + (i < overlap.count ? overlap[i] : 0) }
        // The overlap (responseLength - 1 samples, at most blockLength - 1) lies within the emitted samples of a
        // whole block; after a partial block nothing follows.
        var next = [Float](repeating: 0, count: responseLength - 1)
        if emitting == blockLength {
            for i in 0..<next.count { next[i] = y[blockLength + i] }
        }
        overlap = next
        return output
    }
}
