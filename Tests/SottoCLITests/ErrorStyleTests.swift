import Foundation
import Testing

/// One error style: every failure a command reports starts with "Error: " (as ArgumentParser's usage errors
/// do), with the status of the exit-status table.
struct ErrorStyleTests {
    @Test func failuresOfDifferentKindsStartAlike() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("nope.wav").path
        let cases: [(arguments: [String], status: Int32)] = [
            (["decode", missing], 2),                                           // a file that cannot be read
            (["serve", "--listen", "127.0.0.1:0", "--drain", "-1"], 64),        // a bad value
            (["admin", "project", "list", "--store", "mysql://x"], 64),         // an unknown scheme
            (["nosuchcommand"], 64),                                            // an unknown command
        ]
        for (arguments, status) in cases {
            let result = try Sotto.run(arguments, timeout: 30)
            #expect(result.status == status, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.hasPrefix("Error: "), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("error: "), "\(arguments): \(result.stderr)")
        }
    }
}
