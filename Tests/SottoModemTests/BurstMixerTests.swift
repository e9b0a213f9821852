import Testing
import SottoModem

@Suite struct BurstMixerTests {
    /// Rendered in blocks of any size, overlapping bursts sum to what one array in memory holds.
    @Test(arguments: [1, 7, 64, 1000])
    func blocksEqualTheWholeMix(blockSize: Int) {
        let bursts: [(start: Int, samples: [Float])] = [(3, [1, 2, 3, 4, 5]), (5, [10, 20, 30]), (40, [0.5, 0.5]), (95, [7, 7, 7, 7, 7, 7, 7, 7])]
        let total = 100
        var whole = [Float](repeating: 0, count: total)
        for burst in bursts { for (i, s) in burst.samples.enumerated() where burst.start + i < total { whole[burst.start + i] += s } }
        var mixer = BurstMixer()
        var next = 0
        var rendered: [Float] = []
        var block = [Float](repeating: 0, count: blockSize)
        while mixer.position < total {
            let count = min(blockSize, total - mixer.position)
            while next < bursts.count, bursts[next].start < mixer.position + count {
                mixer.add(bursts[next].samples, at: bursts[next].start)
                next += 1
            }
            block.withUnsafeMutableBufferPointer { mixer.render(into: UnsafeMutableBufferPointer(rebasing: $0[0..<count])) }
            rendered += block[0..<count]
        }
        #expect(rendered == whole)
    }
}
