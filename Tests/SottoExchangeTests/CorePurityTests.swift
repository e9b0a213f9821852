import Foundation
import Testing

/// SottoExchangeCore stays pure: its manifest keeps logging, NIO and the service out (it does not depend on
/// them), and this test what a dependency cannot: no clock read, no Task, no thread, lock or sleep in its
/// sources (generated protobuf code aside). Time is an argument of the core; its hosts own the clocks.
@Suite struct CorePurityTests {
    static let forbidden = [#"\bTask\b"#, #"\bDate\("#, #"ContinuousClock"#, #"SuspendingClock"#, #"\.now\b"#, #"\bThread\b"#,
                            #"\bMutex\b"#, #"NSLock"#, #"Dispatch"#, #"\bsleep\("#, #"import (Logging|NIO|SottoExchange\b)"#]

    @Test func theCoreReadsNoClockAndStartsNoTask() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/SottoExchangeCore")
        let enumerator = try #require(FileManager.default.enumerator(atPath: root.path))
        let files = enumerator.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") && !$0.hasPrefix("Snapshot/Generated/") }
        #expect(files.count >= 10, "\(files)")
        let patterns = try Self.forbidden.map { try Regex($0) }
        for file in files {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                for pattern in patterns where code.contains(pattern) {
                    Issue.record("\(file):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
    }
}
