import CSotto
import SottoModem
import Glibc

/// A C string with static storage, for messages and names the library returns.
@inline(__always) func staticCString(_ string: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(string.utf8Start).assumingMemoryBound(to: CChar.self)
}

/// A failure on its way out of the library: its status code and message.
struct CallFailure: Error {
    let status: sotto_status
    let message: String

    static func null(_ what: String) -> CallFailure { CallFailure(status: SOTTO_ERROR_NULL, message: "\(what) is NULL") }
    static func argument(_ message: String) -> CallFailure { CallFailure(status: SOTTO_ERROR_ARGUMENT, message: message) }
    static func state(_ message: String) -> CallFailure { CallFailure(status: SOTTO_ERROR_STATE, message: message) }
    /// A modem error: SOTTO_ERROR_RESOURCE for transforms that could not be made (out of memory: no argument is
    /// wrong), SOTTO_ERROR_ARGUMENT for the rest.
    static func modem(_ error: ModemError) -> CallFailure {
        if case .transformFailed = error { return CallFailure(status: SOTTO_ERROR_RESOURCE, message: error.description) }
        return .argument(error.description)
    }
}

/// The message of the last failure on one handle, kept in C memory so that its pointer stays valid until
/// the next failure or the handle's end.
final class ErrorMessage {
    private var storage: UnsafeMutablePointer<CChar>?

    /// The message, or "" when none is set.
    var cString: UnsafePointer<CChar> { storage.map { UnsafePointer($0) } ?? staticCString("") }

    func set(_ message: String) {
        free(storage)
        storage = strdup(message)
    }

    deinit { free(storage) }
}

/// Runs `body`, turning a thrown `CallFailure` into its status and recording its message with `record`.
@inline(__always) func reporting(_ record: (String) -> Void, _ body: () throws(CallFailure) -> sotto_status) -> sotto_status {
    do { return try body() } catch {
        record(error.message)
        return error.status
    }
}

/// `reporting` for calls without a handle: the message goes to the calling thread's error message.
@inline(__always) func reportingPerThread(_ body: () throws(CallFailure) -> sotto_status) -> sotto_status {
    reporting({ message in message.withCString { sotto_internal_set_thread_error($0) } }, body)
}

/// A NULL handle: SOTTO_ERROR_NULL, with the message in the calling thread's (the handle has none).
func nullHandle(_ kind: String) -> sotto_status {
    reportingPerThread { () throws(CallFailure) in throw .null("the \(kind) handle") }
}

/// A count of samples or bytes from C (`size_t` arrives as `Int`: beyond PTRDIFF_MAX it is negative).
func checkedCount(_ count: Int, _ what: String) throws(CallFailure) -> Int {
    guard count >= 0 else { throw .argument("\(what) \(UInt(bitPattern: count)) is beyond PTRDIFF_MAX") }
    return count
}

/// The first version of each struct (ABI 1): a caller's `struct_size` must be at least this, and at most
/// 64 KiB (a larger value is an uninitialised field, not a newer struct).
func checkStructSize(_ size: Int, _ known: Int, _ name: String) throws(CallFailure) {
    guard size >= known, size <= 65_536 else {
        throw CallFailure(status: SOTTO_ERROR_STRUCT_SIZE,
                          message: "\(name).struct_size is \(UInt(bitPattern: size)), expected sizeof(\(name)) = \(known) (set it before the call)")
    }
}

/// Copies `text` into a fixed `char[N]` field of a C struct, truncated and always NUL-terminated.
func copyName<Field>(_ text: String, into field: inout Field) {
    withUnsafeMutableBytes(of: &field) { bytes in
        bytes.initializeMemory(as: UInt8.self, repeating: 0)
        let utf8 = Array(text.utf8.prefix(bytes.count - 1))
        for (i, byte) in utf8.enumerated() { bytes[i] = byte }
    }
}

/// A `const char *` argument as a Swift string (invalid UTF-8 repaired).
func string(_ pointer: UnsafePointer<CChar>) -> String { String(decoding: UnsafeRawBufferPointer(start: pointer, count: strlen(pointer)), as: UTF8.self) }
