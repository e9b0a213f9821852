/// The connections a listener holds, and who gets in: a pure core (no I/O) that ``ConnectionGuard`` drives.
/// A new connection over a cap takes the place of the oldest idle one (no stream open) if there is one;
/// otherwise it is refused. Connections are numbered in the order they arrived, so the lowest number is the
/// oldest.
struct ConnectionTable: Sendable {
    /// One connection: its source address (nil for a Unix-socket peer), the streams it has open, and since
    /// when it has had none (s, on the caller's monotonic clock).
    struct Entry: Sendable, Equatable {
        let address: String?
        var streams = 0
        var idleSince: Double
    }

    /// What to do with a connection that arrived.
    enum Admission: Sendable, Equatable {
        /// Let it in under this number.
        case admit(UInt64)
        /// Let it in under this number, after closing the oldest idle connection (`evict`).
        case admitEvicting(UInt64, evict: UInt64)
        /// Close it: every connection it would displace is busy.
        case refuse(Refusal)
    }

    /// Why a connection was refused.
    enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// The node holds its most connections (the limit).
        case full(Int)
        /// Its address holds its most connections (the limit).
        case addressFull(Int)

        var description: String {
            switch self {
            case .full(let limit): return "the node holds its most connections (\(limit))"
            case .addressFull(let limit): return "the address holds its most connections (\(limit))"
            }
        }
    }

    let maxConnections: Int
    let maxPerAddress: Int
    private(set) var entries: [UInt64: Entry] = [:]
    private(set) var perAddress: [String: Int] = [:]
    private var next: UInt64 = 1

    init(maxConnections: Int, maxPerAddress: Int) {
        self.maxConnections = max(1, maxConnections)
        self.maxPerAddress = max(1, maxPerAddress)
    }

    var count: Int { entries.count }

    /// A connection from `address` (nil: a Unix-socket peer) arrived at `now` (s).
    mutating func arrive(address: String?, now: Double = 0) -> Admission {
        var evict: UInt64?
        if let address, perAddress[address, default: 0] >= maxPerAddress {
            guard let oldest = oldestIdle(where: { $0.address == address }) else { return .refuse(.addressFull(maxPerAddress)) }
            evict = oldest
        } else if entries.count >= maxConnections {
            guard let oldest = oldestIdle(where: { _ in true }) else { return .refuse(.full(maxConnections)) }
            evict = oldest
        }
        if let evict { close(evict) }
        let id = next
        next += 1
        entries[id] = Entry(address: address, idleSince: now)
        if let address { perAddress[address, default: 0] += 1 }
        return evict.map { .admitEvicting(id, evict: $0) } ?? .admit(id)
    }

    /// The connection is gone (closed by either side, or evicted: then a no-op).
    mutating func close(_ id: UInt64) {
        guard let entry = entries.removeValue(forKey: id) else { return }
        if let address = entry.address {
            let left = perAddress[address, default: 1] - 1
            perAddress[address] = left > 0 ? left : nil
        }
    }

    mutating func streamOpened(_ id: UInt64) { entries[id]?.streams += 1 }
    mutating func streamClosed(_ id: UInt64, now: Double = 0) {
        guard let streams = entries[id]?.streams, streams > 0 else { return }
        entries[id]?.streams = streams - 1
        if streams == 1 { entries[id]?.idleSince = now }
    }

    /// Removes and returns the connections that have held no stream since before `deadline` (s).
    mutating func expireIdle(before deadline: Double) -> [UInt64] {
        let expired = entries.filter { $0.value.streams == 0 && $0.value.idleSince < deadline }.map(\.key).sorted()
        for id in expired { close(id) }
        return expired
    }

    /// The oldest connection without a stream, among those `matching`.
    func oldestIdle(where matching: (Entry) -> Bool) -> UInt64? {
        var oldest: UInt64?
        for (id, entry) in entries where entry.streams == 0 && matching(entry) && id < (oldest ?? .max) { oldest = id }
        return oldest
    }
}
