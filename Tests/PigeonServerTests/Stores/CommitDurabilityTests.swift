import Foundation
import PigeonDomain
import PigeonSQLite
import PigeonTestSupport
import Testing

/// An accept, a receipt or any answer of the embedded mode is given after its commit; the commit is on disk only if the
/// writer syncs at commit (`synchronous = FULL`). GRDB sets `NORMAL` on the writer when it turns WAL on, after the
/// configuration's own statements: the server ran every commit without a sync until this was checked.
@Suite struct CommitDurabilityTests {
    @Test(arguments: [true, false])
    func theWritersSyncSettingIsTheOneAskedFor(_ durable: Bool) throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteMessageStore(path: directory + "/store.sqlite", durable: durable, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
        // 2 = FULL (a sync at every commit), 1 = NORMAL (`--no-fsync`: survives a crash of the process only).
        #expect(try SQLiteDatabase.writerSynchronousSetting(of: store.pool) == (durable ? 2 : 1))
        let buffer = try SQLiteDatabase.open(path: directory + "/buffer.sqlite", durable: durable, readers: 2)
        #expect(try SQLiteDatabase.writerSynchronousSetting(of: buffer) == (durable ? 2 : 1))
    }
}
