// swift-tools-version: 6.1
import PackageDescription

// One strictness policy for every Swift target (the idiom of apple/swift-log's manifest).
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("NonisolatedNonsendingByDefault"),
]
// Hot numeric code: cross-module optimisation in release builds.
let hot: [SwiftSetting] = strict + [
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release)),
]

let package = Package(
    name: "sotto",
    products: [
        .library(name: "SottoSupport", targets: ["SottoSupport"]),
        .library(name: "SottoDSP", targets: ["SottoDSP"]),
        .library(name: "SottoCodes", targets: ["SottoCodes"]),
        .library(name: "SottoChannel", targets: ["SottoChannel"]),
        .library(name: "SottoModem", targets: ["SottoModem"]),
        .library(name: "SottoAudio", targets: ["SottoAudio"]),
        .library(name: "SottoLive", targets: ["SottoLive"]),
        .library(name: "SottoExchangeCore", targets: ["SottoExchangeCore"]),
        .library(name: "SottoExchange", targets: ["SottoExchange"]),
        .library(name: "SottoExchangeRadio", targets: ["SottoExchangeRadio"]),
        .library(name: "SottoExchangeWire", targets: ["SottoExchangeWire"]),
        .library(name: "SottoExchangeClient", targets: ["SottoExchangeClient"]),
        .library(name: "SottoExchangeLoad", targets: ["SottoExchangeLoad"]),
        .library(name: "SottoExchangeService", targets: ["SottoExchangeService"]),
        .library(name: "SottoTools", targets: ["SottoTools"]),
        .library(name: "SottoLab", targets: ["SottoLab"]),
        .library(name: "SottoNotify", targets: ["SottoNotify"]),
        .library(name: "SottoDaemon", targets: ["SottoDaemon"]),
        .executable(name: "sotto", targets: ["sotto"]),
        // Test fixture, not for use: an ALSA I/O plugin that can be unplugged and suspended on demand, so the
        // live tests drive device failures through real libasound (ALSA dlopens it by this file name).
        // The C library (installed as libsotto.so.1 by scripts/install): the modem behind sotto.h, for C, Python and
        // any language with a C FFI. Links the modem modules only.
        .library(name: "SottoC", type: .dynamic, targets: ["SottoC"]),
        .library(name: "asound_module_pcm_sottofault", type: .dynamic, targets: ["ALSAFaultPlugin"]),
        // Test fixture, not for use: loaded with LD_PRELOAD, fails FFTW's buffer allocations of chosen sizes
        // (SOTTO_FAULT_MEMALIGN), so tests see a transform that cannot be made as a user would.
        .library(name: "sotto_allocfault", type: .dynamic, targets: ["AllocFaultShim"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // Documentation only (`scripts/docs`): the DocC plugin adds a command, nothing to any product.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-numerics", from: "1.1.1"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        // The matcher service and its clients only (a program that embeds the modem builds none of these).
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // HTTP/2 frames of the service's streams (already under grpc-swift-nio-transport): the frame-size guard.
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // The PostgreSQL store and replication log, shared by several `sotto serve` nodes.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // SHA-256 of API keys (already a dependency of postgres-nio; no hand-written hash).
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3" ..< "5.0.0"),
        // Desktop notifications: media downloads (redirects, time-outs and size caps on NIO, already a dependency).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // System libraries (Debian: libfftw3-dev, libsndfile1-dev, libasound2-dev), found through pkg-config.
        .systemLibrary(name: "CFFTW", pkgConfig: "fftw3f", providers: [.apt(["libfftw3-dev"])]),
        .systemLibrary(name: "CSndFile", pkgConfig: "sndfile", providers: [.apt(["libsndfile1-dev"])]),
        // Ogg Vorbis on a pipe, decoded as it arrives (libsndfile seeks in Ogg: it reads a pipe only to its end).
        .systemLibrary(name: "CVorbisFile", pkgConfig: "vorbisfile", providers: [.apt(["libvorbis-dev"])]),
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        // The reference D-Bus client library (Debian: libdbus-1-dev), for desktop notifications.
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        // C for what Swift cannot import: ALSA's variadic error handler, *_alloca macros.
        .target(name: "CSottoShims", dependencies: ["CALSA"]),
        // Test fixture (see the product sotto_allocfault); lives with the tests.
        .target(name: "AllocFaultShim", path: "Tests/AllocFaultShim", publicHeadersPath: "."),
        // Test fixture (see the product above); lives with the tests.
        .target(name: "ALSAFaultPlugin", dependencies: ["CALSA"], path: "Tests/ALSAFaultPlugin", publicHeadersPath: ".",
                // PIC selects the dlopen form of ALSA's plugin entry symbol.
                cSettings: [.define("PIC")]),

        // The few primitives every layer shares (a stop flag), so that audio, exchange and tools need not
        // depend on each other for them. No dependencies.
        .target(name: "SottoSupport", swiftSettings: strict),
        // Signal processing: FFT, synthesis, filters, resampling. No I/O.
        .target(name: "SottoDSP",
                dependencies: ["CFFTW", .product(name: "RealModule", package: "swift-numerics")],
                swiftSettings: hot),
        // Error-correcting and error-detecting codes. Pure Swift, no dependencies.
        .target(name: "SottoCodes", swiftSettings: hot),
        // Acoustic channel simulator (noise, clock offset, reverberation, roll-off, clipping). No I/O.
        .target(name: "SottoChannel",
                dependencies: ["SottoDSP", "SottoCodes", .product(name: "RealModule", package: "swift-numerics")],
                swiftSettings: hot),
        // Profiles, frame format, modulator and streaming demodulator/decoder.
        .target(name: "SottoModem",
                dependencies: ["SottoDSP", "SottoCodes", .product(name: "RealModule", package: "swift-numerics")],
                swiftSettings: hot),
        // Audio files (libsndfile) and live devices (ALSA). Knows nothing of DSP.
        .target(name: "SottoAudio",
                dependencies: ["CSndFile", "CVorbisFile", "CALSA", "CSottoShims", "SottoSupport"],
                swiftSettings: strict),
        // Live use: ALSA capture feeding the streaming decoder, looped playback, self-check.
        .target(name: "SottoLive",
                dependencies: ["SottoAudio", "SottoModem", "SottoDSP", "SottoSupport"],
                swiftSettings: strict),
        // What the `sotto` command does, for programs that embed Sotto: decoding recordings and streams, the
        // JSON Lines records, exchange sessions, the simulated channel's files, fixtures and their benchmark.
        .target(name: "SottoTools",
                dependencies: ["SottoModem", "SottoChannel", "SottoAudio", "SottoDSP", "SottoExchange", "SottoExchangeCore", "SottoExchangeRadio",
                               "SottoSupport", .product(name: "RealModule", package: "swift-numerics")],
                swiftSettings: strict),
        // The lab behind `sotto bench sweep`: robustness sweeps of the modem, the crowd simulation (many devices,
        // the sender's rules and the matcher's turns), the earshot and beacon-skew sweeps, room scenarios.
        .target(name: "SottoLab",
                dependencies: ["SottoTools", "SottoModem", "SottoChannel", "SottoAudio", "SottoDSP", "SottoExchange", "SottoExchangeCore"],
                swiftSettings: strict),
        // The per-user daemon (`sotto daemon`): the control socket and its protocol, the operations it runs on
        // the shared devices, consent, persistence. Matcher services plug in as a closure (no network here).
        .target(name: "SottoDaemon",
                dependencies: ["SottoExchange", "SottoExchangeCore", "SottoExchangeRadio", "SottoTools", "SottoLive", "SottoAudio", "SottoModem", "SottoSupport",
                               "CSottoShims"],
                swiftSettings: strict),
        // The exchange's pure core: messages, filters and strategies, the matcher (MatcherCore, its turns), what a
        // session asks of it and is told, snapshots of its state. No clock, no Task, no logging, no I/O (nothing
        // here depends on swift-log or NIO; time is an argument): hosts wrap it.
        .target(name: "SottoExchangeCore",
                dependencies: ["SottoSupport",
                               // HMAC-SHA256 of rotating beacon IDs (BeaconRotation.swift).
                               .product(name: "Crypto", package: "swift-crypto"),
                               .product(name: "HeapModule", package: "swift-collections"),
                               // Snapshots of the core's state (Snapshot/matcher_snapshot.proto).
                               .product(name: "SwiftProtobuf", package: "swift-protobuf")],
                exclude: ["Snapshot/matcher_snapshot.proto"],
                swiftSettings: strict),
        // Nearby-style publish/subscribe for an app: the manager it talks to, the embedded matcher (LocalMatcher)
        // and the link the remote client plugs in behind, consent. No audio, no network.
        .target(name: "SottoExchange",
                dependencies: ["SottoExchangeCore", "SottoSupport",
                               .product(name: "Logging", package: "swift-log")],
                swiftSettings: strict),
        // The exchange on the sound card: capture feeds the manager, playback loops its tokens.
        .target(name: "SottoExchangeRadio",
                dependencies: ["SottoExchange", "SottoExchangeCore", "SottoModem", "SottoLive", "SottoAudio"],
                swiftSettings: strict),
        // The wire contract (Protos/exchange.proto) and its generated Swift code, shared by service and client.
        .target(name: "SottoExchangeWire",
                dependencies: ["SottoExchangeCore",
                               .product(name: "GRPCCore", package: "grpc-swift-2"),
                               .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf"),
                               .product(name: "SwiftProtobuf", package: "swift-protobuf")],
                exclude: ["exchange.proto"],
                swiftSettings: strict),
        // The matcher as a network service: gRPC sessions, projects and keys, limits, metrics; stores.
        .target(name: "SottoExchangeService",
                dependencies: ["SottoExchange", "SottoExchangeCore", "SottoExchangeWire", "SottoSupport",
                               .product(name: "GRPCCore", package: "grpc-swift-2"),
                               .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                               .product(name: "NIOCore", package: "swift-nio"),
                               .product(name: "NIOPosix", package: "swift-nio"),
                               .product(name: "NIOHTTP1", package: "swift-nio"),
                               // The browser transport (`sotto serve --web`): the exchange's frames on WebSockets.
                               .product(name: "NIOWebSocket", package: "swift-nio"),
                               // `sotto admin --server`: the admin API's client (RemoteAdminStore).
                               .product(name: "AsyncHTTPClient", package: "async-http-client"),
                               .product(name: "NIOSSL", package: "swift-nio-ssl"),
                               .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                               .product(name: "NIOHPACK", package: "swift-nio-http2"),
                               .product(name: "Metrics", package: "swift-metrics"),
                               .product(name: "CoreMetrics", package: "swift-metrics"),
                               .product(name: "Prometheus", package: "swift-prometheus"),
                               .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                               .product(name: "GRDB", package: "GRDB.swift"),
                               .product(name: "PostgresNIO", package: "postgres-nio"),
                               .product(name: "Crypto", package: "swift-crypto"),
                               .product(name: "Logging", package: "swift-log"),
                               // The session outbox's queue (Outbox.swift), the Hello deadlines (HelloGate.swift); the replication log's messages.
                               .product(name: "DequeModule", package: "swift-collections"),
                               .product(name: "SwiftProtobuf", package: "swift-protobuf")],
                exclude: ["Replication/replication.proto"],
                swiftSettings: strict),
        // A MessageManager backed by `sotto serve`: one gRPC stream per session, reconnecting.
        .target(name: "SottoExchangeClient",
                dependencies: ["SottoExchange", "SottoExchangeCore", "SottoExchangeWire",
                               .product(name: "GRPCCore", package: "grpc-swift-2"),
                               .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                               // TLSCheck: a handshake that verifies the certificate as the client does, before it connects.
                               .product(name: "NIOCore", package: "swift-nio"),
                               .product(name: "NIOPosix", package: "swift-nio"),
                               .product(name: "NIOSSL", package: "swift-nio-ssl"),
                               .product(name: "NIOTLS", package: "swift-nio"),
                               .product(name: "Logging", package: "swift-log")],
                swiftSettings: strict),
        // The load generator of `sotto load`: simulated devices on raw gRPC streams, measuring a service.
        .target(name: "SottoExchangeLoad",
                dependencies: ["SottoExchange", "SottoExchangeCore", "SottoExchangeWire",
                               .product(name: "GRPCCore", package: "grpc-swift-2"),
                               .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport")],
                swiftSettings: strict),
        // The C API: sotto.h (the one definition of the ABI) and a thread-local error message; its functions
        // are implemented in Swift by SottoC (@c @implementation checks each against the header).
        .target(name: "CSotto"),
        .target(name: "SottoC",
                dependencies: ["CSotto", "SottoModem", "SottoChannel", "SottoDSP"],
                swiftSettings: strict,
                // soname with the ABI's major number; only the sotto_* functions exported, versioned SOTTO_1.
                linkerSettings: [.unsafeFlags(["-Xlinker", "-soname=libsotto.so.1",
                                               "-Xlinker", "--version-script=\(Context.packageDirectory)/Sources/CSotto/libsotto.map"])]),
        // Found/lost events as grouped freedesktop desktop notifications (D-Bus), with media, and a per-event
        // command for headless machines. No audio, no modem, no exchange: its own small event value.
        .target(name: "SottoNotify",
                dependencies: ["CDBus",
                               .product(name: "AsyncHTTPClient", package: "async-http-client"),
                               .product(name: "NIOCore", package: "swift-nio"),
                               .product(name: "NIOHTTP1", package: "swift-nio"),
                               .product(name: "Crypto", package: "swift-crypto"),
                               .product(name: "Logging", package: "swift-log")],
                swiftSettings: strict),
        // The daemon's notifications: its subscription events as SottoNotify events (desktop, --exec). Apart
        // from SottoDaemon, so that a program embedding the daemon or the modem links no D-Bus.
        .target(name: "SottoDaemonNotify", dependencies: ["SottoDaemon", "SottoNotify", "SottoExchange", "SottoExchangeCore"], swiftSettings: strict),
        .executableTarget(name: "sotto",
                dependencies: ["SottoModem", "SottoChannel", "SottoAudio", "SottoLive", "SottoExchange", "SottoExchangeCore", "SottoSupport", "CSottoShims",
                               "SottoExchangeRadio", "SottoExchangeService", "SottoExchangeClient", "SottoExchangeWire",
                               "SottoDSP", "SottoExchangeLoad",
                               .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                               .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                               .product(name: "ArgumentParser", package: "swift-argument-parser"),
                               .product(name: "Logging", package: "swift-log"), "SottoTools", "SottoLab", "SottoDaemon", "SottoNotify", "SottoDaemonNotify"],
                swiftSettings: strict),

        .testTarget(name: "SottoDSPTests",
                    dependencies: ["SottoDSP", .product(name: "RealModule", package: "swift-numerics")],
                    swiftSettings: strict),
        .testTarget(name: "SottoCodesTests",
                    dependencies: ["SottoCodes", .product(name: "PropertyBased", package: "swift-property-based")],
                    swiftSettings: strict),
        .testTarget(name: "SottoChannelTests", dependencies: ["SottoChannel", "SottoDSP"], swiftSettings: strict),
        .testTarget(name: "SottoModemTests",
                    dependencies: ["SottoModem", "SottoDSP", "SottoChannel", "SottoCodes",
                                   .product(name: "PropertyBased", package: "swift-property-based")],
                    swiftSettings: strict),
        .testTarget(name: "SottoAudioTests", dependencies: ["SottoAudio"], swiftSettings: strict),
        .testTarget(name: "SottoExchangeTests",
                    dependencies: ["SottoExchange", "SottoExchangeCore", "SottoExchangeRadio", "SottoLive", "SottoModem", "SottoAudio", "SottoSupport", "SottoCodes",
                                   .product(name: "HeapModule", package: "swift-collections")],
                    swiftSettings: strict),
        // Test harnesses shared by test targets (a real PostgreSQL server in a temporary directory).
        .target(name: "SottoTestSupport", path: "Tests/SottoTestSupport", swiftSettings: strict),
        .testTarget(name: "SottoServiceTests",
                    dependencies: ["SottoExchange", "SottoExchangeCore", "SottoExchangeWire", "SottoExchangeService", "SottoExchangeClient", "SottoTestSupport",
                                   "SottoExchangeLoad",  // the DocC catalog's worked example
                                   .product(name: "GRPCCore", package: "grpc-swift-2"),
                                   .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                                   .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                                   .product(name: "NIOCore", package: "swift-nio"),
                                   .product(name: "NIOPosix", package: "swift-nio"),
                                   .product(name: "PostgresNIO", package: "postgres-nio"),
                                   .product(name: "Crypto", package: "swift-crypto"),
                                   // A WebSocket client (over TLS too) for the browser transport's tests.
                                   .product(name: "NIOWebSocket", package: "swift-nio"),
                                   .product(name: "NIOHTTP1", package: "swift-nio"),
                                   .product(name: "NIOSSL", package: "swift-nio-ssl"),
                                   // A server shut down gracefully, as `sotto serve` does.
                                   .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                                   .product(name: "Logging", package: "swift-log")],
                    swiftSettings: strict),
        .testTarget(name: "SottoNotifyTests",
                    dependencies: ["SottoNotify", "CDBus",
                                   .product(name: "NIOCore", package: "swift-nio"),
                                   .product(name: "NIOPosix", package: "swift-nio"),
                                   .product(name: "NIOHTTP1", package: "swift-nio")],
                    swiftSettings: strict),
        .testTarget(name: "SottoCLITests",
                    dependencies: ["sotto", "SottoTools", "SottoLab", "SottoModem", "SottoChannel", "SottoAudio", "SottoLive", "SottoExchange", "SottoExchangeCore", "SottoExchangeRadio",
                                   "SottoExchangeClient", "SottoExchangeWire", "SottoTestSupport", "SottoDaemon", "SottoSupport",
                                   "SottoNotify", "SottoDaemonNotify",
                                   .product(name: "GRPCCore", package: "grpc-swift-2"),
                                   .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                                   .product(name: "NIOCore", package: "swift-nio"),
                                   .product(name: "NIOPosix", package: "swift-nio")],
                    swiftSettings: strict),
    ]
)
