import SottoExchangeCore

/// The client streams of one node, by number (numbers are never reused): what each holds (its session, or
/// the open it waits for) and the queries the host makes over them. A value; the host owns the one copy.
struct StreamRegistry {
    /// A client stream of this node. A class: looked up for every frame and every delivery, it is shared,
    /// not copied (copying its fields cost a busy node a few per cent in retains and releases).
    final class Stream {
        let outbox: Outbox
        let keyID: String
        let projectID: String
        /// The resume secret of a new session, and the one the client presented to resume (Welcome carries
        /// whichever applies; the log only ever holds their hashes).
        let newSecret: [UInt8]
        let presentedSecret: [UInt8]
        var session: SessionID?
        var waiter: CheckedContinuation<Result<MatcherHost.Opened, ExchangeError>, Never>?

        init(outbox: Outbox, keyID: String, projectID: String, newSecret: [UInt8], presentedSecret: [UInt8]) {
            self.outbox = outbox
            self.keyID = keyID
            self.projectID = projectID
            self.newSecret = newSecret
            self.presentedSecret = presentedSecret
        }
    }

    private var streams: [UInt64: Stream] = [:]
    private var last: UInt64 = 0

    /// Streams held.
    var count: Int { streams.count }

    /// The stream numbered `number`, if this node holds it.
    subscript(number: UInt64) -> Stream? { streams[number] }

    /// Holds `stream` under a new number, returned.
    mutating func add(_ stream: Stream) -> UInt64 {
        last += 1
        streams[last] = stream
        return last
    }

    /// Lets go of stream `number`; returns it if it was held.
    @discardableResult
    mutating func remove(_ number: UInt64) -> Stream? { streams.removeValue(forKey: number) }

    /// Lets go of every stream; returns what was held.
    mutating func removeAll() -> [UInt64: Stream] {
        defer { streams = [:] }
        return streams
    }

    /// The keys the streams authenticated with.
    var keyIDs: Set<String> { Set(streams.values.map(\.keyID)) }

    /// The streams of the `keys`, in the order of their numbers.
    func holding(keys: Set<String>) -> [(UInt64, Stream)] {
        streams.filter { keys.contains($0.value.keyID) }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// The streams holding a session whose client sent nothing for more than `limit` (s).
    func silent(longerThan limit: Double) -> [(UInt64, Stream)] {
        streams.filter { $0.value.session != nil && $0.value.outbox.silence > limit }.map { ($0.key, $0.value) }
    }
}
