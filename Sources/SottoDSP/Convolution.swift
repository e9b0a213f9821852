/// Full linear convolution of `x` and `h` (length x.count + h.count - 1) by FFT (FFTW).
public func fftConvolve(_ x: [Float], _ h: [Float]) -> [Float] {
    guard !x.isEmpty, !h.isEmpty else { return [] }
    let length = x.count + h.count - 1
    let size = fastFFTSize(atLeast: length)
    let fx = RealFFT(size: size), fh = RealFFT(size: size), inverse = InverseRealFFT(size: size)
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
