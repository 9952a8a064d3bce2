import ArgumentParser
import Foundation
import PigeonKit
import PigeonProtocol

extension PigeonCommand {
    struct Devices: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List this user's devices: id, name, when it registered and was last seen (about to the minute); * marks this one.")

        @ParentCommand var root: PigeonCommand
        @Flag(help: "JSON (the server's fields), for scripts.") var json = false

        func run() async throws {
            let session = try DeviceSession(root.global)
            let devices: [DeviceInfo]
            do {
                devices = try await session.client.devices()
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            if json {
                try printJSON(devices)
                return
            }
            let colors = standardOutputIsColorTerminal
            let idWidth = max(2, devices.map { TextWidth.of($0.deviceId) }.max() ?? 2)
            let nameWidth = min(24, max(4, devices.map { TextWidth.of(Self.name($0)) }.max() ?? 4))
            let header = "  " + TextWidth.padded("ID", to: idWidth) + "  " + TextWidth.padded("NAME", to: nameWidth) + "  "
                + TextWidth.padded("CREATED", to: 16) + "  LAST SEEN"
            printLine(StyledLine(header, TextStyle(bold: true)).ansi(colors: colors))
            for device in devices {
                var line = StyledLine(device.current ? "* " : "  ", TextStyle(foreground: .green, bold: true))
                line.append(TextWidth.padded(device.deviceId, to: idWidth) + "  ", TextStyle(foreground: .gray))
                line.append(TextWidth.padded(TextWidth.truncated(Self.name(device), to: nameWidth), to: nameWidth) + "  ")
                line.append(Self.time(device.createdAt) + "  " + Self.time(device.lastSeenAt))
                if device.current { line.append("  (this device)", TextStyle(foreground: .green)) }
                printLine(line.ansi(colors: colors))
            }
        }

        static func name(_ device: DeviceInfo) -> String {
            device.deviceName.map { TextWidth.sanitized($0) } ?? "-"
        }

        /// "2026-11-21 14:05" in the local time zone.
        static func time(_ milliseconds: Int64) -> String {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = .current
            formatter.dateFormat = "yyyy-MM-dd HH:mm"
            return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign one of this user's devices out: its token stops working at once and its open connections close.",
            discussion: "`pigeon devices` lists the ids. Revoking this device is `pigeon logout --keep-data`.")

        @ParentCommand var root: PigeonCommand
        @Argument(help: "The id of the device to revoke.") var deviceId: String

        func run() async throws {
            let session = try DeviceSession(root.global)
            do {
                try await session.client.revokeDevice(deviceId)
            } catch let error as PigeonClientError where error.serverError?.code == .notFound {
                throw CLIError("\(session.device.userId) has no device \(deviceId) (`pigeon devices` lists them)")
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            printLine(deviceId == session.device.deviceId ? "Revoked this device; it is signed out." : "Revoked \(deviceId).")
        }
    }

    struct Logout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign this device out: revoke it on the server and delete its profile (credentials and messages).",
            discussion: "With --keep-data the local database stays (readable with `pigeon ls --local`), the credentials go anyway.")

        @ParentCommand var root: PigeonCommand
        @Flag(help: "Keep this device's local database.") var keepData = false

        func run() async throws {
            let session = try DeviceSession(root.global)
            do {
                try await session.client.logout(wipeLocalData: !keepData)
            } catch {
                throw CLIError.from(error, server: session.server)
            }
            try session.profile.forgetDevice()
            printLine("Signed out \(session.device.userId)'s device \(session.device.deviceId)\(keepData ? "; its messages stay in \(session.profile.databasePath)" : "").")
        }
    }
}
