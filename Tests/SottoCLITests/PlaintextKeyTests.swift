import Foundation
import Testing

/// The client never sends its API key in plaintext beyond this machine unless told `--insecure`.
@Suite struct PlaintextKeyTests {
    @Test func plaintextToARemoteServiceIsAUsageError() throws {
        for command in [["subscribe", "--namespace", "museum", "--type", "exhibit"], ["publish", "--namespace", "museum", "--type", "exhibit", "--text", "hi"]] {
            let result = try Sotto.run(command + ["--server", "192.0.2.1:7457", "--api-key", "sotto_abc_def"], timeout: 20)
            #expect(result.status == 64, "\(command[0]): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("plaintext") && result.stderr.contains("--insecure"), "\(result.stderr)")
        }
        // Knowingly insecure: the refusal is gone, and the next check speaks (an invalid --lost-timeout, given
        // to both runs so that neither connects: without --insecure the refusal comes first).
        let base = ["subscribe", "--namespace", "museum", "--type", "exhibit", "--server", "192.0.2.1:7457", "--api-key", "sotto_abc_def",
                    "--lost-timeout", "0"]
        let refused = try Sotto.run(base, timeout: 20)
        #expect(refused.status == 64 && refused.stderr.contains("plaintext"), "\(refused.stderr)")
        let insecure = try Sotto.run(base + ["--insecure"], timeout: 20)
        #expect(insecure.status == 64 && !insecure.stderr.contains("plaintext") && insecure.stderr.contains("--lost-timeout"), "\(insecure.stderr)")
    }
}
