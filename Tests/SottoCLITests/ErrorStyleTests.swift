import Foundation
import Testing

/// One error style: every failure a command reports starts with "error: " in lower case (ArgumentParser's own
/// messages rewritten to it), with the status of the exit-status table.
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
            (["send", "--nosuchoption"], 64),                                   // ArgumentParser's own message
            (["help", "nosuchtopic"], 64),                                      // help for no command
            (["subscribe", "--server", "sotto//127.0.0.1:1", "--api-key", "k", "--input", "/dev/null"], 64),  // a malformed URL
        ]
        for (arguments, status) in cases {
            let result = try Sotto.run(arguments, timeout: 30)
            #expect(result.status == status, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.hasPrefix("error: "), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("Error: "), "\(arguments): \(result.stderr)")
        }
    }
}
