extension ConvolutionalCode {
    /// One candidate of a list decoder.
    public struct ListCandidate: Sendable, Hashable {
        /// The message bits (tail dropped), 0 or 1.
        public var bits: [UInt8]
        /// The path's correlation metric Σ (1 − 2cᵢ)·LLRᵢ / 2: its log-likelihood up to a constant, so the
        /// difference between two candidates is their log-likelihood ratio. Higher is better.
        public var metric: Float
    }

    /// List Viterbi decoding: the `listSize` most likely messages, best first, for CRC-aided selection.
    ///
    /// The first candidate is always the Viterbi path, identical to ``decode(llrs:messageBits:)``. The others come from
    /// a serial list search (the tree-trellis algorithm of Soong and Huang): a forward Viterbi pass stores every
    /// state's metric, then a best-first backward search whose heuristic, the forward metric, is exact, so each
    /// next-best path costs about one traceback. Fewer than `listSize` candidates come back only when the trellis
    /// has fewer paths (very short messages) or in degenerate all-tie cases that exhaust the search budget.
    ///
    /// - Parameters: as ``decode(llrs:messageBits:)``; `listSize` ≤ 0 returns no candidates.
    /// - Returns: At most `listSize` distinct candidates, each `messageBits` bits.
    public func listDecode(llrs: [Float], messageBits: Int, listSize: Int) -> [[UInt8]] {
        listCandidates(llrs: llrs, messageBits: messageBits, listSize: listSize).map { $0.bits }
    }

    /// ``listDecode(llrs:messageBits:listSize:)`` with each candidate's path metric.
    public func listCandidates(llrs: [Float], messageBits: Int, listSize: Int) -> [ListCandidate] {
        var decoder = ListViterbiDecoder(code: self)
        var result: [ListCandidate] = []
        llrs.withUnsafeBufferPointer { llrs in
            _ = decoder.decode(llrs: llrs, messageBits: messageBits, listSize: listSize) { bits, metric in
                result.append(ListCandidate(bits: Array(bits), metric: metric))
                return false
            }
        }
        return result
    }
}

/// A list Viterbi decoder that keeps its buffers between calls (as ``ViterbiDecoder`` does for the plain one): it
/// offers its candidates, best first, to a closure that checks each (a CRC) and stops at the one it accepts. Once its
/// buffers have grown to the longest message it decodes, decoding allocates nothing: a receiver list-decodes every
/// nearly right length hypothesis of every detection. Same candidates, metrics and order as
/// ``ConvolutionalCode/listCandidates(llrs:messageBits:listSize:)``.
public struct ListViterbiDecoder {
    /// The code it decodes.
    public let code: ConvolutionalCode
    private var trellis = ViterbiTrellis()
    private var search = TreeTrellisSearch()
    /// The Viterbi path's bits and the candidate being offered.
    private var best: [UInt8] = []
    private var candidate: [UInt8] = []

    public init(code: ConvolutionalCode) { self.code = code }

    /// Offers at most `listSize` distinct candidates of `llrs` (as ``ConvolutionalCode/listCandidates(llrs:messageBits:listSize:)``),
    /// best first, to `accept` with their path metric, until it returns true. The bits are `messageBits` values 0 or 1,
    /// valid only during the call.
    /// - Returns: true when `accept` accepted a candidate.
    public mutating func decode(llrs: UnsafeBufferPointer<Float>, messageBits: Int, listSize: Int,
                                accept: (UnsafeBufferPointer<UInt8>, Float) -> Bool) -> Bool {
        guard messageBits >= 0, listSize > 0 else { return false }
        let code = code
        trellis.run(code: code, llrs: llrs, messageBits: messageBits, keepHistory: listSize > 1)
        if best.count < messageBits {
            best = [UInt8](repeating: 0, count: messageBits)
            candidate = best
        }
        // Out of `self` while the closure runs (no overlapping access, no copy).
        var best = self.best, candidate = self.candidate
        self.best = []; self.candidate = []
        defer { self.best = best; self.candidate = candidate }
        let trellis = trellis
        return best.withUnsafeMutableBufferPointer { bestBuffer in
            let bestBits = UnsafeMutableBufferPointer(rebasing: bestBuffer[0..<messageBits])
            trellis.traceBack(endState: 0, messageBits: messageBits, code: code, into: bestBits)
            if accept(UnsafeBufferPointer(bestBits), code.pathMetric(message: UnsafeBufferPointer(bestBits), llrs: llrs)) { return true }
            guard listSize > 1 else { return false }
            search.start(code: code, trellis: trellis)
            // Ties can make the search wander; bound its work (it normally needs about listSize × steps pops).
            let popBudget = 16 * listSize * (trellis.steps + 1) + 4096
            var offered = 1
            return candidate.withUnsafeMutableBufferPointer { candidateBuffer in
                let bits = UnsafeMutableBufferPointer(rebasing: candidateBuffer[0..<messageBits])
                while offered < listSize, let node = search.nextPath(trellis: trellis, code: code, popBudget: popBudget) {
                    let metric = search.readPath(from: node, messageBits: messageBits, code: code, into: bits)
                    guard !bits.elementsEqual(bestBits) else { continue }
                    offered += 1
                    if accept(UnsafeBufferPointer(bits), metric) { return true }
                }
                return false
            }
        }
    }
}

