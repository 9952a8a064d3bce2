import ArgumentParser
import Foundation
import Logging
import PigeonBenchSupport
import PigeonKit
import PigeonKitBenchDevice
import PigeonServer

/// Sends the process's log output to standard error.
let loggingToStandardError: Void = LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = .warning
    return handler
}

/// `pigeonkit-bench`: measures the client SDK against its targets (send p99 ≤ 1 ms, load 50 ≤ 2 ms,
/// 10,000 missed messages caught up in ≤ 1 s, ≤ 30 MB with 10,000 cached messages), with a real Pigeon server
/// running inside the benchmark's process.
@main
struct PigeonKitBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pigeonkit-bench",
        abstract: "Measure PigeonKit's local send, page loads, catch-up and memory against the SDK's targets.",
        discussion: """
            Starts a Pigeon server in this process (embedded SQLite store and buffer, every commit fsynced, a fresh \
            data directory, a free loopback port) and registers three devices. (1) send: a device that never goes \
            online sends --sends messages after --warmup-sends unmeasured ones; each is timed from the call until its \
            messageStatusChanged (pending) event is read from events(). (4) catch-up: a receiving device connects \
            once (so it holds a stream cursor), stops, and another device sends --messages messages to it over HTTP; \
            once the server has stored them all, the receiver is started and timed until the last one is persisted \
            and announced. (2) loads: the receiver then loads the newest 50-message page --loads times and --loads \
            pages scrolled back with before:. (3) memory: the receiver's resident set size with the messages cached. \
            The receiver runs in a child process (pigeonkit-device, built beside this executable: it links PigeonKit \
            and nothing of the server), so that its memory is the SDK's alone; --in-process runs it here instead. \
            (5) size: the stripped sizes of pigeonkit-size-probe (the smallest app using PigeonKit), empty-probe (an \
            empty Swift executable) and pigeon (the terminal client), all built beside this executable.
            """)

    @Option(help: "Messages the receiving device misses while offline and then catches up.")
    var messages = 10_000

    @Option(help: "Measured sends.")
    var sends = 5_000

    @Option(help: "Unmeasured sends before the measured ones.")
    var warmupSends = 500

    @Option(help: "Measured loads of each kind of page (newest, scrolled back).")
    var loads = 1_000

    @Option(help: "Message body size in bytes (chat-like words).")
    var bodyBytes = 100

    @Option(help: "HTTP connections that fill the conversation.")
    var fillConnections = 32

    @Flag(help: "Run the receiving device in this process instead of a child process (its memory then includes the server).")
    var inProcess = false

    @Flag(help: "Client databases flush every write to disk (PigeonClient.Configuration.flushEveryWrite).")
    var flushEveryWrite = false

    @Option(help: ArgumentHelp(
        "A directory holding a build of empty-probe, pigeonkit-size-probe and pigeon optimised for size, measured beside "
            + "the ones built with this executable (scripts/bench.sh pigeonkit builds it).", valueName: "directory"))
    var sizeBuild: String?

    @Flag(help: "Measure even in a debug build (the figures then say nothing about a release build).")
    var allowDebug = false

    func validate() throws {
        guard messages >= 100 else { throw ValidationError("--messages must be at least 100") }
        guard sends > 0, loads > 0, warmupSends >= 0, bodyBytes > 0, fillConnections > 0 else {
            throw ValidationError("counts and sizes must be positive")
        }
    }

    func run() async throws {
        _ = loggingToStandardError
        let memoryAtStartup = MemorySnapshot.now
        #if DEBUG
        let build = "debug build"
        #else
        let build = "release build"
        #endif
        say("pigeonkit-bench: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(build), \(Self.osName)\(Self.loadAverage)")
        #if DEBUG
        say("warning: this is a debug build; its figures say nothing about PigeonKit's speed. Build with -c release")
        say("(swift build -c release --scratch-path .build-release --product pigeonkit-bench), or pass --allow-debug.")
        guard allowDebug else { return }
        #endif
        say("server: in this process, embedded SQLite store and buffer, durable (every commit fsynced)")
        say("receiving device: \(inProcess ? "in this process (--in-process)" : "a child process (pigeonkit-device)")")
        say("this process's RSS at start-up: \(Format.memory(memoryAtStartup))")

        let workspace = try LocalEnvironment.makeTemporaryDirectory(prefix: "pigeonkit-bench")
        defer { try? FileManager.default.removeItem(atPath: workspace) }
        let settings = self
        try await InProcessServer.run(durable: true) { url in
            say("this process's RSS with the server started: \(Format.memory(.now))")
            let results = try await settings.measure(serverURL: url, workspace: workspace)
            results.printSummary(messages: settings.messages, inProcess: settings.inProcess)
        }
    }

    /// The machine's 1-minute load average when the run starts (Linux), as context for a shared machine.
    private static var loadAverage: String {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8), let first = text.split(separator: " ").first else {
            return ""
        }
        return ", load average \(first)"
    }

    private static var osName: String {
        #if os(Linux)
        "Linux"
        #elseif os(macOS)
        "macOS"
        #else
        "unknown OS"
        #endif
    }

    private func clientConfiguration(_ serverURL: URL, _ path: String, _ credentials: PigeonClient.Credentials) -> PigeonClient.Configuration {
        var configuration = PigeonClient.Configuration(serverURL: serverURL, databasePath: path, credentials: credentials)
        configuration.flushEveryWrite = flushEveryWrite
        var logger = Logger(label: "PigeonKit")
        logger.logLevel = .warning
        configuration.logger = logger
        return configuration
    }

    private func measure(serverURL: URL, workspace: String) async throws -> Results {
        let clock = ContinuousClock()
        let alice = try await PigeonClient.registerDevice(serverURL: serverURL, userId: "alice", deviceName: "receiver")
        let bob = try await PigeonClient.registerDevice(serverURL: serverURL, userId: "bob", deviceName: "sender")
        let carol = try await PigeonClient.registerDevice(serverURL: serverURL, userId: "carol", deviceName: "offline sender")

        say("\n[1] send (local save + event), a client that never went online, \(bodyBytes)-byte bodies")
        let sender = try PigeonClient(configuration: clientConfiguration(serverURL, workspace + "/carol.sqlite", carol))
        let sendConversation = try await sender.createConversation(members: ["bob"])
        let send = try await SendLatency(client: sender, conversationId: sendConversation.id, bodyBytes: bodyBytes)
            .run(warmup: warmupSends, count: sends)
        say("    call → send returned:           \(Format.latency(send.call))")
        say("    call → pending event read:      \(Format.latency(send.event))")

        say("\n[4] catch-up (before [2] and [3], which read what it brings): the receiver connects once, then goes offline")
        let receiverPath = workspace + "/alice.sqlite"
        let conversationId = try await prepareReceiver(serverURL: serverURL, path: receiverPath, alice: alice, bob: bob, workspace: workspace)
        let http = ServerHTTP(baseURL: serverURL, connections: fillConnections)
        defer { http.invalidate() }
        let fillStart = clock.now
        try await http.send(count: messages, bodyBytes: bodyBytes, to: conversationId, token: bob.token, concurrency: fillConnections)
        let accepted = clock.now - fillStart
        try await http.waitUntilStored(messages, in: conversationId, token: bob.token, timeout: .seconds(300))
        let stored = clock.now - fillStart
        say("    another device sent \(Format.count(messages)) messages over HTTP (\(fillConnections) connections):"
            + " all accepted in \(Format.seconds(accepted.seconds)), all stored in \(Format.seconds(stored.seconds))"
            + " (\(Format.count(Int(Double(messages) / stored.seconds))) msg/s)")
        say("    the server's lastSeq is \(Format.count(messages)); starting the receiver")

        let job = DeviceJob(
            serverURL: serverURL.absoluteString, databasePath: receiverPath, userId: alice.userId, deviceId: alice.deviceId,
            token: alice.token, conversationId: conversationId, messages: messages, loads: loads, pageSize: 50,
            flushEveryWrite: flushEveryWrite)
        let serverCPUAtStart = ProcessStats.cpuSecondsOfThisProcess
        let device = inProcess ? try await DevicePhases.run(job, memoryAtStartup: nil) : try await DeviceProcess.run(job)
        let serverCPU = ProcessStats.cpuSecondsOfThisProcess - serverCPUAtStart
        say("    database opened in \(Format.seconds(device.openSeconds)); start() → \(Format.count(device.received)) messages"
            + " persisted and announced: \(Format.seconds(device.catchUpSeconds)); contiguousSeq \(device.contiguousSeq)")
        if !inProcess {
            say("    CPU during the catch-up: receiving device \(Format.seconds(device.catchUpCPUSeconds)); server process, over the"
                + " receiver's whole run (\(DevicePhases.settle) of it idle), \(Format.seconds(serverCPU))")
        }

        say("\n[2] loading 50 messages from a conversation of \(Format.count(messages)) on the device")
        say("    newest page, right after the catch-up:  \(Format.microseconds(device.firstNewestPageMicroseconds))")
        say("    then, \(DevicePhases.settle) later, the client still online:")
        say("    newest page:                            \(Format.latency(device.newestPage))")
        say("    scrolled back (before:, \(device.olderPagesDistinct) pages):   \(Format.latency(device.olderPages))")

        say("\n[3] memory of the receiving device (\(inProcess ? "this process, server included" : "its own process, no server"))")
        if !inProcess { say("    at start-up, before the client:   \(Format.memory(device.memoryAtStartup))") }
        say("    client created, not started:      \(Format.memory(device.memoryAfterOpen))")
        say("    after the catch-up:               \(Format.memory(device.memoryAfterCatchUp))")
        say("    after the page loads:             \(Format.memory(device.memoryAfterLoads))")
        if let files = device.fileBackedAfterLoads {
            say("      its file-backed part:           the executable \(Format.megabytes(files.executable)), the Swift runtime and")
            say("                                      Foundation \(Format.megabytes(files.swiftRuntimeAndFoundation)), other libraries \(Format.megabytes(files.otherLibraries))")
            let largest = files.largest(6).map { "\($0.name) \(Format.megabytes($0.bytes))" }
            say("      largest files:                  \(largest.joined(separator: ", "))")
        }
        say("    peak (VmHWM):                     \(Format.megabytes(device.memoryAfterLoads?.peak))")
        say("    (this process, with the server:   \(Format.memory(.now)))")
        return Results(
            send: send, device: device, sizes: try BinarySizes.measure(workspace: workspace),
            sizeOptimised: try sizeBuild.map { try BinarySizes.measure(workspace: workspace, directory: $0) })
    }

    /// Creates the receiver's database with a stream cursor: the receiver connects, catches up (nothing yet), and
    /// is online when `bob` creates the conversation, so that it learns of it from the stream's
    /// `conversation.created` event, whose cursor it stores. Then the receiver stops (offline). Returns the
    /// conversation's id.
    private func prepareReceiver(
        serverURL: URL, path: String, alice: PigeonClient.Credentials, bob: PigeonClient.Credentials, workspace: String
    ) async throws -> String {
        let receiver = try PigeonClient(configuration: clientConfiguration(serverURL, path, alice))
        receiver.start()
        try await waitFor("the receiver to connect") { receiver.connectionState == .online }
        try await receiver.catchUp()
        let creator = try PigeonClient(configuration: clientConfiguration(serverURL, workspace + "/bob.sqlite", bob))
        let conversation = try await creator.createConversation(members: ["alice"])
        try await waitFor("the receiver to learn of the conversation") { try receiver.conversation(id: conversation.id) != nil }
        // The event's cursor is stored in the same transaction as the conversation; give a later event (none is
        // expected) the same chance before going offline.
        try await Task.sleep(for: .milliseconds(200))
        await receiver.stop()
        return conversation.id
    }

    private func waitFor(_ what: String, timeout: Duration = .seconds(30), _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while try !condition() {
            guard ContinuousClock.now < deadline else { throw BenchError("timed out waiting for \(what)") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}
