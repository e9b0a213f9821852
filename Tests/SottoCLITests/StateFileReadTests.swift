import Foundation
import SottoDaemon
import Testing

extension ControlProtocolTests {
    /// A state file that is there but cannot be read (here a directory in its place) is not taken for "no
    /// operations": it is moved aside with a warning, so the next save does not replace it unseen, and saving
    /// works again.
    @Test func aStateFileThatCannotBeReadIsKeptAsideNotIgnored() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = OperationStore(file: dir.appendingPathComponent("operations.json"))
        try FileManager.default.createDirectory(at: store.file, withIntermediateDirectories: true)
        try Data("kept".utf8).write(to: store.file.appendingPathComponent("inside"))
        let loaded = store.load()
        #expect(loaded.operations.isEmpty)
        #expect(loaded.warning?.contains("cannot be read") == true && loaded.warning?.contains("kept as") == true, "\(loaded.warning ?? "no warning")")
        let aside = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("operations.json.corrupt-") }
        #expect(aside.count == 1)
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent(aside.first ?? "-").appendingPathComponent("inside").path))
        let saved = [SavedOperation(id: "0123456789ab", spec: OperationSpec(kind: .subscribe, persistent: true), expiresAt: nil)]
        try store.save(saved)
        #expect(store.load().operations == saved && store.load().warning == nil)
    }
}
