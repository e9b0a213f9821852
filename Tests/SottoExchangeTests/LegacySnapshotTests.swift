import HeapModule
import Testing
@testable import SottoExchange
@testable import SottoExchangeCore

// Snapshots of the hand-written format (4, before the protobuf format 5) are still read: a node of this build
// starts from the snapshot an older node left in the shared database. The fixture below was written by the
// old writer (MatcherCore.snapshot() of format 4, before it was removed) for the state `scenario()` builds.

@Suite struct LegacySnapshotTests {
    /// A core that has seen some of everything: sessions, publications and subscriptions with what they found,
    /// fixed and rotating beacons, rotated and retired tokens, sightings, pending deadlines, turns.
    static func scenario() -> MatcherCore {
        var drawer = InputDrawer(random: CountingGenerator(state: 7))
        var core = DrivenMatcher(core: MatcherCore(rotationInterval: 40, rotationGrace: 3, generator: CountingGenerator(state: 7)))
        core.core.turns = BroadcastCoordinator(rules: .init())
        var now = 0.0
        for step in 0..<300 {
            now += drawer.timeStep()
            let input: AbstractInput
            if step < drawer.sessions.count {
                input = .input(.openSession(drawer.sessions[step], appID: "app", broadcasts: true))
            } else if step % 50 == 7 {
                input = .input(.takeTurns(drawer.pick(drawer.sessions), frameAirtime: 0.54, aliasAirtime: 0.29))
            } else {
                input = drawer.next(now: now)
            }
            _ = core.apply(input, now: now)
        }
        return core.core
    }

    /// Everything a restored core holds, described independently of dictionary order (deadlines without
    /// their tie-breaking sequence numbers, which follow dictionary order).
    static func state(_ core: MatcherCore) -> [String] {
        [[String(core.tokenLength), String(core.rotationInterval), String(core.rotationGrace), String(core.deadlineSequence)],
         MatcherSnapshotTests.tables(core, orderless: true),
         MatcherSnapshotTests.described(core.matchingDeadlines.unordered, sequence: false),
         MatcherSnapshotTests.described(core.tokenDeadlines.unordered, sequence: false),
         [MatcherSnapshotTests.canonical(core.turns as Any, true)]].flatMap { $0 }
    }

    @Test func aFormat4SnapshotIsReadAndWrittenAgainAsFormat5() throws {
        let bytes = Self.fixture
        #expect(Array(bytes[4..<8]) == [4, 0, 0, 0])
        let restored = try MatcherCore(snapshot: bytes, generator: CountingGenerator(state: 1))
        let expected = Self.scenario()
        #expect(restored.sessionCount == 4 && restored.turns != nil && restored.beacons.count == 2 && restored.rotations.count == 1)
        #expect(restored.tokenDeadlines.count == 35 && restored.matchingDeadlines.count == 13 && restored.retired.count == 31)
        #expect(Self.state(restored) == Self.state(expected))
        let rewritten = restored.snapshot()
        #expect(Array(rewritten[4..<8]) == [5, 0, 0, 0])
        #expect(Self.state(try MatcherCore(snapshot: rewritten, generator: CountingGenerator(state: 1))) == Self.state(expected))
        // Damage the checksum cannot see still fails as corrupt in the old format.
        var state = Array(bytes[MatcherCore.snapshotHeaderSize...])
        state.removeLast(5)
        var resealed = Array(bytes[..<8]) + MatcherSnapshotTests.littleEndian(UInt64(state.count))
        resealed += MatcherSnapshotTests.littleEndian(MatcherCore.checksum(state[...])) + state
        #expect(throws: MatcherSnapshotError.self) { try MatcherCore(snapshot: resealed, generator: CountingGenerator(state: 1)) }
    }

