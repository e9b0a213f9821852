import Foundation
import SottoTools
#if canImport(Glibc)
import Glibc
#endif

extension DaemonEvent {
    /// The event as one JSON Lines record (an `event` or a `notice` record of the CLI's schema), no newline.
    public var jsonLine: String {
        let reply = self.reply
        if let event = reply.event { return JSONLines.line(event) }
        if let notice = reply.notice { return JSONLines.line(notice) }
        return "{}"
    }

    /// The event in words, one line (what `sotto ops watch` prints, and the journal's MESSAGE).
    public var textLine: String {
        let reply = self.reply
        if let event = reply.event {
            var line = "\(event.operation ?? "-")  \(event.event)"
            if let namespace = event.namespace, let type = event.type { line += "  \(namespace)/\(type)" }
            if let text = event.text { line += "  \"\(text)\"" } else if let content = event.content { line += "  \(content)" }
            return line
        }
        if let notice = reply.notice {
            return "\(notice.operation ?? "-")  \(notice.notice) \(notice.status)\(notice.detail.map { ": \($0)" } ?? "")"
        }
        return "-"
    }
}

/// One entry of the systemd journal in its native protocol (systemd.io/JOURNAL_NATIVE_PROTOCOL, what
/// `sd_journal_send` writes): fields of upper-case names, sent as one datagram to the journal's socket.
public struct JournalEntry: Sendable, Equatable {
    /// One field: its name (A-Z, 0-9, `_`, not starting with `_`, at most 64 characters) and its value.
    public struct Field: Sendable, Equatable {
        /// The field's name.
        public var name: String
        /// The field's value (UTF-8; may hold newlines).
        public var value: String
        /// - Parameters:
        ///   - name: the field's name.
        ///   - value: its value.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The fields, in order.
    public var fields: [Field]

    /// Values longer than this (bytes) are left out of an entry (listed in `SOTTO_OMITTED`): a datagram must
    /// stay well below the socket's buffer (content may be 100 KB, twice that in hex).
    public static let valueLimit = 16_384

    /// - Parameter fields: the entry's fields.
    public init(fields: [Field]) { self.fields = fields }

    /// The entry of a daemon event: `MESSAGE` (the event in words), `PRIORITY` (4, warning, for a device
    /// fault or a failed matcher; 6, info, otherwise), `SYSLOG_IDENTIFIER=sotto`, and every field of its JSON
    /// Lines record as `SOTTO_<NAME>` (`SOTTO_EVENT=found`, `SOTTO_GROUP`, `SOTTO_OPERATION`, `SOTTO_CONTENT`,
    /// ...), plus the record itself as `SOTTO_JSON`.
    /// - Parameter event: the daemon's event.
    public init(event: DaemonEvent) {
        let text = event.textLine
        // The words stay short (the content itself is in SOTTO_CONTENT and SOTTO_TEXT).
        var fields = [Field("MESSAGE", text.utf8.count <= 1_024 ? text : String(text.prefix(200)) + "…")]
        let warning: Bool
        switch event.kind {
        case .device(let fault): warning = fault != nil
        case .matcher(let status, _): warning = status != "connected"
        default: warning = false
        }
        fields.append(Field("PRIORITY", warning ? "4" : "6"))
        fields.append(Field("SYSLOG_IDENTIFIER", "sotto"))
        let line = event.jsonLine
        if let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] {
            for key in object.keys.sorted() {
                let name = "SOTTO_" + key.uppercased().map { $0.isLetter || $0.isNumber ? String($0) : "_" }.joined()
                let value: String
                switch object[key] {
                case let string as String: value = string
                case let number as NSNumber: value = number.stringValue
                case let other?: value = "\(other)"
                case nil: continue
                }
                fields.append(Field(name, value))
            }
        }
        fields.append(Field("SOTTO_JSON", line))
        var omitted: [String] = []
        fields.removeAll { field in
            guard field.value.utf8.count > Self.valueLimit else { return false }
            omitted.append(field.name)
            return true
        }
        if !omitted.isEmpty { fields.append(Field("SOTTO_OMITTED", omitted.joined(separator: ","))) }
        self.fields = fields
    }

    /// Whether `name` is a valid journal field name that a client may set.
    /// - Parameter name: the field's name.
    public static func isValidFieldName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first != "_", !("0"..."9").contains(first), name.utf8.count <= 64 else { return false }
        return name.unicodeScalars.allSatisfy { ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
    }

    /// The datagram: `NAME=value\n` per field, or for a value holding a newline `NAME\n`, its length as a
    /// 64-bit little-endian number, the value and `\n`. Fields of invalid names are left out.
    public var datagram: [UInt8] {
        var bytes: [UInt8] = []
        for field in fields where Self.isValidFieldName(field.name) {
            let value = Array(field.value.utf8)
            bytes += Array(field.name.utf8)
            if value.contains(0x0A) {
                bytes.append(0x0A)
                withUnsafeBytes(of: UInt64(value.count).littleEndian) { bytes += $0 }
                bytes += value
            } else {
                bytes.append(UInt8(ascii: "="))
                bytes += value
            }
            bytes.append(0x0A)
        }
        return bytes
    }

