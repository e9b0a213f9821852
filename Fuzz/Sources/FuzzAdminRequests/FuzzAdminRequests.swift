import CFuzzerDriver
import Dispatch
import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import SottoExchangeService

/// The admin API of `sotto serve --admin` (HTTP/JSON; the gRPC admin service answers through the same API): one input
/// is the bytes a client sends on a connection, through NIO's HTTP/1.1 request decoder as the listener sets it up,
/// then each request read whole through ``AdminAPI/handle(_:)`` on a SQLite store with one operator. The first byte
/// chooses whether the operator's credential is added as `Authorization: Bearer` (so that the fuzzer reaches past
/// authentication). Nothing may crash; every answer has a status from 200 to 599, a body of at most 1 MiB, and an
/// error is a JSON object with its message.
enum Admin {
    static let setUp: (api: AdminAPI, secret: String) = {
        let directory = NSTemporaryDirectory() + "sotto-fuzz-admin-\(getpid())"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let made = wait { () async -> (AdminAPI, String) in
            do {
                let store = try SQLiteStore(path: directory + "/exchange.sqlite")
                let secret = try await store.createOperator(name: "fuzz").secret
                _ = try await store.createProject(name: "museum", maxSessions: 10)
                return (AdminAPI(store: store), secret)
            } catch {
                preconditionFailure("the fuzzer's store: \(error)")
            }
        }
        return made
    }()

    /// Runs `body` to its end on the concurrency pool and waits for it (libFuzzer's thread is not a pool thread).
    static func wait<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let semaphore = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: T?
        Task.detached {
            result = await body()
            semaphore.signal()
        }
        semaphore.wait()
        return result!
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAdminRequests(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let (api, secret) = Admin.setUp
    let authenticated = bytes[0] & 1 == 1
    let channel = EmbeddedChannel()
    defer { _ = try? channel.finish() }
    do {
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
    } catch {
        preconditionFailure("the pipeline: \(error)")
    }
    _ = try? channel.writeInbound(ByteBuffer(bytes: bytes.dropFirst()))
    var head: HTTPRequestHead?
    var body: [UInt8] = []
    var requests: [AdminRequest] = []
    while let part = try? channel.readInbound(as: HTTPServerRequestPart.self) {
        switch part {
        case .head(let requestHead): head = requestHead; body = []
        case .body(let buffer): if body.count + buffer.readableBytes <= AdminAPI.maxBodyBytes + 1 { body += buffer.readableBytesView }
        case .end:
            guard let requestHead = head else { continue }
            var headers = requestHead.headers.map { ($0.name, $0.value) }
            if authenticated { headers.append(("Authorization", "Bearer " + secret)) }
            requests.append(AdminRequest(method: requestHead.method.rawValue, target: requestHead.uri, headers: headers, body: body, peer: "fuzz"))
            head = nil
        }
        if requests.count >= 8 { break }
    }
    for request in requests {
        let response = Admin.wait { await api.handle(request) }
        precondition((200..<600).contains(response.status), "status \(response.status)")
        precondition(response.body.count <= 1 << 20, "an answer of \(response.body.count) bytes")
        if let events = response.events { Admin.wait { await events.stop() } }
        if response.status >= 400 {
            precondition(response.contentType == "application/json" && response.json?["error"] is String,
                         "an error without its message: \(response.status) \(String(decoding: response.body.prefix(200), as: UTF8.self))")
        }
    }
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzAdminRequests_main")
public func fuzzAdminRequestsMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzAdminRequests(data, size) })
}
