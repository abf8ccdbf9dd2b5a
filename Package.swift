// swift-tools-version:6.1
import PackageDescription

// The tests' own code is not what ships: in the release build the tests run
// against (scripts/deps.sh), it is compiled unoptimised and a file at a time
// on every core, which takes a minute of the build where whole-module
// optimisation took three and a half on one core.
var testsUnoptimized: [SwiftSetting] {
    [.unsafeFlags(["-Onone", "-no-whole-module-optimization"], .when(configuration: .release))]
}

// The tests reach the gateway's internals (`@testable import`), so its own
// modules are compiled testable in the one release build that the tests, the
// chaos runs and the package share (scripts/deps.sh). Only those: the
// dependencies (NIO, Hummingbird, ...) keep their full optimisation, which is
// where nearly all of what -enable-testing cost the shipped binary went
// (docs/BENCHMARKS.md, "What -enable-testing costs").
var testable: [SwiftSetting] {
    [.unsafeFlags(["-enable-testing"], .when(configuration: .release))]
}

let package = Package(
    name: "claw-gateway",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "claw-gateway", targets: ["ClawGateway"]),
        .executable(name: "claw-bench", targets: ["ClawBench"]),
        .library(name: "Protocol", targets: ["Protocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/pointfreeco/swift-clocks.git", from: "1.1.1"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        .systemLibrary(
            name: "CMosquitto",
            pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"])]
        ),
        .target(name: "Protocol", dependencies: [.product(name: "Crypto", package: "swift-crypto")], swiftSettings: testable),
        .executableTarget(
            name: "ClawGateway",
            dependencies: [
                "CMosquitto",
                "Protocol",
                .product(name: "Yams", package: "Yams"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            // The dashboard, compiled into the binary: nothing to install beside it.
            resources: [
                .embedInCode("Live/Dashboard/dashboard.html"),
                .embedInCode("Live/Dashboard/dashboard.js"),
                .embedInCode("Live/Dashboard/dashboard.css"),
                .embedInCode("Live/ChainDashboard/chain.html"),
                .embedInCode("Live/ChainDashboard/chain.js"),
                .embedInCode("Live/ChainDashboard/chain.css"),
                .embedInCode("Live/HistoryDashboard/history.html"),
                .embedInCode("Live/HistoryDashboard/history.js"),
                .embedInCode("Live/HistoryDashboard/history.css"),
                .embedInCode("Live/ParcelsDashboard/parcels.html"),
                .embedInCode("Live/ParcelsDashboard/parcels.js"),
                .embedInCode("Live/ParcelsDashboard/parcels.css"),
                .embedInCode("Live/AuditDashboard/audit.html"),
                .embedInCode("Live/AuditDashboard/audit.js"),
                .embedInCode("Live/AuditDashboard/audit.css"),
                .embedInCode("Live/Shared/read-token.js"),
            ],
            swiftSettings: testable
        ),
        // The soak, memory and start-up benchmark: its own binary, not the daemon's.
        .executableTarget(
            name: "ClawBench",
            dependencies: [
                "Protocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(name: "ProtocolTests", dependencies: ["Protocol"], swiftSettings: testsUnoptimized),
        .testTarget(
            name: "ClawGatewayTests",
            dependencies: [
                "ClawGateway",
                "Protocol",
                .product(name: "Clocks", package: "swift-clocks"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: testsUnoptimized
        ),
    ],
    swiftLanguageModes: [.v6]
)
