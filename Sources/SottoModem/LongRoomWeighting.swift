/// How much the coherent detector's decisions are worth, symbol by symbol, in a long room.
///
/// There the diffuse tail beyond the room model (74 ms) is the largest error the model leaves, and it
/// is not stationary: it builds up from the preamble through the frame (RT60 3 s, direct sound 10 dB
/// under its tail: from about a fifth of the direct sound at the first data symbol to about seven times
/// it from 0.5 s on). `CoherentDetector.likelihoods` scales every symbol's costs by one variance for the
/// frame (the median of what the best candidates leave unexplained), so the clean symbols at the start
/// weigh no more than the buried ones after them. This scales each symbol's costs by what the best
/// candidates leave unexplained around it instead, so the code trusts the early symbols and leans less
/// on the late ones.
///
/// Measured on the failing seeds (`sotto bench sweep rooms`, long synthetic room, 8 and 16 bytes): the
/// coherent decision gets 17 % (8 bytes) and 28 % (16 bytes) of the symbols wrong at the right length,
/// fewer in the first quarter; the wrong tones are ones the frame sent 9-80 symbols earlier slightly
/// more often than others (a recent-use weight of 1.05 against 0.77 on average), but weighing each tone
/// by that (a per-tone variance from the decided symbols, whitening the costs) lost frames (16 bytes:
/// 50 -> 27.5 % of 40; 8 bytes 87.5 -> 70 %), where this per-symbol variance gained them (50 -> 72.5 %;
/// 8 bytes 87.5 -> 87.5 %).
enum LongRoomWeighting {
    /// Symbols on each side of a symbol whose residuals give its variance: the tail changes little in
    /// nine symbols (80 ms: about 1.6 dB at RT60 3 s) while one symbol's residual is a poor estimate.
    /// Measured on the long synthetic room at 16 bytes, 40 frames (`sotto bench sweep rooms --lengths 16
    /// --trials 40`): 2 -> 65 %, 3 -> 65 %, 4 -> 65 %, 6 -> 67.5 %, 8 -> 67.5 %, 16 -> 62.5 %, the median
    /// instead of the mean over 4 each side 67.5 %; the frame-wide median of before: 55 %.
    static let neighbours = 4

    /// Log-likelihoods (16 per symbol) from the coherent detector's `costs` (16 per symbol: the squared
    /// distance of the best candidate pair with each value, over a window of `windowSamples` grid
    /// samples), each symbol's scaled by the mean residual (its best candidate's cost) over itself and
    /// `neighbours` symbols each side, per grid sample, and never by less than `noiseVariance` (the
    /// noise measured before the frame, per sample).
    static func likelihoods(costs: [Float], symbols: Int, windowSamples: Int, noiseVariance: Double) -> [Float] {
        precondition(costs.count >= 16 * symbols && symbols > 0)
        let residuals = (0..<symbols).map { k in costs[(16 * k)..<(16 * k + 16)].min() ?? 0 }
        let floor = Float(noiseVariance)
        var likelihoods = [Float](repeating: 0, count: 16 * symbols)
        for k in 0..<symbols {
            let around = max(0, k - neighbours)..<min(symbols, k + neighbours + 1)
            let mean = residuals[around].reduce(0, +) / Float(around.count)
            let variance = max(mean / Float(windowSamples), floor, .leastNormalMagnitude)
            for m in 0..<16 { likelihoods[16 * k + m] = -costs[16 * k + m] / variance }
        }
        return likelihoods
    }
}
