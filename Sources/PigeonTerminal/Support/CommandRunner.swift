import ArgumentParser
import Foundation
import Logging

/// Runs a root command the way `pigeon` and `pigeon-demo` do: logs go to stderr at `PIGEON_LOG_LEVEL` (default
/// critical, so nothing disturbs the screen), usage errors and help are printed as the argument parser says them,
/// and any other error is one line on stderr ("`programName`: …") with the ``CLIError`` status (1 for the others).
/// Returns the exit status.
package func runCommand<Command: ParsableCommand>(_ command: Command.Type, programName: String, arguments: [String]) async -> Int32 {
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = ProcessInfo.processInfo.environment["PIGEON_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return handler
    }
    var parsed: any ParsableCommand
    do {
        parsed = try Command.parseAsRoot(arguments)
    } catch {
        let message = Command.fullMessage(for: error)
        let code = Command.exitCode(for: error).rawValue
        if !message.isEmpty {
            let stream = code == 0 ? FileHandle.standardOutput : FileHandle.standardError
            stream.write(Data((message + "\n").utf8))
        }
        return code
    }
    do {
        if var asyncCommand = parsed as? any AsyncParsableCommand {
            try await asyncCommand.run()
        } else {
            try parsed.run()
        }
        return 0
    } catch {
        // A help request comes out of `run()` (the `help` command, a command group run without a subcommand, and
        // `--help` after a subcommand): the argument parser's own answer, as its `main()` prints it.
        if !(error is CLIError), Command.exitCode(for: error) == .success {
            let message = Command.fullMessage(for: error)
            if !message.isEmpty { FileHandle.standardOutput.write(Data((message + "\n").utf8)) }
            return 0
        }
        let error = error as? CLIError ?? CLIError("\(error)")
        FileHandle.standardError.write(Data("\(programName): \(error.message)\n".utf8))
        return error.status.rawValue
    }
}
