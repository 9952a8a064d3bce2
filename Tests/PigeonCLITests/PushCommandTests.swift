import Foundation
import PigeonTestSupport
import Testing

/// `pigeon push register|status|unregister` through the built binaries, against a `pigeon-server` started with
/// `--push-gateway` pointing at a real Matrix push gateway on loopback.
@Suite(.serialized) struct PushCommandTests {
    func status(_ cli: PigeonCLI, _ profile: String) async throws -> [String: Any]? {
        let result = try await cli.run(["push", "status", "--json"], profile: profile)
        guard result.status == 0 else { throw TestFailure("push status: \(result)") }
        if result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "null" { return nil }
        guard let object = try result.json() as? [String: Any] else { throw TestFailure("push status: \(result)") }
        return object
    }

    /// The server names the push gateway it uses when it starts (its user and password left out), or says push is off.
    @Test func theServerLogsItsPushGatewayAtStart() async throws {
        for (arguments, expected) in [
            (["--push-gateway", "http://ops:secret@127.0.0.1:9/"], "push notifications through a Matrix push gateway"),
            ([], "push notifications off (no --push-gateway)"),
        ] {
            let server = try PigeonServerProcess(extraArguments: arguments + ["--log-level", "info"])
            try await server.start()
            let logs = try FileManager.default.contentsOfDirectory(atPath: server.dataDirectory).filter { $0.hasPrefix("server-") }
            let log = { logs.map { (try? String(contentsOfFile: "\(server.dataDirectory)/\($0)", encoding: .utf8)) ?? "" }.joined() }
            try await waitUntil("the start-up log names the push setting", describe: log) { log().contains(expected) }
            if !arguments.isEmpty {
                #expect(log().contains("gateway=http://127.0.0.1:9/_matrix/push/v1/notify") && !log().contains("secret"), "\(log())")
            }
            try await server.stop()
        }
    }

    @Test func registerStatusAndUnregister() async throws {
        let gateway = try await MatrixPushGateway.start()
        let server = try PigeonServerProcess(extraArguments: ["--push-gateway", gateway.url])
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        #expect(try await cli.run(["login", "alice"], profile: "alice").status == 0)
        #expect(try await cli.run(["login", "bob"], profile: "bob").status == 0)

        let none = try await cli.run(["push", "status"], profile: "bob")
        #expect(none.status == 0 && none.stdout.contains("has no push registration"), "\(none)")
        #expect(try await status(cli, "bob") == nil)

        let registered = try await cli.run(
            ["push", "register", "--kind", "apns", "--app-id", "com.example.chat", "--pushkey", "bob-apns-token", "--data", #"{"format":"event_id_only"}"#],
            profile: "bob")
        #expect(registered.status == 0 && registered.stdout.contains("Registered this device"), "\(registered)")

        // Bad input: a usage error (64) or the SDK's refusal (1), each one clear line, and nothing changes.
        let badKind = try await cli.run(["push", "register", "--kind", "pigeon", "--app-id", "a", "--pushkey", "b"], profile: "bob")
        #expect(badKind.status == 64 && badKind.stderr.contains("--kind must be one of apns, fcm, webpush, other"), "\(badKind)")
        let badData = try await cli.run(["push", "register", "--kind", "fcm", "--app-id", "a", "--pushkey", "b", "--data", "[1]"], profile: "bob")
        #expect(badData.status == 64 && badData.stderr.contains("--data must be a JSON object"), "\(badData)")
        let badAppId = try await cli.run(["push", "register", "--kind", "fcm", "--app-id", "not an id", "--pushkey", "b"], profile: "bob")
        #expect(badAppId.status == 1 && badAppId.stderr == "pigeon: not registered: appId must be 1-64 characters of [A-Za-z0-9._-]\n", "\(badAppId)")
        let badPushkey = try await cli.run(["push", "register", "--kind", "fcm", "--app-id", "a", "--pushkey", "has space"], profile: "bob")
        #expect(badPushkey.status == 1 && badPushkey.stderr.contains("pushkey must be"), "\(badPushkey)")

        let info = try #require(try await status(cli, "bob"))
        #expect(info["kind"] as? String == "apns" && info["appId"] as? String == "com.example.chat" && info["pushkey"] as? String == "bob-apns-token")
        #expect((info["data"] as? [String: Any])?["format"] as? String == "event_id_only")
        #expect(info["lastPushedAt"] is NSNull && info["pending"] as? Bool == false, "never pushed: null, as the server answers: \(info)")
        let table = try await cli.run(["push", "status"], profile: "bob")
        #expect(table.status == 0, "\(table)")
        for expected in ["kind       apns", "app id     com.example.chat", "pushkey    bob-apns-token", #"data       {"format":"event_id_only"}"#,
            "last push  never", "pending    no"]
        {
            #expect(table.stdout.contains(expected), "\(expected) in\n\(table.stdout)")
        }

        // Bob is not connected (no command of his is running): alice's message is pushed to his token.
        let conversation = try await cli.run(["new", "bob"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cli.run(["send", conversation, "wake up", "--wait", "20"], profile: "alice").status == 0)
        try await waitUntil("the gateway accepted bob's push") { gateway.accepted.contains { $0.devices.map(\.pushkey) == ["bob-apns-token"] } }
        try await waitUntil("bob's status shows the push") { try await status(cli, "bob")?["lastPushedAt"] is NSNumber }
        let after = try await cli.run(["push", "status"], profile: "bob")
        #expect(!after.stdout.contains("last push  never"), "\(after)")
        #expect(gateway.accepted.first?.roomId == conversation && gateway.accepted.first?.sender == "alice")

        let removed = try await cli.run(["push", "unregister"], profile: "bob")
        #expect(removed.status == 0 && removed.stdout.contains("has no push registration now"), "\(removed)")
        #expect(try await status(cli, "bob") == nil)
        #expect(try await cli.run(["push", "unregister"], profile: "bob").status == 0, "unregistering twice is no error")
        for arguments in [["push", "--help"], ["push"]] {
            let help = try await cli.run(arguments)
            #expect(help.status == 0 && help.stdout.contains("register") && help.stdout.contains("unregister") && help.stdout.contains("status"), "\(help)")
        }
        try await server.stop()
        await gateway.stop()
    }
}
