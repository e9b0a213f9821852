import CFuzzerDriver
import ArgumentParser

/// One input: the bytes as a string (invalid UTF-8 repaired, as the command line does) through the
/// token parsers and the numeric-option check, with their invariants.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzParsers(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let bytes = try? TokenInput.bytes(hex: text, text: nil) {
        // What parsed as hex prints back as the same digits.
        var digits = text.lowercased()
        if digits.hasPrefix("0x") { digits.removeFirst(2) }
        digits.removeAll { ":- _".contains($0) }
        precondition(bytes.hex == digits, "hex \(text) -> \(bytes.hex)")
    }
    if let bytes = try? TokenInput.bytes(hex: nil, text: text) {
        precondition(bytes == Array(text.utf8) && !text.unicodeScalars.contains("\u{FFFD}"))
    }
    _ = try? TokenInput.parse(hex: text, text: nil)
    _ = ProfileSelection(argument: text)
    _ = ChannelArgument(argument: text)
    if let value = Double(text) {
        let option = NumericOption("--x", above: 0, upTo: 86_400, unit: "s")
        let accepted = (try? option.check(value)) != nil
        precondition(accepted == (value.isFinite && value > 0 && value <= 86_400), "\(value)")
    }
    if let value = Int(text) { _ = try? NumericOption("--n", 1...100).check(value) }
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzParsers_main")
public func fuzzParsersMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzParsers(data, size) })
}
