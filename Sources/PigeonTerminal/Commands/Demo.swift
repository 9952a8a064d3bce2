import ArgumentParser

extension PigeonCommand {
    /// `pigeon demo` as README once said: the demo runs a server in its own process, and `pigeon` links PigeonKit
    /// only, so the demo is a program of its own; this says which.
    struct Demo: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The demo is a program of its own: swift run pigeon-demo.", shouldDisplay: false)

        @Argument(parsing: .allUnrecognized) var ignored: [String] = []

        func run() throws {
            throw CLIError("the demo runs a server in its own process, so it is a program of its own: swift run pigeon-demo (`pigeon-demo --help`)")
        }
    }
}
