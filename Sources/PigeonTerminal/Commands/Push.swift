import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    /// `pigeon push register|unregister|status`: this device's push registration on the server, for trying pushes
    /// from a terminal (with a server started with `--push-gateway`).
    struct Push: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "This device's push registration: where the server's push gateway wakes it when it is not connected.",
            discussion: """
                The server pushes through a Matrix push gateway (Sygnal or a compatible one) only when it was started \
                with --push-gateway URL. `register` says where to wake this device, `status` shows the registration \
                and when a push was last accepted, `unregister` removes it.
                """,
            subcommands: [Register.self, Unregister.self, Status.self])

        struct Register: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Register (or replace) where the push gateway wakes this device.",
                discussion: "Example: pigeon push register --kind apns --app-id com.example.chat --pushkey <device token>")

            @ParentCommand var root: PigeonCommand
            @Option(help: ArgumentHelp("The kind of pushkey: apns, fcm, webpush or other.", valueName: "kind")) var kind: String
            @Option(help: ArgumentHelp("The app's id at the gateway (1-64 characters of A-Z a-z 0-9 . _ -).", valueName: "id")) var appId: String
            @Option(help: ArgumentHelp("The provider's token for this device (1-512 printable ASCII characters).", valueName: "token")) var pushkey: String
            @Option(help: ArgumentHelp("A JSON object passed to the gateway with every push (at most 2048 bytes).", valueName: "json")) var data: String?

            func validate() throws {
                guard PushKind(rawValue: kind) != nil else {
                    throw ValidationError("--kind must be one of \(PushKind.allCases.map(\.rawValue).joined(separator: ", ")), not \"\(kind)\"")
                }
                _ = try parsedData()
            }

            /// `--data` as a JSON object.
            func parsedData() throws -> [String: JSONValue]? {
                guard let data else { return nil }
                guard let object = try? JSONDecoder().decode([String: JSONValue].self, from: Data(data.utf8)) else {
                    throw ValidationError("--data must be a JSON object, like '{\"format\":\"event_id_only\"}'")
                }
                return object
            }

            func run() async throws {
                let session = try DeviceSession(root.global)
                do {
                    try await session.client.registerPush(kind: PushKind(rawValue: kind) ?? .other, appId: appId, pushkey: pushkey, data: try parsedData())
                } catch let error as PigeonClientError where error.code == .invalidArgument {
                    throw CLIError("not registered: \(error.message)")
                } catch {
                    throw CLIError.from(error, server: session.server)
                }
                printLine("Registered this device (\(session.device.deviceId)) for \(kind) pushes of \(appId).")
            }
        }

        struct Unregister: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Remove this device's push registration: no more pushes for it.")

            @ParentCommand var root: PigeonCommand

            func run() async throws {
                let session = try DeviceSession(root.global)
                do {
                    try await session.client.unregisterPush()
                } catch {
                    throw CLIError.from(error, server: session.server)
                }
                printLine("This device (\(session.device.deviceId)) has no push registration now.")
            }
        }

        struct Status: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Show this device's push registration: kind, app id, pushkey, data, when a push was last accepted, whether one is owed.")

            @ParentCommand var root: PigeonCommand
            @Flag(help: "JSON (the server's fields, or null when there is no registration), for scripts.") var json = false

            func run() async throws {
                let session = try DeviceSession(root.global)
                let info: PushRegistrationInfo?
                do {
                    info = try await session.client.pushRegistration()
                } catch {
                    throw CLIError.from(error, server: session.server)
                }
                if json {
                    if let info { return try printJSON(info) }
                    return printLine("null")
                }
                guard let info else {
                    return printLine("This device (\(session.device.deviceId)) has no push registration; `pigeon push register` adds one.")
                }
                var lines = [
                    ("kind", info.kind.rawValue),
                    ("app id", info.appId),
                    ("pushkey", TextWidth.sanitized(info.pushkey)),
                ]
                if let data = info.data {
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                    lines.append(("data", TextWidth.sanitized(String(decoding: try encoder.encode(data), as: UTF8.self))))
                }
                lines.append(("registered", Self.time(info.updatedAt)))
                lines.append(("last push", info.lastPushedAt.map(Self.time) ?? "never"))
                lines.append(("pending", info.pending ? "yes: a push is owed to this device now" : "no"))
                printLine("Push registration of \(session.device.userId)'s device \(session.device.deviceId):")
                for (name, value) in lines { printLine("  " + TextWidth.padded(name, to: 10) + " " + value) }
            }

            /// "2026-11-21 14:05:09" in the local time zone.
            static func time(_ milliseconds: Int64) -> String {
                let formatter = DateFormatter()
                formatter.locale = Locale(identifier: "en_US_POSIX")
                formatter.timeZone = .current
                formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
                return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
            }
        }
    }
}
