// A PigeonKit app the tests kill with SIGKILL: it opens a client on the given database, starts it, sends
// `--count` messages as fast as it can, reports each local save on stdout, then keeps running until killed.
//
//   pigeonkit-test-helper --server URL --db PATH --user U --device D --token T --conversation C --count N [--prefix P]
import Foundation
import PigeonKit

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst()
while let key = arguments.popFirst() {
    guard key.hasPrefix("--"), let value = arguments.popFirst() else {
        FileHandle.standardError.write(Data("usage: pigeonkit-test-helper --server URL --db PATH --user U --device D --token T --conversation C --count N\n".utf8))
        exit(64)
    }
    options[String(key.dropFirst(2))] = value
}
guard let server = options["server"].flatMap(URL.init(string:)), let db = options["db"], let user = options["user"],
    let device = options["device"], let token = options["token"], let conversation = options["conversation"],
    let count = options["count"].flatMap(Int.init)
else {
    FileHandle.standardError.write(Data("missing option\n".utf8))
    exit(64)
}
let prefix = options["prefix"] ?? "message"

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

do {
    let client = try PigeonClient(
        configuration: .init(serverURL: server, databasePath: db, credentials: .init(userId: user, deviceId: device, token: token)))
    client.start()
    for index in 0..<count {
        try client.send("\(prefix) \(index)", to: conversation)
        say("saved \(index)")
    }
    say("all saved")
    while true { try await Task.sleep(for: .seconds(3600)) }
} catch {
    say("error: \(error)")
    exit(1)
}
