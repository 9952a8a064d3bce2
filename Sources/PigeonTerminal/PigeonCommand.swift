import ArgumentParser
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `pigeon`: the terminal chat client, on PigeonKit only.
public struct PigeonCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "pigeon",
        abstract: "Chat from the terminal with WhatsApp-style ticks: ⏰ saved, ✓ on the server, ✓✓ delivered, blue ✓✓ read, ⚠️ failed.",
        discussion: """
            Every command works on a profile: one user's device (credentials and local database), by default \
            ~/.pigeon/<userId>/, the one `login` made last. Exit status: 0 done, 1 an error, 64 a usage error, \
            75 not finished in time (what was asked is saved; the next run carries on).
            """,
        subcommands: [
            Login.self, New.self, List.self, Send.self, Download.self, Sync.self, Read.self, Chat.self, Members.self, Add.self, Remove.self, Leave.self,
            Edit.self, Delete.self, React.self, Reply.self, ThreadCommand.self, Invites.self, Accept.self, Decline.self, Block.self, Unblock.self,
            Blocks.self, Devices.self, Revoke.self, Logout.self, Push.self, Export.self, Demo.self,
        ])

    @OptionGroup public var global: GlobalOptions

    public init() {}

    /// Parses `arguments`, runs the command and returns the exit status; errors are printed as one line on stderr.
    public static func main(arguments: [String]) async -> Int32 {
        await runCommand(Self.self, programName: "pigeon", arguments: arguments)
    }
}

/// Options every command takes (before or after the command's name).
public struct GlobalOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The Pigeon server (default: $PIGEON_SERVER, else the one the profile logged in to, else http://127.0.0.1:8080).", valueName: "url"))
    public var server: String?

    @Option(help: ArgumentHelp("The profile directory (default: $PIGEON_PROFILE, else ~/.pigeon/<the user of the last login>).", valueName: "dir"))
    public var profile: String?

    @Option(name: [.short, .customLong("user")], help: ArgumentHelp("Use the profile ~/.pigeon/<user>.", valueName: "user"))
    public var user: String?

    public init() {}

    /// The server to talk to, for a profile that stored `stored` at login.
    func serverURL(stored: String? = nil) throws -> URL {
        let text = server ?? ProcessInfo.processInfo.environment["PIGEON_SERVER"].flatMap { $0.isEmpty ? nil : $0 } ?? stored ?? "http://127.0.0.1:8080"
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw CLIError("\"\(text)\" is not a server URL (expected http://host:port)")
        }
        return url
    }

    /// The selected profile, which must have logged in.
    func loggedInProfile() throws -> (Profile, Profile.Device) {
        guard let profile = Profile.selected(profile: profile, user: user) else {
            throw CLIError("not logged in: run `pigeon login <userId>` first (or pass --profile DIR)")
        }
        guard let device = try profile.device() else {
            throw CLIError("not logged in: the profile \(profile.directory.path) has no device; run `pigeon login <userId> --profile \(profile.directory.path)`")
        }
        return (profile, device)
    }
}

/// Whether stdout is a terminal (colours and ticks styled) and NO_COLOR is not set.
var standardOutputIsColorTerminal: Bool {
    isatty(STDOUT_FILENO) == 1 && ProcessInfo.processInfo.environment["NO_COLOR"].map(\.isEmpty) ?? true
}

package func printLine(_ text: String = "") {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

func printWarning(_ text: String) {
    FileHandle.standardError.write(Data("pigeon: \(text)\n".utf8))
}
