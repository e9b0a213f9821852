/// Bytes as lowercase hexadecimal text and back, for tokens, IDs and keys in files, records and messages.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lowercase hex of `bytes`, two digits a byte, no prefix.
    /// - Parameter bytes: any bytes.
    public static func encode(_ bytes: [UInt8]) -> String {
        var text = [UInt8]()
        text.reserveCapacity(2 * bytes.count)
        for byte in bytes { text.append(digits[Int(byte >> 4)]); text.append(digits[Int(byte & 15)]) }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of hex text (either case, no prefix, no separators); nil when `text` has an odd number of
    /// digits or anything that is not one. The empty text is no bytes.
    /// - Parameter text: the hex digits.
    public static func decode(_ text: String) -> [UInt8]? {
        let characters = Array(text.utf8)
        guard characters.count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(characters.count / 2)
        for index in stride(from: 0, to: characters.count, by: 2) {
            guard let high = value(characters[index]), let low = value(characters[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
