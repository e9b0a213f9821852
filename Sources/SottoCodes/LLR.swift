/// Conventions for log-likelihood ratios (LLRs) shared by the demapper and the decoders.
///
/// An LLR is `log p(observation | bit = 0) − log p(observation | bit = 1)`: positive means 0 is more likely, the
/// magnitude is the confidence and 0 means "no information" (an erasure).
///
/// Decoders accept any `Float`: `NaN` is read as 0 and anything beyond ±``limit`` (including infinities) as ±``limit``,
/// so no input can poison the path metrics.
public enum LLR {
    /// The largest magnitude the demapper writes and the decoders use (e^10000 is certainty for any purpose).
    public static let limit: Float = 10_000

    /// `value` with `NaN` replaced by 0 and the magnitude clamped to ``limit``.
    @inlinable
    public static func sanitized(_ value: Float) -> Float {
        value.isNaN ? 0 : min(max(value, -limit), limit)
    }
}
