import ArgumentParser
import Foundation
import PigeonTerminal

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `pigeon-demo`: two people chatting through a network that fails, with a server in this process. The terminal client (`pigeon`) links PigeonKit
/// only; this program also links the server and the fault proxy.
public struct DemoCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pigeon-demo",
        abstract: "Play a chat through a failing network in under 30 seconds: a server in this process, alice and bob side by side.",
        discussion: """
            Online send ⏰ → ✓ → ✓✓ → blue ✓✓, an offline recipient, an offline sender, a black-holed network \
            (⚠️ and retry), and a server restart that loses nothing. Each step is checked; exit status 1 says \
            which did not happen. Needs no server and no login; leaves nothing behind.
            """)

    @Flag(help: "Print a log of every tick instead of the full-screen view (the default when stdout is not a terminal).")
    var plain = false
    @Option(help: "Pauses between steps are multiplied by this (0.5 is twice as fast).") var pace: Double = 1

    public init() {}

    /// Parses `arguments`, plays the story and returns the exit status; errors are printed as one line on stderr.
    public static func main(arguments: [String]) async -> Int32 {
        await runCommand(Self.self, programName: "pigeon-demo", arguments: arguments)
    }

    public func validate() throws {
        guard pace > 0, pace <= 10 else { throw ValidationError("--pace must be more than 0 and at most 10") }
    }

    public func run() async throws {
        let plain = plain || isatty(STDOUT_FILENO) != 1 || isatty(STDIN_FILENO) != 1
        let started = ContinuousClock.now
        let story: DemoStory
        do {
            story = try await DemoStory.make(plain: plain, pace: pace)
        } catch {
            throw CLIError("the demo could not start: \(error)")
        }
        do {
            try await story.run()
        } catch {
            throw CLIError("the demo failed: \(error)")
        }
        let duration = ContinuousClock.now - started
        printLine("Demo finished in \(duration.components.seconds).\(duration.components.attoseconds / 100_000_000_000_000_000) s: every tick arrived, nothing lost, nothing twice.")
    }
}