    /// Parses a datagram back into fields (the inverse of ``datagram``); nil when it is malformed.
    /// - Parameter datagram: the bytes of one entry.
    public init?(datagram: [UInt8]) {
        var fields: [Field] = []
        var index = 0
        while index < datagram.count {
            guard let end = datagram[index...].firstIndex(where: { $0 == 0x0A || $0 == UInt8(ascii: "=") }) else { return nil }
            let name = String(decoding: datagram[index..<end], as: UTF8.self)
            if datagram[end] == UInt8(ascii: "=") {
                guard let newline = datagram[(end + 1)...].firstIndex(of: 0x0A) else { return nil }
                fields.append(Field(name, String(decoding: datagram[(end + 1)..<newline], as: UTF8.self)))
                index = newline + 1
            } else {
                guard end + 9 <= datagram.count else { return nil }
                var length: UInt64 = 0
                for (shift, byte) in datagram[(end + 1)..<(end + 9)].enumerated() { length |= UInt64(byte) << (8 * UInt64(shift)) }
                let start = end + 9
                guard length <= UInt64(datagram.count - start), start + Int(length) < datagram.count,
                      datagram[start + Int(length)] == 0x0A else { return nil }
                fields.append(Field(name, String(decoding: datagram[start..<(start + Int(length))], as: UTF8.self)))
                index = start + Int(length) + 1
            }
        }
        self.fields = fields
    }

    /// The value of the first field named `name`.
    /// - Parameter name: the field's name.
    public subscript(name: String) -> String? { fields.first { $0.name == name }?.value }
}

/// Where the journal is, and whether this process's standard output goes to it.
public enum Journal {
    /// The journal's native socket.
    public static let defaultSocket = "/run/systemd/journal/socket"

    /// The socket to send entries to: `SOTTO_JOURNAL_SOCKET` when set (a journal namespace's socket, or a
    /// test's), else ``defaultSocket``.
    /// - Parameter environment: the process environment.
    public static func socket(environment: [String: String]) -> String {
        environment["SOTTO_JOURNAL_SOCKET"].flatMap { $0.isEmpty ? nil : $0 } ?? defaultSocket
    }

    /// Whether standard output is connected to the journal: systemd sets `JOURNAL_STREAM` to the device and
    /// inode (`DEV:INO`, decimal) of the stream it gives a service, and they must be those of descriptor 1
    /// (a program it starts with other output inherits the variable but not the stream).
    /// - Parameter environment: the process environment.
    public static func standardOutputIsJournal(environment: [String: String]) -> Bool {
        guard let value = environment["JOURNAL_STREAM"], let output = fileIdentity(of: 1) else { return false }
        return matches(value, device: output.device, inode: output.inode)
    }

    /// Whether a `JOURNAL_STREAM` value names this device and inode.
    /// - Parameters:
    ///   - value: the variable's value, `DEV:INO`.
    ///   - device: the stream's device number.
    ///   - inode: its inode number.
    public static func matches(_ value: String, device: UInt64, inode: UInt64) -> Bool {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let d = UInt64(parts[0]), let i = UInt64(parts[1]) else { return false }
        return d == device && i == inode
    }
}

/// `sotto daemon --events json`: every event as it happens, as one JSON Lines record on standard output, or,
/// when standard output is the journal (under systemd), as a journal entry with its fields (``JournalEntry``)
/// so that `journalctl --user -u sotto SOTTO_EVENT=found` selects them. An entry the journal does not take
/// goes to standard output as a line instead, with one warning. ``receive(_:)`` only queues (it runs on the
/// daemon's actor); a serial queue of its own writes.
public final class StructuredEventSink: DaemonEventSink, @unchecked Sendable {
    /// Where the events go.
    public enum Destination: Sendable {
        /// One JSON line per event, handed to the writer (without its newline).
        case lines
        /// Journal entries to the native socket at this path (lines when it does not take one).
        case journal(socket: String)
    }

    private let destination: Destination
    private let write: @Sendable (String) -> Void
    private let log: @Sendable (String) -> Void
    private let queue = DispatchQueue(label: "sotto-structured-events")
    private var fd: Int32 = -1
    private var journalFailing = false

    /// - Parameters:
    ///   - destination: lines, or the journal.
    ///   - write: writes one line (standard output).
    ///   - log: receives the warning when the journal does not take an entry (and when it does again).
    public init(destination: Destination, write: @escaping @Sendable (String) -> Void, log: @escaping @Sendable (String) -> Void) {
        self.destination = destination
        self.write = write
        self.log = log
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Queues `event` for writing.
    /// - Parameter event: the daemon's event.
    public func receive(_ event: DaemonEvent) {
        queue.async { [self] in deliver(event) }
    }

    /// Waits until every queued event is written.
    public func flush() { queue.sync {} }

    private func deliver(_ event: DaemonEvent) {
        guard case .journal(let path) = destination else { write(event.jsonLine); return }
        if let failure = send(JournalEntry(event: event).datagram, to: path) {
            if !journalFailing { log("warning: the journal (\(path)) did not take an event (\(failure)); events go to standard output") }
            journalFailing = true
            write(event.jsonLine)
        } else if journalFailing {
            journalFailing = false
            log("the journal takes events again")
        }
    }

    /// Sends one datagram; the error in words, or nil.
    private func send(_ datagram: [UInt8], to path: String) -> String? {
        if fd < 0 {
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { return String(cString: strerror(errno)) }
            // A journal that stops reading must not hold the daemon: a full socket is an error, not a wait.
            UnixSocket.setSendTimeout(fd, seconds: 1)
        }
        guard var address = UnixSocket.address(path) else { return "socket path too long" }
        let sent = datagram.withUnsafeBytes { buffer in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
        }
        return sent == datagram.count ? nil : String(cString: strerror(errno))
    }
}
