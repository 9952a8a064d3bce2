import Foundation
import PigeonTestSupport
import Testing

/// `pigeon devices`, `pigeon revoke` and `pigeon logout` through the built binaries.
@Suite(.serialized) struct DeviceCommandTests {
    func devices(_ cli: PigeonCLI, _ profile: String) async throws -> [[String: Any]] {
        let result = try await cli.run(["devices", "--json"], profile: profile)
        guard result.status == 0, let devices = try result.json() as? [[String: Any]] else { throw TestFailure("devices: \(result)") }
        return devices
    }

    @Test func listRevokeAndLogout() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        #expect(try await cli.run(["login", "alice", "--device-name", "laptop"], profile: "laptop").status == 0)
        for name in ["phone", "tablet"] {
            let login = try await cli.run(["login", "alice", "--device-name", name, "--from-profile", "\(cli.home)/laptop"], profile: name)
            #expect(login.status == 0, "\(login)")
        }

        let listed = try await devices(cli, "phone")
        #expect(listed.compactMap { $0["deviceName"] as? String } == ["laptop", "phone", "tablet"])
        #expect(listed.map { $0["current"] as? Bool } == [false, true, false])
        let ids = listed.compactMap { $0["deviceId"] as? String }
        let table = try await cli.run(["devices"], profile: "phone")
        #expect(table.status == 0, "\(table)")
        let lines = table.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 4 && lines[0].contains("ID") && lines[0].contains("LAST SEEN"), "\(table)")
        #expect(lines[2].hasPrefix("* ") && lines[2].contains(ids[1]) && lines[2].contains("phone") && lines[2].contains("(this device)"), "\(table)")
        #expect(lines[1].hasPrefix("  ") && lines[1].contains(ids[0]) && lines[1].contains("laptop"), "\(table)")

        // The laptop revokes the phone: the phone's token is refused from then on.
        let revoked = try await cli.run(["revoke", ids[1]], profile: "laptop")
        #expect(revoked.status == 0 && revoked.stdout.contains("Revoked \(ids[1])"), "\(revoked)")
        let refused = try await cli.run(["devices"], profile: "phone")
        #expect(refused.status == 1 && refused.stderr.contains("does not accept this device's token"), "\(refused)")
        #expect(refused.stderr.contains("--profile <new directory> --from-profile <a profile of"), "\(refused)")
        let again = try await cli.run(["revoke", ids[1]], profile: "laptop")
        #expect(again.status == 1 && again.stderr.contains("has no device \(ids[1])"), "\(again)")
        #expect(try await devices(cli, "laptop").compactMap { $0["deviceId"] as? String } == [ids[0], ids[2]])

        // Logout keeping the data: the credentials go, the database stays; without: the database goes too.
        let kept = try await cli.run(["logout", "--keep-data"], profile: "tablet")
        #expect(kept.status == 0 && kept.stdout.contains("Signed out"), "\(kept)")
        #expect(!FileManager.default.fileExists(atPath: "\(cli.home)/tablet/device.json"))
        #expect(FileManager.default.fileExists(atPath: "\(cli.home)/tablet/pigeon.sqlite"))
        #expect(try await devices(cli, "laptop").compactMap { $0["deviceId"] as? String } == [ids[0]])
        let wiped = try await cli.run(["logout"], profile: "laptop")
        #expect(wiped.status == 0, "\(wiped)")
        #expect(!FileManager.default.fileExists(atPath: "\(cli.home)/laptop/pigeon.sqlite"))
        #expect(!FileManager.default.fileExists(atPath: "\(cli.home)/laptop/device.json"))
        let loggedOut = try await cli.run(["devices"], profile: "laptop")
        #expect(loggedOut.status == 1 && loggedOut.stderr.contains("not logged in"), "\(loggedOut)")
        try await server.stop()
    }

    /// `pigeon chat` on a device revoked from another one: the screen closes, one clear line says why, exit status 1.
    @Test func chatEndsWithAClearLineWhenItsDeviceIsRevoked() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        #expect(try await cli.run(["login", "alice", "--device-name", "laptop"], profile: "laptop").status == 0)
        #expect(try await cli.run(["login", "alice", "--device-name", "phone", "--from-profile", "\(cli.home)/laptop"], profile: "phone").status == 0)
        let conversation = try await cli.run(["new", "bob"], profile: "phone").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let phone = try await devices(cli, "phone").first { $0["current"] as? Bool == true }?["deviceId"] as? String

        let command = "env PIGEON_HOME=\(cli.home) \(PigeonCLI.binaryPath) --server \(server.url) --profile \(cli.home)/phone chat \(conversation); echo EXITED:$?; sleep 60"
        let tmux = try TmuxSession(command: command)
        defer { tmux.kill() }
        let screen = { (try? tmux.screen()) ?? "" }
        try await waitUntil("the chat is online", describe: screen) { screen().contains("● online") }
        let revoked = try await cli.run(["revoke", try #require(phone)], profile: "laptop")
        #expect(revoked.status == 0, "\(revoked)")
        try await waitUntil("pigeon chat exits saying the device was signed out", describe: screen) { screen().contains("EXITED:1") }
        #expect(screen().contains("pigeon: this device was signed out"), "\(screen())")
        // The same advice as every other command's (the screen wraps it: compared without line breaks).
        let unwrapped = screen().replacingOccurrences(of: "\n", with: "")
        #expect(unwrapped.contains("pigeon login alice --profile <new directory> --from-profile <a profile of alice still signed in>"), "\(screen())")
        // The advice, followed to the letter, signs alice in again on a new device.
        let anew = try await cli.run(["login", "alice", "--profile", "\(cli.home)/phone-2", "--from-profile", "\(cli.home)/laptop"])
        #expect(anew.status == 0, "\(anew)")
        try await server.stop()
    }
}
