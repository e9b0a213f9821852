/// Comparisons whose time does not depend on where two secrets differ (API keys' hashes, resume secrets' hashes).
public enum ConstantTime {
    /// Equal contents, in a time that depends only on the lengths.
    public static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in a.indices { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}
