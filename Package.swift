// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "pigeon",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "PigeonProtocol", targets: ["PigeonProtocol"]),
        .library(name: "PigeonRedis", targets: ["PigeonRedis"]),
        .library(name: "PigeonServer", targets: ["PigeonServer"]),
        .library(name: "PigeonKit", targets: ["PigeonKit"]),
        .library(name: "PigeonFaultProxy", targets: ["PigeonFaultProxy"]),
        .executable(name: "pigeon", targets: ["pigeon"]),
        .executable(name: "pigeon-demo", targets: ["pigeon-demo"]),
        .executable(name: "pigeon-server", targets: ["pigeon-server"]),
        .executable(name: "pigeon-bench", targets: ["pigeon-bench"]),
        .executable(name: "pigeonkit-bench", targets: ["pigeonkit-bench"]),
        .executable(name: "pigeonkit-device", targets: ["pigeonkit-device"]),
        .executable(name: "pigeonkit-size-probe", targets: ["pigeonkit-size-probe"]),
        .executable(name: "empty-probe", targets: ["empty-probe"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-transport-services.git", from: "1.28.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
    ],
    targets: [
        .target(
            name: "PigeonProtocol",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonRedis",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The server, one module per seam: the domain (types, seam protocols, pure rules), one module per backend
        // (each links only its own database client), the machine-readable contract, and the HTTP application that
        // composes them (docs/ARCHITECTURE.md).
        .target(
            name: "PigeonDomain",
            dependencies: [
                "PigeonProtocol",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonSQLite",
            dependencies: [
                "PigeonDomain",
                "PigeonProtocol",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonPostgres",
            dependencies: [
                "PigeonDomain",
                "PigeonProtocol",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonRedisBuffer",
            dependencies: [
                "PigeonDomain",
                "PigeonProtocol",
                "PigeonRedis",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonContract",
            dependencies: [
                "PigeonProtocol",
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        // PigeonJS, the browser SDK: its ES modules, embedded for the server to serve at /sdk/.
        .target(
            name: "PigeonJS",
            path: "Clients/PigeonJS",
            resources: [.embedInCode("src")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonServer",
            dependencies: [
                "PigeonJS",
                "PigeonProtocol",
                "PigeonDomain",
                "PigeonSQLite",
                "PigeonPostgres",
                "PigeonRedisBuffer",
                "PigeonContract",
                "PigeonRedis",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            resources: [.embedInCode("Pages")],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonKit",
            // What a chat client needs and nothing more (an app's size is the SDK's budget): SwiftNIO's HTTP/1.1 and
            // WebSocket codecs under PigeonKit's own client, TLS through the system (Network.framework, by
            // NIOTransportServices) on Apple platforms and NIOSSL elsewhere, and GRDB.
            dependencies: [
                "PigeonProtocol",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(platforms: [.linux, .android, .windows, .openbsd])),
                .product(name: "NIOTLS", package: "swift-nio", condition: .when(platforms: [.linux, .android, .windows, .openbsd])),
                .product(
                    name: "NIOTransportServices", package: "swift-nio-transport-services",
                    condition: .when(platforms: [.macOS, .iOS, .tvOS, .watchOS, .visionOS])),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonFaultProxy",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonTerminal",
            dependencies: [
                "PigeonKit",
                "PigeonProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "pigeon",
            dependencies: ["PigeonTerminal"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonDemo",
            dependencies: [
                "PigeonTerminal",
                "PigeonKit",
                "PigeonProtocol",
                "PigeonServer",
                "PigeonFaultProxy",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "pigeon-demo",
            dependencies: ["PigeonDemo", "PigeonTerminal"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "pigeon-server",
            dependencies: [
                "PigeonServer",
                "PigeonDomain",
                "PigeonContract",
                "PigeonSQLite",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonBenchSupport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/BenchSupport",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "pigeon-bench",
            dependencies: [
                "PigeonProtocol",
                "PigeonBenchSupport",
                "PigeonRedis",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/pigeon-bench",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "pigeonkit-bench",
            dependencies: [
                "PigeonKit",
                "PigeonServer",
                "PigeonBenchSupport",
                "PigeonKitBenchDevice",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/pigeonkit-bench",
            swiftSettings: swiftSettings
        ),
        // The receiving device's measurements, shared by pigeonkit-bench (--in-process) and pigeonkit-device.
        .target(
            name: "PigeonKitBenchDevice",
            dependencies: [
                "PigeonKit",
                "PigeonBenchSupport",
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/PigeonKitBenchDevice",
            swiftSettings: swiftSettings
        ),
        // pigeonkit-bench's receiving device in a process that links PigeonKit and nothing of the server: its memory
        // is the SDK's.
        .executableTarget(
            name: "pigeonkit-device",
            dependencies: ["PigeonKitBenchDevice", "PigeonBenchSupport", .product(name: "Logging", package: "swift-log")],
            path: "Benchmarks/pigeonkit-device",
            swiftSettings: swiftSettings
        ),
        // The smallest app that uses PigeonKit, and an empty Swift executable: what PigeonKit adds to an app's size
        // (pigeonkit-bench strips both and prints the difference).
        .executableTarget(
            name: "pigeonkit-size-probe",
            dependencies: ["PigeonKit"],
            path: "Benchmarks/pigeonkit-size-probe",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "empty-probe",
            path: "Benchmarks/empty-probe",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PigeonTestSupport",
            dependencies: [
                "PigeonFaultProxy",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Tests/PigeonTestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PigeonRedisTests",
            dependencies: [
                "PigeonRedis",
                "PigeonRedisBuffer",
                "PigeonDomain",
                "PigeonProtocol",
                "PigeonTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "pigeonkit-test-helper",
            dependencies: ["PigeonKit"],
            path: "Tests/pigeonkit-test-helper",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PigeonTestSupportTests",
            dependencies: [
                "PigeonTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PigeonKitTests",
            dependencies: [
                "PigeonKit",
                "PigeonServer",
                "PigeonSQLite",
                "PigeonProtocol",
                "PigeonTestSupport",
                "pigeonkit-test-helper",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PigeonTerminalTests",
            dependencies: ["PigeonTerminal", "PigeonKit", "PigeonProtocol"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PigeonCLITests",
            dependencies: [
                "pigeon",
                "pigeon-demo",
                "pigeon-server",
                "PigeonTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            swiftSettings: swiftSettings
        ),
        // The pure rules (no I/O, no server, no clock): they run in seconds, first, so that a broken rule fails at once.
        .testTarget(
            name: "PigeonDomainTests",
            dependencies: ["PigeonDomain", "PigeonProtocol", "PigeonServer", "PigeonRedisBuffer", "PigeonTestSupport"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PigeonServerTests",
            dependencies: [
                "PigeonServer",
                "PigeonJS",
                "PigeonDomain",
                "PigeonSQLite",
                "PigeonPostgres",
                "PigeonRedisBuffer",
                "PigeonContract",
                "pigeon-server",
                "PigeonProtocol",
                "PigeonTestSupport",
                "PigeonRedis",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
