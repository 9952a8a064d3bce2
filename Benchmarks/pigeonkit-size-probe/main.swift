import Foundation
import PigeonKit

// The smallest app that uses PigeonKit: it opens a client, sends one message, syncs and stops. pigeonkit-bench only
// measures its stripped size (against empty-probe's); run by hand it works:
// pigeonkit-size-probe <server URL> <database path> <userId> <deviceId> <token> <conversationId>
let arguments = CommandLine.arguments
guard arguments.count == 7, let server = URL(string: arguments[1]) else {
    FileHandle.standardError.write(Data("usage: pigeonkit-size-probe <server URL> <database path> <userId> <deviceId> <token> <conversationId>\n".utf8))
    exit(64)
}
do {
    let credentials = PigeonClient.Credentials(userId: arguments[3], deviceId: arguments[4], token: arguments[5])
    let client = try PigeonClient(configuration: PigeonClient.Configuration(serverURL: server, databasePath: arguments[2], credentials: credentials))
    client.start()
    let sent = try client.send("hello from the size probe", to: arguments[6])
    _ = try await client.sync()
    print("sent \(sent.clientMessageId); \(try client.messages(in: arguments[6]).messages.count) messages here")
    await client.stop()
} catch {
    FileHandle.standardError.write(Data("pigeonkit-size-probe: \(error)\n".utf8))
    exit(1)
}
