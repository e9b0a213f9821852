import CDBus

/// A D-Bus value with its type, as libdbus marshals it (the subset desktop notifications and
/// NetworkManager's properties use, read and written recursively).
indirect enum DBusValue: Sendable, Equatable {
    case byte(UInt8)
    case bool(Bool)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    /// `ay`
    case bytes([UInt8])
    /// `a<element>`
    case array(element: String, [DBusValue])
    /// `a{sv}`: each value is wrapped in a variant when written, unwrapped when read.
    case dictionary([String: DBusValue])
    /// `(…)`
    case structure([DBusValue])
    /// `v`
    case variant(DBusValue)

    /// The D-Bus type signature of this value.
    var signature: String {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .bytes: "ay"
        case .array(let element, _): "a" + element
        case .dictionary: "a{sv}"
        case .structure(let items): "(" + items.map(\.signature).joined() + ")"
        case .variant: "v"
        }
    }

    var stringValue: String? { if case .string(let s) = self { s } else if case .variant(let v) = self { v.stringValue } else { nil } }
    var uint32Value: UInt32? { if case .uint32(let u) = self { u } else if case .variant(let v) = self { v.uint32Value } else { nil } }
}

private func code(_ c: Character) -> Int32 { Int32(c.asciiValue!) }

extension DBusValue {
    /// Appends this value at `iter` (a message's append iterator or an open container's).
    func append(to iter: inout DBusMessageIter) throws(DBusFailure) {
        var ok: dbus_bool_t = 1
        switch self {
        case .byte(var v): ok = dbus_message_iter_append_basic(&iter, code("y"), &v)
        case .bool(let b): var v: dbus_bool_t = b ? 1 : 0; ok = dbus_message_iter_append_basic(&iter, code("b"), &v)
        case .int32(var v): ok = dbus_message_iter_append_basic(&iter, code("i"), &v)
        case .uint32(var v): ok = dbus_message_iter_append_basic(&iter, code("u"), &v)
        case .int64(var v): ok = dbus_message_iter_append_basic(&iter, code("x"), &v)
        case .uint64(var v): ok = dbus_message_iter_append_basic(&iter, code("t"), &v)
        case .double(var v): ok = dbus_message_iter_append_basic(&iter, code("d"), &v)
        case .string(let s), .objectPath(let s):
            // libdbus rejects invalid UTF-8 and embedded NULs; Swift strings are valid UTF-8, NULs are cut here.
            let clean = s.contains("\0") ? String(s.prefix { $0 != "\0" }) : s
            if case .objectPath = self, !dbus_validate_path_ok(clean) { throw DBusFailure(name: "invalid-path", message: clean) }
            ok = clean.withCString { p in
                var pointer: UnsafePointer<CChar>? = p
                return dbus_message_iter_append_basic(&iter, self.signature == "o" ? code("o") : code("s"), &pointer)
            }
        case .bytes(let bytes):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, code("a"), "y", &sub) != 0 else { throw .noMemory }
            if !bytes.isEmpty {
                ok = bytes.withUnsafeBufferPointer { buffer in
                    var pointer = buffer.baseAddress
                    return dbus_message_iter_append_fixed_array(&sub, code("y"), &pointer, Int32(buffer.count))
                }
            }
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .noMemory }
        case .array(let element, let items):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, code("a"), element, &sub) != 0 else { throw .noMemory }
            for item in items { try item.append(to: &sub) }
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .noMemory }
        case .dictionary(let entries):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, code("a"), "{sv}", &sub) != 0 else { throw .noMemory }
            for key in entries.keys.sorted() {
                var entry = DBusMessageIter()
                guard dbus_message_iter_open_container(&sub, code("e"), nil, &entry) != 0 else { throw .noMemory }
                try DBusValue.string(key).append(to: &entry)
                let value = entries[key]!
                try (value.signature == "v" ? value : .variant(value)).append(to: &entry)
                guard dbus_message_iter_close_container(&sub, &entry) != 0 else { throw .noMemory }
            }
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .noMemory }
        case .structure(let items):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, code("r"), nil, &sub) != 0 else { throw .noMemory }
            for item in items { try item.append(to: &sub) }
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .noMemory }
        case .variant(let inner):
            var sub = DBusMessageIter()
            guard dbus_message_iter_open_container(&iter, code("v"), inner.signature, &sub) != 0 else { throw .noMemory }
            try inner.append(to: &sub)
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .noMemory }
        }
        guard ok != 0 else { throw .noMemory }
    }

    /// Reads every value from `iter` to its end.
    static func readAll(_ iter: inout DBusMessageIter) -> [DBusValue] {
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != 0 {
            if let value = read(&iter) { values.append(value) }
            if dbus_message_iter_next(&iter) == 0 { break }
        }
        return values
    }

    /// Reads the value at `iter` (nil for a type this enum does not hold, such as a file descriptor).
    static func read(_ iter: inout DBusMessageIter) -> DBusValue? {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch UInt8(truncatingIfNeeded: type) {
        case UInt8(ascii: "y"): var v: UInt8 = 0; dbus_message_iter_get_basic(&iter, &v); return .byte(v)
        case UInt8(ascii: "b"): var v: dbus_bool_t = 0; dbus_message_iter_get_basic(&iter, &v); return .bool(v != 0)
        case UInt8(ascii: "n"): var v: Int16 = 0; dbus_message_iter_get_basic(&iter, &v); return .int32(Int32(v))
        case UInt8(ascii: "q"): var v: UInt16 = 0; dbus_message_iter_get_basic(&iter, &v); return .uint32(UInt32(v))
        case UInt8(ascii: "i"): var v: Int32 = 0; dbus_message_iter_get_basic(&iter, &v); return .int32(v)
        case UInt8(ascii: "u"): var v: UInt32 = 0; dbus_message_iter_get_basic(&iter, &v); return .uint32(v)
        case UInt8(ascii: "x"): var v: Int64 = 0; dbus_message_iter_get_basic(&iter, &v); return .int64(v)
        case UInt8(ascii: "t"): var v: UInt64 = 0; dbus_message_iter_get_basic(&iter, &v); return .uint64(v)
        case UInt8(ascii: "d"): var v: Double = 0; dbus_message_iter_get_basic(&iter, &v); return .double(v)
        case UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"):
            var pointer: UnsafePointer<CChar>? = nil
            dbus_message_iter_get_basic(&iter, &pointer)
            let s = pointer.map { String(cString: $0) } ?? ""
            return type == code("o") ? .objectPath(s) : .string(s)
        case UInt8(ascii: "v"):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return read(&sub).map { .variant($0) }
        case UInt8(ascii: "r"), UInt8(ascii: "e"):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .structure(readAll(&sub))
        case UInt8(ascii: "a"):
            var element = ""
            if let signature = dbus_message_iter_get_signature(&iter) {
                element = String(String(cString: signature).dropFirst())
                dbus_free(signature)
            }
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if element == "y" {
                var pointer: UnsafePointer<UInt8>? = nil
                var count: Int32 = 0
                withUnsafeMutablePointer(to: &pointer) { dbus_message_iter_get_fixed_array(&sub, $0, &count) }
                guard let pointer, count > 0 else { return .bytes([]) }
                return .bytes(Array(UnsafeBufferPointer(start: pointer, count: Int(count))))
            }
            let items = readAll(&sub)
            if element == "{sv}" {
                var dictionary: [String: DBusValue] = [:]
                for case .structure(let pair) in items where pair.count == 2 {
                    if case .string(let key) = pair[0], case .variant(let value) = pair[1] { dictionary[key] = value }
                }
                return .dictionary(dictionary)
            }
            return .array(element: element, items)
        default:
            return nil
        }
    }
}

private func dbus_validate_path_ok(_ path: String) -> Bool {
    var error = DBusError()
    dbus_error_init(&error)
    defer { dbus_error_free(&error) }
    return dbus_validate_path(path, &error) != 0
}
