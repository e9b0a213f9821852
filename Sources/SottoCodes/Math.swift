#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#elseif canImport(ucrt)
import ucrt
#endif

// The C library's exp and log; SottoCodes has no package dependencies.
@usableFromInline @inline(__always) func cExp(_ x: Float) -> Float { expf(x) }
@usableFromInline @inline(__always) func cLog(_ x: Float) -> Float { logf(x) }
@usableFromInline @inline(__always) func cExp(_ x: Double) -> Double { exp(x) }
@usableFromInline @inline(__always) func cLog(_ x: Double) -> Double { log(x) }
