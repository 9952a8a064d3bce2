import ArgumentParser
import Foundation
import PigeonKit

extension PigeonCommand {
    struct Chat: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Chat full-screen: live ticks, an offline banner, /offline and /online to watch ⏰ turn into ✓ and ✓✓.",
            discussion: """
                Keys: Enter sends; ↑/↓ select a message; Ctrl-R retries the selected (or the newest) failed message; \
                PgUp/PgDn scroll back through history, End jumps to the newest; Ctrl-F searches (Esc closes); \
                Ctrl-C or Ctrl-D quits. Commands: /offline, /online, /retry, /search <words>, /read, /quit; \
                an invitation shows above the messages: /accept joins it, /decline says no; \
                //text sends a text that starts with "/".
                """)

        @ParentCommand var root: PigeonCommand
        @Argument(help: "A conversation id (or its first characters); default: the most recent one.") var conversation: String?

        func run() async throws {
            let session = try DeviceSession(root.global)
            let terminal = try Terminal()
            let found: PigeonConversation
            if let conversation {
                do {
                    found = try await session.conversation(conversation, fetch: true)
                } catch let error as CLIError {
                    // An invitation opens too: /accept or /decline answers it there.
                    guard let invitation = try? await session.invitation(conversation, fetch: false) else { throw error }
                    found = invitation
                }
            } else if let newest = try session.client.conversations().first {
                found = newest
            } else {
                try? await session.client.catchUp()
                guard let newest = try session.client.conversations().first ?? session.client.invitations().first else {
                    throw CLIError("no conversations yet; start one with `pigeon new <userId>`")
                }
                found = newest
            }
            let chat = ChatSession(client: session.client, conversation: found, terminal: terminal)
            await chat.run()
            if let error = await chat.signedOut {
                throw CLIError(
                    "this device was signed out: the server no longer accepts its token (\(error.message)); unsent messages stay on this device; "
                        + CLIError.signInAgain(userId: session.device.userId))
            }
        }
    }
}