/// Best-first backward search over a stored trellis (A* with the exact forward metrics as heuristic). Its node and
/// heap storage is kept from one search to the next (`start` empties it).
struct TreeTrellisSearch {
    /// A partial path known from time `time` to the end, in state `state` at `time`.
    struct Node {
        var time: Int32
        var state: Int32
        /// Index of the node one step later (toward the end), or −1 for the root.
        var parent: Int32
        /// Metric of the branches from `time` to the end.
        var backward: Double
    }

    private var nodes: [Node] = []
    /// Max-heap of (priority, node index): priority = forward + backward metric; deeper nodes first on ties.
    private var heap: [(priority: Double, time: Int32, node: Int32)] = []
    private var pops = 0
    private var outputs: [UInt16] = []
    private var outputsCode: ConvolutionalCode?

    /// Starts a search over `trellis` (run with its history kept).
    mutating func start(code: ConvolutionalCode, trellis: ViterbiTrellis) {
        nodes.removeAll(keepingCapacity: true)
        heap.removeAll(keepingCapacity: true)
        pops = 0
        if outputsCode != code { outputs = code.outputTable(); outputsCode = code }
        let rootPriority = Double(trellis.finalMetrics[0]) + trellis.finalOffset
        if rootPriority > -.infinity {
            nodes.append(Node(time: Int32(trellis.steps), state: 0, parent: -1, backward: 0))
            push(priority: rootPriority, time: Int32(trellis.steps), node: 0)
        }
    }

    /// The node ending the next complete path in decreasing metric order (read it with `readPath`), or nil when
    /// exhausted or over budget.
    mutating func nextPath(trellis: ViterbiTrellis, code: ConvolutionalCode, popBudget: Int) -> Int? {
        let stateCount = code.stateCount
        let mask = stateCount - 1
        let k = code.constraintLength
        let n = code.rate
        while let top = pop() {
            pops += 1
            if pops > popBudget { return nil }
            let node = nodes[Int(top.node)]
            if node.time == 0 {
                return node.state == 0 ? Int(top.node) : nil
            }
            let t = Int(node.time) - 1                 // the step leading into this node
            let state = Int(node.state)
            let input = ViterbiTrellis.inputBit(of: state, constraintLength: k)
            for fromOdd in 0...1 {
                let predecessor = ((state << 1) & mask) | fromOdd
                let forward = trellis.history[t * stateCount + predecessor]
                guard forward > -.infinity else { continue }
                let symbol = Int(outputs[(input << (k - 1)) | predecessor])
                var branch: Float = 0
                for j in 0..<n {
                    let value = trellis.halfLLRs[t * n + j]
                    branch += (symbol >> (n - 1 - j)) & 1 == 0 ? value : -value
                }
                let backward = node.backward + Double(branch)
                let index = Int32(nodes.count)
                nodes.append(Node(time: Int32(t), state: Int32(predecessor), parent: top.node, backward: backward))
                push(priority: Double(forward) + trellis.offsets[t] + backward, time: Int32(t), node: index)
            }
        }
        return nil
    }

    /// Writes the message bits of the complete path ending at node `index` into `bits` (`messageBits` of them);
    /// returns its metric.
    func readPath(from index: Int, messageBits: Int, code: ConvolutionalCode, into bits: UnsafeMutableBufferPointer<UInt8>) -> Float {
        let k = code.constraintLength
        var current = nodes[index]
        let metric = Float(current.backward)
        while current.parent >= 0 {
            let later = nodes[Int(current.parent)]
            let step = Int(current.time)
            if step < messageBits { bits[step] = UInt8(ViterbiTrellis.inputBit(of: Int(later.state), constraintLength: k)) }
            current = later
        }
        return metric
    }

    // MARK: Binary max-heap

    @inline(__always)
    static func ranksAbove(_ a: (priority: Double, time: Int32, node: Int32),
                           _ b: (priority: Double, time: Int32, node: Int32)) -> Bool {
        a.priority != b.priority ? a.priority > b.priority : a.time < b.time
    }

    private mutating func push(priority: Double, time: Int32, node: Int32) {
        heap.append((priority, time, node))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.ranksAbove(heap[child], heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func pop() -> (priority: Double, time: Int32, node: Int32)? {
        guard let last = heap.popLast() else { return nil }
        guard !heap.isEmpty else { return last }
        let top = heap[0]
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var largest = parent
            if left < heap.count && Self.ranksAbove(heap[left], heap[largest]) { largest = left }
            if right < heap.count && Self.ranksAbove(heap[right], heap[largest]) { largest = right }
            if largest == parent { break }
            heap.swapAt(parent, largest)
            parent = largest
        }
        return top
    }
}
