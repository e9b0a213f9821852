/// `value` with exactly `decimals` decimals, never a negative zero (tables and text output).
public func fixed(_ value: Double, _ decimals: Int) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    var rounded = (value * scale).rounded() / scale
    if rounded == 0 { rounded = 0 }  // never print a negative zero
    if decimals == 0 { return String(Int(rounded)) }
    var s = String(rounded)
    if let dot = s.firstIndex(of: ".") {
        let have = s.distance(from: dot, to: s.endIndex) - 1
        if have < decimals { s += String(repeating: "0", count: decimals - have) }
    }
    return s
}
