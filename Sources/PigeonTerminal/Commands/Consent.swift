import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Block: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Block a user: nothing it sends reaches you any more, and it can no longer add you to conversations.",
            discussion: "The user is not told. `pigeon unblock` undoes it (what it sent meanwhile stays hidden).")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "The user id to block.") var user: String

        func validate() throws { try validateUser(user) }

        func run() async throws {
            let session = try DeviceSession(root.global)
            try await ConsentCall.call(session) { try await session.client.block(user) }
            printLine("Blocked \(user): nothing \(user) sends reaches you, and \(user) cannot add you to conversations.")
        }
    }

    struct Unblock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Unblock a user: what it sends from now on reaches you again.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "The user id to unblock.") var user: String

        func validate() throws { try validateUser(user) }

        func run() async throws {
            let session = try DeviceSession(root.global)
            try await ConsentCall.call(session) { try await session.client.unblock(user) }
            printLine("Unblocked \(user).")
        }
    }

    struct Blocks: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the users you blocked, with when (read from the server; this device's copy without one).")

        @ParentCommand var root: PigeonCommand
        @Flag(help: "JSON: [{userId, blockedAt}].") var json = false
        @Flag(help: "Do not ask the server.") var local = false

        func run() async throws {
            let session = try DeviceSession(root.global)
            var users = try session.client.blockedUsers()
            if !local {
                do {
                    users = try await session.client.fetchBlockedUsers()
                } catch {
                    printWarning("showing this device's copy: \(CLIError.from(error, server: session.server).message)")
                }
            }
            if json { return try printJSON(users) }
            guard !users.isEmpty else {
                printLine("You blocked nobody.")
                return
            }
            let width = users.map { TextWidth.of($0.userId) }.max() ?? 4
            for user in users {
                printLine("  " + TextWidth.padded(user.userId, to: width) + "  blocked " + Devices.time(user.blockedAt))
            }
        }
    }

    struct Invites: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List your invitations: who invited you to which conversation (accept or decline each).",
            discussion: "Refreshes from the server first; without a server it says so on stderr and shows this device's copy.")

        @ParentCommand var root: PigeonCommand
        @Flag(help: "JSON, for scripts.") var json = false
        @Flag(help: "Do not refresh from the server.") var local = false
        @Option(help: "Seconds the refresh may take.") var wait: Double = 5

        func validate() throws { try validateWait(wait) }

        func run() async throws {
            let session = try DeviceSession(root.global)
            if !local {
                do {
                    _ = try await session.online { try await session.sync(timeout: seconds(wait)) }
                } catch {
                    printWarning("showing this device's copy: \(CLIError.from(error, server: session.server).message)")
                }
            }
            let me = session.device.userId
            let invitations = try session.client.invitations()
            if json { return try printJSON(invitations.map { ConversationJSON($0, me: me) }) }
            guard !invitations.isEmpty else {
                printLine("No invitations.")
                return
            }
            let colors = standardOutputIsColorTerminal
            for invitation in invitations {
                var line = StyledLine(invitation.id + "  ", TextStyle(foreground: .gray))
                line.append(MessageFormat.invitation(invitation, me: me), TextStyle(bold: true))
                let count = invitation.members.count
                line.append("  (\(count) member\(count == 1 ? "" : "s"))", TextStyle(foreground: .gray))
                printLine(line.ansi(colors: colors))
            }
            printLine("`pigeon accept <id>` joins one, `pigeon decline <id>` says no.")
        }
    }

    struct Accept: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Accept an invitation: you join the conversation and its history comes to this device.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "The invitation's conversation id (or its first characters).") var conversation: String
        @Flag(help: "Print the conversation as JSON.") var json = false

        func run() async throws {
            let session = try DeviceSession(root.global)
            let found = try await session.invitation(conversation, fetch: true)
            let joined = try await ConsentCall.call(session) { try await session.client.acceptInvitation(found.id) }
            let me = session.device.userId
            if json { return try printJSON(ConversationJSON(joined, me: me)) }
            printLine("Joined \(MessageFormat.title(of: joined, me: me)) (\(joined.id)); `pigeon chat \(joined.id.prefix(8))` opens it.")
        }
    }

    struct Decline: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decline an invitation: you leave the conversation (its members see that you left) and it goes from this device.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "The invitation's conversation id (or its first characters).") var conversation: String

        func run() async throws {
            let session = try DeviceSession(root.global)
            let found = try await session.invitation(conversation, fetch: true)
            try await ConsentCall.call(session) { try await session.client.declineInvitation(found.id) }
            printLine("Declined \(MessageFormat.invitation(found, me: session.device.userId)).")
        }
    }
}

private func validateUser(_ user: String) throws {
    guard Validation.isValidUserId(user) else { throw ValidationError("\"\(user)\" is not a user id: 1–64 characters of A-Z a-z 0-9 . _ @ -") }
}

/// What the consent commands share.
enum ConsentCall {
    /// Runs a consent call, turning its errors into one clear line.
    @discardableResult
    static func call<T: Sendable>(_ session: DeviceSession, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PigeonClientError {
            switch error.code {
            case .forbidden: throw CLIError("not allowed: \(error.serverError?.message ?? error.message)")
            case .notMember: throw CLIError("this invitation is gone (withdrawn, or declined on another device)")
            case .invalidArgument: throw CLIError(error.serverError?.message ?? error.message)
            default: throw CLIError.from(error, server: session.server)
            }
        }
    }
}
