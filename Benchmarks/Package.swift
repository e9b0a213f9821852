// swift-tools-version: 6.1
import PackageDescription

// Throughput, allocations and memory of the modem (ordo-one/benchmark). Run from this directory:
//   swift package benchmark
let package = Package(
    name: "sotto-benchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(name: "sotto", path: "../"),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "ModemBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "SottoModem", package: "sotto"),
                .product(name: "SottoAudio", package: "sotto"),
                .product(name: "SottoChannel", package: "sotto"),
                .product(name: "SottoDSP", package: "sotto"),
            ],
            path: "Benchmarks/ModemBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
