import RealModule

/// log(I0(x)) for x >= 0, the noncoherent detection metric: the log-likelihood ratio of a tone of known
/// amplitude with unknown phase. Relative error below 1e-4 everywhere; no overflow for large x.
@inlinable
public func logBesselI0(_ x: Float) -> Float {
    let ax = abs(x)
    if ax < 3.75 {
        // Abramowitz & Stegun 9.8.1.
        let t = (ax / 3.75) * (ax / 3.75)
        let i0 = 1 + t * (3.5156229 + t * (3.0899424 + t * (1.2067492 + t * (0.2659732 + t * (0.0360768 + t * 0.0045813)))))
        return Float.log(i0)
    }
    // A&S 9.8.2: I0(x) = exp(x) / sqrt(x) * P(3.75 / x).
    let u = 3.75 / ax
    let p = 0.39894228 + u * (0.01328592 + u * (0.00225319 + u * (-0.00157565 + u * (0.00916281
        + u * (-0.02057706 + u * (0.02635537 + u * (-0.01647633 + u * 0.00392377)))))))
    return ax - 0.5 * Float.log(ax) + Float.log(p)
}
