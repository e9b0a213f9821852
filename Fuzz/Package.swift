// swift-tools-version: 6.1
import PackageDescription

// libFuzzer targets for sotto, a package of their own so that the normal `swift build` of the parent
// neither builds nor slows down for them. Built and run by scripts/fuzz (-sanitize=fuzzer,address); each
// exposes LLVMFuzzerTestOneInput and a main (SwiftPM names it <Target>_main) that runs libFuzzer's driver.
let package = Package(
    name: "sotto-fuzz",
    dependencies: [
        .package(name: "sotto", path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // The declaration of libFuzzer's driver entry point.
        .target(name: "CFuzzerDriver"),
        // Audio files (WAV, FLAC, AIFF, anything libsndfile opens) through AudioFileReader.
        .executableTarget(name: "FuzzAudioFile", dependencies: ["CFuzzerDriver", .product(name: "SottoAudio", package: "sotto")]),
        // Arbitrary 16-bit samples through the streaming frame decoder.
        .executableTarget(name: "FuzzFrameDecoder", dependencies: ["CFuzzerDriver", .product(name: "SottoModem", package: "sotto")]),
        // The frame codec alone (a token's encoded frame, its likelihoods perturbed), fast enough for deep runs.
        .executableTarget(name: "FuzzFrameCodec", dependencies: ["CFuzzerDriver", .product(name: "SottoModem", package: "sotto")]),
        // Client and server frames of the exchange protocol through the service's validating conversions.
        .executableTarget(name: "FuzzClientFrames", dependencies: ["CFuzzerDriver", .product(name: "SottoExchangeWire", package: "sotto"),
                                                                    .product(name: "SottoExchangeCore", package: "sotto")]),
        // The browser transport (`sotto serve --web`): bytes on a WebSocket through NIO's frame decoder and the
        // transport's aggregator and classification, and as an Origin header.
        .executableTarget(name: "FuzzWebFrames", dependencies: ["CFuzzerDriver", .product(name: "SottoExchangeService", package: "sotto"),
                                                                 .product(name: "SottoExchangeWire", package: "sotto"),
                                                                 .product(name: "NIOCore", package: "swift-nio"),
                                                                 .product(name: "NIOEmbedded", package: "swift-nio"),
                                                                 .product(name: "NIOWebSocket", package: "swift-nio")]),
        // The admin API (`sotto serve --admin`): bytes on its connection through NIO's HTTP/1.1 decoder, then AdminAPI.
        .executableTarget(name: "FuzzAdminRequests", dependencies: ["CFuzzerDriver", .product(name: "SottoExchangeService", package: "sotto"),
                                                                     .product(name: "NIOCore", package: "swift-nio"),
                                                                     .product(name: "NIOEmbedded", package: "swift-nio"),
                                                                     .product(name: "NIOHTTP1", package: "swift-nio")]),
        // The daemon's control socket: a byte stream split into frames and decoded into requests.
        .executableTarget(name: "FuzzControlFrames", dependencies: ["CFuzzerDriver", .product(name: "SottoDaemon", package: "sotto")]),
        // Matcher snapshots as a node reads them from the shared database (whole, or a busy core's state overwritten).
        .executableTarget(name: "FuzzMatcherSnapshot", dependencies: ["CFuzzerDriver", .product(name: "SottoExchangeCore", package: "sotto")]),
        // The whole program: recipes of commands, formats, cuts, flips, stdin and outputs, run as `sotto` processes.
        .executableTarget(name: "FuzzCommandLine", dependencies: ["CFuzzerDriver"]),
        // The command line's hex, text and number parsers (Sources/sotto/Arguments.swift, linked here).
        .executableTarget(name: "FuzzParsers",
                          dependencies: ["CFuzzerDriver", .product(name: "SottoModem", package: "sotto"), .product(name: "SottoAudio", package: "sotto"),
                                         .product(name: "ArgumentParser", package: "swift-argument-parser")]),
    ]
)
