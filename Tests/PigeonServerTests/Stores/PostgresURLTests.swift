import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import Testing

@testable import PigeonServer

/// `--store postgres://…` and its query options (docs/PRODUCTION.md): each is read, and a bad or unknown one is a
/// clear error at start rather than a silent default.
@Suite struct PostgresURLTests {
    @Test func theOptionsAreRead() throws {
        let url = try PostgresURL("postgres://pigeon:secret@db.internal:6432/chat?sslmode=require&schema=Pigeon_1&event_partitions=8&max_connections=5")
        #expect(url.host == "db.internal" && url.port == 6432 && url.user == "pigeon" && url.password == "secret" && url.database == "chat")
        #expect(url.sslMode == .require && url.schema == "pigeon_1" && url.eventPartitions == 8 && url.maxConnections == 5)
        #expect(url.clientConfiguration(maxConnections: 20).options.maximumConnections == 5)
        let plain = try PostgresURL("postgres://postgres@127.0.0.1/postgres")
        #expect(plain.port == 5432 && plain.maxConnections == nil && plain.eventPartitions == 16)
        #expect(plain.clientConfiguration(maxConnections: 20).options.maximumConnections == 20)
    }

    @Test(arguments: [
        "postgres://u@h/d?max_connections=1", "postgres://u@h/d?max_connections=1001", "postgres://u@h/d?max_connections=many",
        "postgres://u@h/d?max_connections=", "postgres://u@h/d?pool=5", "postgres://u@h/d?event_partitions=0",
        "postgres://u@h/d?schema=1abc", "postgres://u@h/d?sslmode=always", "mysql://u@h/d", "postgres://h/d",
    ])
    func aBadOrUnknownOptionIsAClearError(_ text: String) {
        #expect {
            _ = try PostgresURL(text)
        } throws: { error in
            guard let error = error as? PigeonError else { return false }
            return error.code == .invalidRequest && !error.message.isEmpty
        }
    }
}
