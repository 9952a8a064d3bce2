// A PigeonKit app the tests kill with SIGKILL: it opens a client on the given database, starts it, sends
// `--count` messages as fast as it can, reports each local save on stdout, then keeps running until killed. With
// `--attach PATH` the first message carries that file, and each progress of its upload is reported
// ("upload <attachment> <sent>/<total>"). With `--go PATH` it says "online" once connected and sends only once that
// file exists.
//
//   pigeonkit-test-helper --server URL --db PATH --user U --device D --token T --conversation C --count N [--prefix P]
//                         [--attach PATH] [--go PATH]
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
    let events = client.events()
    let reporter = Task {
        for await event in events {
            if case .uploadProgress(_, let index, let sent, let total) = event { say("upload \(index) \(sent)/\(total)") }
        }
    }
    defer { reporter.cancel() }
    client.start()
    if let go = options["go"] {
        while client.connectionState != .online { try await Task.sleep(for: .milliseconds(10)) }
        say("online")
        while !FileManager.default.fileExists(atPath: go) { try await Task.sleep(for: .milliseconds(10)) }
    }
    let attachment = options["attach"].map { PigeonAttachmentSource.file(URL(fileURLWithPath: $0)) }
    for index in 0..<count {
        try client.send("\(prefix) \(index)", to: conversation, attachments: index == 0 ? attachment.map { [$0] } ?? [] : [])
        say("saved \(index)")
    }
    say("all saved")
    while true { try await Task.sleep(for: .seconds(3600)) }
} catch {
    say("error: \(error)")
    exit(1)
}
