import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Members: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List a conversation's members with their roles (read from the server; this device's copy without one).")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Flag(help: "JSON, for scripts.") var json = false
        @Flag(help: "Do not ask the server.") var local = false

        func run() async throws {
            let session = try DeviceSession(root.global)
            var found = try await session.conversation(conversation, fetch: !local)
            if !local, found.isMember {
                do {
                    found = try await session.client.fetchConversation(found.id)
                } catch let error as PigeonClientError where error.code == .notMember {
                    found = try session.client.conversation(id: found.id) ?? found
                } catch {
                    printWarning("showing this device's copy: \(CLIError.from(error, server: session.server).message)")
                }
            }
            try MemberList.print(found, me: session.device.userId, json: json)
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add users to a group (you must be its owner or an admin); everyone in it sees \"<you> added <user>\".")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The user ids to add.") var users: [String]
        @Flag(help: "Add them as admins (they may add, remove and rename too).") var admin = false
        @Flag(help: "Print the conversation as JSON.") var json = false

        func validate() throws {
            guard !users.isEmpty else { throw ValidationError("name at least one user to add") }
            for user in users where !Validation.isValidUserId(user) {
                throw ValidationError("\"\(user)\" is not a user id: 1–64 characters of A-Z a-z 0-9 . _ @ -")
            }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let found = try await session.conversation(conversation, fetch: true)
            let after = try await MemberList.call(session) {
                try await session.client.addMembers(users, to: found.id, role: admin ? .admin : .member)
            }
            if json { return try printJSON(ConversationJSON(after, me: session.device.userId)) }
            printLine("Added \(users.joined(separator: ", ")) to \(MessageFormat.title(of: after, me: session.device.userId)) (\(after.members.count) members)")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a user from a group (owner or admin); it keeps what it has but gets nothing more.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Argument(help: "The user id to remove.") var user: String
        @Flag(help: "Print the conversation as JSON.") var json = false

        func validate() throws {
            guard Validation.isValidUserId(user) else { throw ValidationError("\"\(user)\" is not a user id: 1–64 characters of A-Z a-z 0-9 . _ @ -") }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            guard user != session.device.userId else { throw CLIError("to remove yourself, use `pigeon leave <conversation>`") }
            let found = try await session.conversation(conversation, fetch: true)
            let after = try await MemberList.call(session) { try await session.client.removeMember(user, from: found.id) }
            if json { return try printJSON(ConversationJSON(after, me: session.device.userId)) }
            printLine("Removed \(user) from \(MessageFormat.title(of: after, me: session.device.userId)) (\(after.members.count) members)")
        }
    }

    struct Leave: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Leave a conversation (on every device of yours); its messages stay on this device, read-only.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters).") var conversation: String
        @Flag(help: "Print the conversation as JSON.") var json = false

        func run() async throws {
            let session = try DeviceSession(root.global)
            let found = try await session.conversation(conversation, fetch: true)
            let title = MessageFormat.title(of: found, me: session.device.userId)
            let after = try await MemberList.call(session) { try await session.client.leave(found.id) }
            if json { return try printJSON(ConversationJSON(after, me: session.device.userId)) }
            printLine("You left \(title) (\(found.id))")
        }
    }
}

/// What the member commands share.
enum MemberList {
    /// Runs a member call, turning its errors into one clear line.
    static func call(_ session: DeviceSession, _ body: () async throws -> PigeonConversation) async throws -> PigeonConversation {
        do {
            return try await body()
        } catch let error as PigeonClientError {
            switch error.code {
            case .forbidden: throw CLIError("not allowed: \(error.serverError?.message ?? error.message)")
            case .notMember: throw CLIError("you are no longer a member of this conversation")
            case .invalidArgument: throw CLIError(error.serverError?.message ?? error.message)
            default: throw CLIError.from(error, server: session.server)
            }
        }
    }

    static func print(_ conversation: PigeonConversation, me: String, json: Bool) throws {
        if json { return try printJSON(ConversationJSON(conversation, me: me)) }
        let title = MessageFormat.title(of: conversation, me: me)
        guard conversation.isMember else {
            printLine("\(title) (\(conversation.id)): you are no longer a member")
            return
        }
        printLine("\(title) (\(conversation.id)) · \(conversation.kind.rawValue) · \(conversation.members.count) member\(conversation.members.count == 1 ? "" : "s")")
        let width = conversation.members.map { TextWidth.of($0.userId) }.max() ?? 4
        let order: [MemberRole] = [.owner, .admin, .member]
        for member in conversation.members.sorted(by: { (order.firstIndex(of: $0.role)!, $0.userId) < (order.firstIndex(of: $1.role)!, $1.userId) }) {
            var line = "  " + TextWidth.padded(member.userId, to: width) + "  " + TextWidth.padded(member.role.rawValue, to: 6)
            if member.joinedSeq > 0 { line += "  joined at #\(member.joinedSeq)" }
            if member.userId == me { line += "  (you)" }
            printLine(line)
        }
    }
}