    /// MatcherCore.snapshot() of format 4 for `scenario()`.
    static let fixture: [UInt8] = hexBytes([
        "534d435304000000b00b00000000000021e5b1a78cde120f1000000000000044400000000000000840040253320361707000000000000000",
        "000000000002533103617070010108810843bfbd54ca891683c0caa1d574400100145f5f72657365727665645f6e616d6573706163650d5f",
        "5f617564696f5f62797465730107020000d804018d6ce7fba9cc8340011403000302040200000e000000000000144001906ce7fba9b77640",
        "02066d757365756d076578686962697401000101080102030405060708bbf3fdd478677640cbf3e0eeac3d3140c086a757ca123fc0145f5f",
        "72657365727665645f6e616d657370616365115f5f736f74746f5f626561636f6e5f69640801020304050607080101080102030405060708",
        "bbf3fdd478677640cbf3e0eeac3d3140c086a757ca123fc0010108010203040506070802145f5f72657365727665645f6e616d6573706163",
        "65115f5f736f74746f5f626561636f6e5f6964080102030405060708066d757365756d0765786869626974010002066d757365756d076578",
        "68696269740100cbf3e0eeac3d3140145f5f72657365727665645f6e616d657370616365115f5f736f74746f5f626561636f6e5f69640801",
        "02030405060708cbf3e0eeac3d3140025335056f74686572010108999b8260d493cd3a836abc74933876400000025334036170700101081b",
        "6635de56390aea836abc74933876400002140100020001000000000000144000000000160201066d757365756d0765786869626974030200",
        "00d80400000000000034400125dbf97e6a7c8440000000020801020304050607080361707001066d757365756d0765786869626974010000",
        "02beac0361707001066d757365756d07657868696269740101000108010203040506070810fefefefefefefefefefefefefefefefe000000",
        "0000003e4009089832601d6200a3ec0253350008810843bfbd54ca890253310008999b8260d493cd3a0253350008854fd7725c3565010253",
        "310008219d11e24f61ea4102533100080d61af19ec39eabf02533200081b6635de56390aea02533400084365b09c4fa30827025333000801",
        "d5e35e0899c800025333001f08f235ee3bc773b0bf2cb29defa7a263400841bff41b3788d9032cb29defa7a263400866ad3cfc2d8573442c",
        "b29defa7a2634008327fcff620e45e0c4f62105839944d4008df3b85d2cdc289ae6991ed7c3fcd5a4008366fe740362352f67793180456aa",
        "7240086a806f96dd75cb364f62105839944d40086ece896ea5efd47b4f62105839944d40083fcf0de3121707952cb29defa7a26340087b5a",
        "6b2d0b7098724f62105839944d4008284db6894ffb49587e6abc7493ec68400803e63b9a13c2373a7e6abc7493ec684008923194b02907c7",
        "cd836abc7493387640089226ccee247b8ecd355eba490c566e4008445bc1f2e2f7c7616991ed7c3fcd5a40083489853c4cfade986991ed7c",
        "3fcd5a4008251ebf6f93c06367a445b6f3fd9e72400824f46a6c4dcb3496a445b6f3fd9e7240082407ac8ce852c02e355eba490c566e4008",
        "17b425873c66d38c4f62105839944d40089d43ed1f56b1b1006991ed7c3fcd5a4008752fe28768b85adac0f5285c8fea66400851ea5a6c06",
        "d96a982cb29defa7a263400881df586a558847fb6991ed7c3fcd5a4008f134084fe7ad0c606991ed7c3fcd5a4008652ced6d8b3b81532cb2",
        "9defa7a2634008e1eb65497afe0ee7dacef753e3d1704008136538e96bc061154f62105839944d4008e58f250aba2b8aed7e6abc7493ec68",
        "4008d42009e12a39eebc8495438b6cb1744008b25467e6b6106c4d836abc749338764003025334040102beac8a16d9cef7d172400c022b87",
        "169936407b14ae47e14a4bc000025332673bdf4f8dc774407feecb99edb629402bca5b64f1d53ec0020107d64d621058057340088a1f63ee",
        "ba2440c876be9f1aff33c001010be5a59bc420fc7040986e1283c0ca03c017d9cef753134ac00253310200025332a6703d0ad7ff7040b6b0",
        "d9573fa63140bd886063318c35c001080102030405060708bbf3fdd478677640cbf3e0eeac3d3140c086a757ca123fc00253320200025334",
        "538d976e12d37440e04f8d976e121f40c64b3789418035c00102beac4f62105839e6704020dbf97e6abcd4bfdf4f8d976e7234c006000253",
        "3401025332010801020304050607080102533101010b010253340102beac020253320253340002533202025334025331020107010253340d",
        "b8f3fdd478b77640b8010002533101080102030405060708bbf3fdd478677640000000000000144025dbf97e6a7c8440b601020253341625",
        "dbf97e6a7c84408d6ce7fba9cc8340af0101025331008d6ce7fba9cc834008ac1c5a646d7a4041010253310208ac1c5a646d7a4014ae47e1",
        "7a4e7e4061020253311614ae47e17a4e7e40906ce7fba9b77640b7010202533114906ce7fba9b77640931804560e897b404b010253330093",
        "1804560e897b40caa145b6f3bf7e406a0202533216caa145b6f3bf7e40713d0ad7a38e804089010102533102713d0ad7a38e80407d3f355e",
        "baee80408b0102025334147d3f355ebaee804062105839b4f180408c01010253330262105839b4f180404b37894160957e40660202533316",
        "4b37894160957e403108ac1c5a2478402301025332043108ac1c5a247840238195438b6c317740ab01030253318495438b6cb1744068bc74",
        "93382ef540b4010508923194b02907c7cd836abc749338764043b6f3fd9e2af540a301050824f46a6c4dcb3496a445b6f3fd9e72401383c0",
        "caa1557740ae01030253311683c0caa1d5744009022b87b21bf540100508136538e96bc061154f62105839944d4009022b87b21bf5401c05",
        "0817b425873c66d38c4f62105839944d4009022b87b21bf5401905086ece896ea5efd47b4f62105839944d4093438b6cb12cf540aa010508",
        "d42009e12a39eebc8495438b6cb1744068bc7493382ef540b1010508b25467e6b6106c4d836abc7493387640d6cef753d121f54051050865",
        "2ced6d8b3b81532cb29defa7a26340d6cef753d121f5405a05083fcf0de3121707952cb29defa7a26340325eba497624f5407d0508284db6",
        "894ffb49587e6abc7493ec6840325eba497624f5407a0508e58f250aba2b8aed7e6abc7493ec6840ccf753e3d128f54097010508e1eb6549",
        "7afe0ee7dacef753e3d1704043b6f3fd9e2af540a0010508251ebf6f93c06367a445b6f3fd9e724009022b87b21bf540130508327fcff620",
        "e45e0c4f62105839944d40806abc7493b87840b20103025334836abc7493387640806abc7493b87840b50103025335836abc749338764061",
        "3bdf4fb31ef54030050881df586a558847fb6991ed7c3fcd5a4009022b87b21bf5401605087b5a6b2d0b7098724f62105839944d40613bdf",
        "4fb31ef540270508df3b85d2cdc289ae6991ed7c3fcd5a40613bdf4fb31ef5403305089d43ed1f56b1b1006991ed7c3fcd5a40d6cef753d1",
        "21f54057050866ad3cfc2d8573442cb29defa7a26340613bdf4fb31ef5402d0508f134084fe7ad0c606991ed7c3fcd5a407814ae477523f5",
        "40600508752fe28768b85adac0f5285c8fea6640d6cef753d121f5405c050841bff41b3788d9032cb29defa7a26340d6cef753d121f54054",
        "0508f235ee3bc773b0bf2cb29defa7a263402cdd24062b27f540910105089226ccee247b8ecd355eba490c566e40d6cef753d121f5404e05",
        "0851ea5a6c06d96a982cb29defa7a26340613bdf4fb31ef5402a05083489853c4cfade986991ed7c3fcd5a402cdd24062b27f5408e010508",
        "2407ac8ce852c02e355eba490c566e40613bdf4fb31ef540360508445bc1f2e2f7c7616991ed7c3fcd5a4090180456aa2af540a501050836",
        "6fe740362352f67793180456aa7240325eba497624f54077050803e63b9a13c2373a7e6abc7493ec684009022b87b21bf5401f05086a806f",
        "96dd75cb364f62105839944d40b801017b14ae47e17ab43f333333333333d33f000000000000e03f00000000000014400000000000002440",
        "000000000000004008000000000000f03f333333333333d33f00000000000008400202533201025334673bdf4f8dc7744002533401025332",
        "538d976e12d374400102533448e17a14ae47e13f010253348fc2f5285c8fd23f000000000000000100000000000aac40",
    ])

    static func hexBytes(_ lines: [String]) -> [UInt8] {
        let digits = Array(lines.joined().utf8)
        return stride(from: 0, to: digits.count - 1, by: 2).map { UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16) ?? 0 }
    }
}
