import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonFaultProxy
import PigeonKit
import PigeonProtocol
import PigeonServer
import PigeonTerminal

/// `pigeon-demo`: two people chatting through a network that fails, with a real server in this process and two real PigeonKit clients, alice and
/// bob. Alice's network goes through a ``FaultProxy`` so it can be black-holed; each step checks what it shows
/// (a status that does not arrive in time fails the demo), and the end checks that both devices hold every
/// message once, in order.
final class DemoStory: Sendable {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    private let plain: Bool
    private let pace: Double
    private let server: InProcessServer
    private let proxy: FaultProxy
    private let alice: PigeonClient
    private let bob: PigeonClient
    private let conversationId: String
    private let directory: String
    private let started = ContinuousClock.now
    private let view = NIOLockedValueBox(ViewState())

    private struct ViewState {
        var title = "Pigeon demo"
        var narration = ""
        var aliceInput = ""
        var bobInput = ""
    }

    /// Starts the server, the proxy and both clients, and creates their conversation.
    static func make(plain: Bool, pace: Double) async throws -> DemoStory {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-demo-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory + "/server", withIntermediateDirectories: true)
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory + "/server"
        configuration.keepAliveInterval = .seconds(30)
        configuration.shutdownDrainTimeout = .seconds(3)
        var logger = Logger(label: "pigeon-demo-server")
        logger.logLevel = .critical
        let server = InProcessServer(configuration: configuration, logger: logger)
        try await server.start()
        let proxy = try await FaultProxy.start(upstreamPort: server.port)
        let proxyURL = URL(string: "http://127.0.0.1:\(proxy.port)")!
        func client(_ user: String, url: URL) async throws -> PigeonClient {
            let credentials = try await PigeonClient.registerDevice(serverURL: server.url, userId: user, deviceName: "demo")
            var configuration = PigeonClient.Configuration(serverURL: url, databasePath: "\(directory)/\(user).sqlite", credentials: credentials)
            // Short timings, so the story fits in half a minute: an answer is awaited 1 s, three tries.
            configuration.retryPolicy = RetryPolicy(maxAttempts: 3, ackTimeout: .seconds(1), baseDelay: .milliseconds(200), maxDelay: .milliseconds(500))
            configuration.reconnectBaseDelay = .milliseconds(150)
            configuration.reconnectMaxDelay = .milliseconds(600)
            configuration.connectTimeout = .seconds(3)
            configuration.livenessInterval = .seconds(30)
            configuration.logger = Logger(label: "pigeon-demo")
            return try PigeonClient(configuration: configuration)
        }
        let alice = try await client("alice", url: proxyURL)
        let bob = try await client("bob", url: server.url)
        let conversation = try await alice.createConversation(members: ["bob"])
        return DemoStory(plain: plain, pace: pace, server: server, proxy: proxy, alice: alice, bob: bob, conversationId: conversation.id, directory: directory)
    }

    private init(
        plain: Bool, pace: Double, server: InProcessServer, proxy: FaultProxy, alice: PigeonClient, bob: PigeonClient, conversationId: String,
        directory: String
    ) {
        self.plain = plain
        self.pace = pace
        self.server = server
        self.proxy = proxy
        self.alice = alice
        self.bob = bob
        self.conversationId = conversationId
        self.directory = directory
    }

    /// Plays the story; throws ``Failure`` when something did not happen as it must.
    func run() async throws {
        let terminal = plain ? nil : try Terminal()
        terminal?.enterFullScreen()
        alice.start()
        bob.start()
        let result = await withTaskGroup(of: Result<Void, any Error>?.self) { group in
            group.addTask {
                do {
                    try await self.story()
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            if let terminal {
                group.addTask {
                    while !Task.isCancelled {
                        self.draw(terminal)
                        try? await Task.sleep(for: .milliseconds(80))
                    }
                    return nil
                }
            } else {
                group.addTask { await self.log(self.alice, name: "alice"); return nil }
                group.addTask { await self.log(self.bob, name: "bob"); return nil }
            }
            var result: Result<Void, any Error> = .success(())
            for await outcome in group {
                if let outcome {
                    result = outcome
                    break
                }
            }
            group.cancelAll()
            return result
        }
        if let terminal {
            draw(terminal)
            if case .success = result { try? await Task.sleep(for: seconds(2 * pace)) }
            terminal.restore()
        }
        await alice.stop()
        await bob.stop()
        await proxy.stop()
        await server.stop()
        try? FileManager.default.removeItem(atPath: directory)
        try result.get()
    }

    // MARK: The story

    private func story() async throws {
        let steps = 5
        step(1, of: steps, "Online: ⏰ → ✓ → ✓✓ → blue ✓✓",
             "Alice sends while both are online. ⏰ it is saved on her phone · ✓ the server has it · ✓✓ Bob's phone has it · blue ✓✓ Bob read it.")
        try await expect("alice and bob are online", within: .seconds(10)) { alice.connectionState == .online && bob.connectionState == .online }
        let first = try await type(alice, "Hi Bob! Still on for tonight?")
        try await expectStatus(first, .delivered, within: .seconds(10))
        try await pause(1.2)
        try await read(bob, first)

        step(2, of: steps, "Bob is offline: ✓ stays ✓",
             "Bob's phone loses its network. Alice's message reaches the server (✓) but not Bob (no ✓✓) until his phone is back online.")
        bob.setNetworkEnabled(false)
        let second = try await type(alice, "I'll bring the tickets")
        try await expectStatus(second, .stored, within: .seconds(10))
        try await pause(2)
        guard try status(second) == .stored else { throw Failure(description: "\"I'll bring the tickets\" showed ✓✓ while Bob was offline") }
        bob.setNetworkEnabled(true)
        try await expectStatus(second, .delivered, within: .seconds(10))
        try await pause(0.8)
        try await read(bob, second)

        step(3, of: steps, "Alice is offline: ⏰ until she is back",
             "Alice is in the subway. Her message is saved on her phone (⏰) and goes out by itself when the network returns.")
        alice.setNetworkEnabled(false)
        let third = try await type(alice, "Sent from the subway")
        try await pause(2)
        guard try status(third) == .pending else { throw Failure(description: "\"Sent from the subway\" left the phone while offline") }
        alice.setNetworkEnabled(true)
        try await expectStatus(third, .delivered, within: .seconds(10))
        try await pause(0.8)
        try await read(bob, third)

        step(4, of: steps, "A black-holed network: ⚠️, then retry",
             "Alice's network swallows every packet. Three tries get no answer from the server: ⚠️. The network comes back and Alice retries (Ctrl-R in `pigeon chat`).")
        proxy.setMode(.stall)
        let fourth = try await type(alice, "Can you hear me?")
        try await expectStatus(fourth, .failed, within: .seconds(20))
        try await pause(1.5)
        let connectionsBefore = proxy.acceptedConnections
        proxy.setMode(.forward)
        try await expect("alice reconnects", within: .seconds(10)) {
            alice.connectionState == .online && proxy.acceptedConnections > connectionsBefore
        }
        _ = try alice.retry(localId: fourth.localId)
        try await expectStatus(fourth, .delivered, within: .seconds(10))
        try await pause(0.8)
        try await read(bob, fourth)

        step(5, of: steps, "The server restarts: nothing is lost",
             "The server goes down. Both keep writing (⏰). When it is back, everything goes out, is stored once, in order, and is delivered and read.")
        await server.stop()
        try await expect("both see the server is gone", within: .seconds(10)) { alice.connectionState != .online && bob.connectionState != .online }
        let fifth = try await type(alice, "Server down? No problem")
        let sixth = try await type(bob, "I'll read it when it's back")
        try await pause(1.5)
        try await server.start()
        try await expectStatus(fifth, .delivered, within: .seconds(15))
        try await expectStatus(sixth, .delivered, within: .seconds(15), client: bob)
        try await read(bob, fifth)
        try await read(alice, sixth, client: bob)

        let sent = [first, second, third, fourth, fifth, sixth].map(\.body)
        for (name, client) in [("alice", alice), ("bob", bob)] {
            let messages = try client.messages(in: conversationId, limit: 100).messages
            let seqs = messages.compactMap(\.seq)
            guard seqs == Array(1...Int64(sent.count)), Set(messages.map(\.body)) == Set(sent), messages.count == sent.count else {
                throw Failure(description: "\(name)'s device holds \(messages.map { "\($0.seq.map(String.init) ?? "-"):\($0.body)" }); expected the \(sent.count) messages once each, seq 1…\(sent.count)")
            }
        }
        narrate("Done", "Nothing lost, nothing twice: \(sent.count) messages, seq 1…\(sent.count) on both devices, in order, all read. Try it yourself: `pigeon login`, `pigeon chat`.")
    }

    // MARK: Steps

    private func step(_ number: Int, of total: Int, _ title: String, _ narration: String) {
        narrate("Step \(number)/\(total): \(title)", narration)
    }

    private func narrate(_ title: String, _ narration: String) {
        view.withLockedValue {
            $0.title = "Pigeon demo · \(title)"
            $0.narration = narration
        }
        if plain {
            printLine("")
            printLine("\(elapsed) == \(title) ==")
            printLine("\(elapsed)    \(narration)")
        }
    }

    /// Types `text` into the sender's input line (visibly, on the full screen) and sends it.
    private func type(_ client: PigeonClient, _ text: String) async throws -> PigeonMessage {
        let isAlice = client === alice
        if !plain {
            for index in text.indices {
                view.withLockedValue {
                    if isAlice { $0.aliceInput = String(text[...index]) } else { $0.bobInput = String(text[...index]) }
                }
                try await Task.sleep(for: seconds(0.025 * pace))
            }
            try await pause(0.3)
        }
        view.withLockedValue {
            if isAlice { $0.aliceInput = "" } else { $0.bobInput = "" }
        }
        return try client.send(text, to: conversationId)
    }

    /// The reader opens the chat: waits until `message` is on their device, marks it read, and waits for blue.
    private func read(_ reader: PigeonClient, _ message: PigeonMessage, client sender: PigeonClient? = nil) async throws {
        try await expect("\"\(message.body)\" is on the reader's device", within: .seconds(10)) {
            try reader.search(message.body, in: conversationId).contains { $0.clientMessageId == message.clientMessageId }
        }
        try reader.markRead(conversationId: conversationId)
        try await expectStatus(message, .read, within: .seconds(10), client: sender ?? alice)
        try await pause(0.7)
    }

    private func status(_ message: PigeonMessage, client: PigeonClient? = nil) throws -> MessageStatus? {
        try (client ?? alice).message(localId: message.localId)?.status
    }

    private func expectStatus(_ message: PigeonMessage, _ wanted: MessageStatus, within timeout: Duration, client: PigeonClient? = nil) async throws {
        try await expect("\"\(message.body)\" shows \(Ticks.symbol(for: wanted)) (\(wanted.rawValue))", within: timeout) {
            guard let current = try status(message, client: client) else { return false }
            return wanted == .failed ? current == .failed : (current >= wanted && current != .failed)
        }
    }

    private func expect(_ what: String, within timeout: Duration, _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while try !condition() {
            guard ContinuousClock.now < deadline else { throw Failure(description: "\(what) did not happen within \(timeout)") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    private func pause(_ value: Double) async throws {
        try await Task.sleep(for: seconds(value * (plain ? min(pace, 0.25) : pace)))
    }

    private var elapsed: String {
        let duration = ContinuousClock.now - started
        let tenths = duration.components.seconds * 10 + duration.components.attoseconds / 100_000_000_000_000_000
        return String(format: "[%3d.%ds]", tenths / 10, tenths % 10)
    }

    // MARK: Showing

    /// Plain mode: one line per status change and received message.
    private func log(_ client: PigeonClient, name: String) async {
        for await event in client.events() {
            switch event {
            case .messageStatusChanged(let message):
                printLine("\(elapsed) \(name.padding(toLength: 6, withPad: " ", startingAt: 0)) \(Ticks.symbol(for: message.status)) \(message.status.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)) \"\(message.body)\"")
            case .messageReceived(let message):
                printLine("\(elapsed) \(name.padding(toLength: 6, withPad: " ", startingAt: 0)) received    \"\(message.body)\" from \(message.senderId)")
            case .connectionStateChanged(let state):
                printLine("\(elapsed) \(name.padding(toLength: 6, withPad: " ", startingAt: 0)) \(state.rawValue)")
            default:
                break
            }
        }
    }

    private func draw(_ terminal: Terminal) {
        let (rows, columns) = terminal.size
        let view = view.withLockedValue { $0 }
        func pane(_ client: PigeonClient, title: String, input: String) -> ChatScreenState {
            var state = ChatScreenState(userId: client.userId, title: title)
            state.messages = (try? client.messages(in: conversationId, limit: 50).messages) ?? []
            state.connection = client.connectionState
            state.input = LineEditor(input)
            state.help = "\(client.userId)'s phone"
            state.frame = Int((ContinuousClock.now - started).components.seconds * 8 + (ContinuousClock.now - started).components.attoseconds / 125_000_000_000_000_000)
            return state
        }
        let lines = DemoScreen.render(
            title: view.title, left: pane(alice, title: "bob", input: view.aliceInput), right: pane(bob, title: "alice", input: view.bobInput),
            narration: view.narration, width: columns, height: rows)
        terminal.draw(lines, cursorRow: nil, cursorColumn: 0)
    }
}
