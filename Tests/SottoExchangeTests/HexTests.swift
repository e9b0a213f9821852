import SottoSupport
import Testing

@Suite struct HexTests {
    @Test func bytesRoundTripAndBadTextIsRefused() {
        var rng = SystemRandomNumberGenerator()
        for count in [0, 1, 7, 32, 1000] {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = Hex.encode(bytes)
            #expect(text.count == 2 * count && text == text.lowercased())
            #expect(Hex.decode(text) == bytes)
            #expect(Hex.decode(text.uppercased()) == bytes)
        }
        #expect(Hex.encode([0x00, 0x0f, 0xa5, 0xff]) == "000fa5ff")
        for bad in ["0", "abc", "0g", "0x01", " 01", "01 ", "é1"] { #expect(Hex.decode(bad) == nil, "\(bad)") }
    }
}
