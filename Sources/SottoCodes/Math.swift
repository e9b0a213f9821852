#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#elseif canImport(ucrt)
import ucrt
#elseif hasFeature(Embedded)
// Embedded Swift for WebAssembly (scripts/build-wasm): no C module, the C library (wasi-libc's) linked in.
@_extern(c, "expf") @usableFromInline func expf(_ x: Float) -> Float
@_extern(c, "logf") @usableFromInline func logf(_ x: Float) -> Float
@_extern(c, "exp") @usableFromInline func exp(_ x: Double) -> Double
@_extern(c, "log") @usableFromInline func log(_ x: Double) -> Double
#endif

// The C library's exp and log; SottoCodes has no package dependencies.
@usableFromInline @inline(__always) func cExp(_ x: Float) -> Float { expf(x) }
@usableFromInline @inline(__always) func cLog(_ x: Float) -> Float { logf(x) }
@usableFromInline @inline(__always) func cExp(_ x: Double) -> Double { exp(x) }
@usableFromInline @inline(__always) func cLog(_ x: Double) -> Double { log(x) }
