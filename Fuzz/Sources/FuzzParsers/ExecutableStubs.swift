import Glibc

// What Arguments.swift (linked from Sources/sotto) takes from the rest of the executable, which the fuzzer does
// not link: the failure status and the unbuffered write to standard error (as in Sotto.swift and Output.swift).

/// The exit status of a run-time failure.
enum ExitStatus: Int32 {
    case failure = 2
}

/// Unbuffered writes of whole strings to a descriptor.
enum StandardStream {
    /// Writes every byte of `text` to `descriptor`, retrying on EINTR; 0, or the errno of the failure.
    static func write(_ text: String, to descriptor: Int32) -> Int32 {
        var text = text
        return text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += n
            }
            return 0
        }
    }
}
