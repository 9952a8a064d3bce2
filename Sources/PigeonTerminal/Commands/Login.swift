import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Login: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Register this machine as a device of <userId> (open registration) and keep its token in the profile.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "Your user id (1–64 characters of A-Z a-z 0-9 . _ @ -).") var userId: String
        @Option(help: "A name for this device (default: the host name).") var deviceName: String?
        @Option(
            name: .customLong("from-profile"),
            help: "A profile already logged in as <userId>: proves to the server that this new device is yours (needed for every device after a user's first).")
        var fromProfile: String?
        @Flag(help: "Print the device as JSON.") var json = false

        func validate() throws {
            guard Validation.isValidUserId(userId) else {
                throw ValidationError("\"\(userId)\" is not a user id: 1–64 characters of A-Z a-z 0-9 . _ @ -")
            }
        }

        func run() async throws {
            let options = root.global
            let profile = Profile.selected(profile: options.profile, user: options.user ?? (options.profile == nil ? userId : nil))
                ?? Profile(directory: Profile.root.appendingPathComponent(userId))
            if let existing = try profile.device() {
                throw CLIError(
                    "the profile \(profile.directory.path) is already logged in as \(existing.userId) (device \(existing.deviceId)); use another --profile for another device")
            }
            let serverURL = try options.serverURL()
            let name = deviceName ?? "pigeon on \(ProcessInfo.processInfo.hostName)"
            var existing: PigeonClient.Credentials?
            if let fromProfile {
                guard let device = try Profile(directory: URL(fileURLWithPath: fromProfile)).device() else {
                    throw CLIError("the profile \(fromProfile) is not logged in")
                }
                guard device.userId == userId else {
                    throw CLIError("the profile \(fromProfile) is logged in as \(device.userId), not \(userId)")
                }
                existing = PigeonClient.Credentials(userId: device.userId, deviceId: device.deviceId, token: device.token)
            }
            let credentials: PigeonClient.Credentials
            do {
                credentials = try await PigeonClient.registerDevice(
                    serverURL: serverURL, userId: userId, deviceName: name, existingDevice: existing, timeout: .seconds(15))
            } catch let error as PigeonClientError where error.code == .server && error.httpStatus == 401 {
                throw CLIError(
                    "the server at \(serverURL.absoluteString) did not register a device of \(userId) (\(error.message))"
                        + (existing == nil ? "; a further device of a user logs in with --from-profile <a profile of that user>" : ""))
            } catch {
                throw CLIError.from(error, server: serverURL.absoluteString)
            }
            let device = Profile.Device(
                serverURL: serverURL.absoluteString, userId: credentials.userId, deviceId: credentials.deviceId, token: credentials.token,
                deviceName: name)
            try profile.save(device)
            if options.profile == nil { try profile.makeCurrent() }
            if json {
                struct Output: Encodable { var userId, deviceId, serverURL, profile: String }
                try printJSON(Output(userId: device.userId, deviceId: device.deviceId, serverURL: device.serverURL, profile: profile.directory.path))
            } else {
                printLine("Logged in as \(device.userId) (device \(device.deviceId)) on \(device.serverURL)")
                printLine("Profile: \(profile.directory.path)")
            }
        }
    }

    struct New: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a conversation with <member>... (and you) and print its id.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "The other members' user ids.") var members: [String]
        @Option(help: "A name for the conversation.") var name: String?
        @Flag(help: "Print the conversation as JSON.") var json = false

        func validate() throws {
            guard !members.isEmpty else { throw ValidationError("name at least one other member") }
            for member in members where !Validation.isValidUserId(member) {
                throw ValidationError("\"\(member)\" is not a user id: 1–64 characters of A-Z a-z 0-9 . _ @ -")
            }
        }

        func run() async throws {
            let session = try DeviceSession(root.global)
            let conversation: PigeonConversation
            do {
                conversation = try await session.client.createConversation(members: members, name: name)
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            if json {
                try printJSON(ConversationJSON(conversation, me: session.device.userId))
            } else {
                printLine(conversation.id)
            }
        }
    }
}
