import GRDB
import PigeonDomain

/// The embedded files' encryption at rest as SQL functions, registered on every connection: `at_rest_seal(text)`
/// wraps a value as it is written and `at_rest_open(text)` unwraps it as it is read (``AtRestCipher``), so each
/// statement that writes or reads a sealed column says so in its SQL, and static helpers need no cipher at hand.
/// NULL stays NULL. A value that does not open fails its statement: it is never answered as text.
package enum AtRestFunctions {
    package static func register(_ cipher: AtRestCipher, on db: Database) {
        db.add(
            function: DatabaseFunction("at_rest_seal", argumentCount: 1, pure: false) { values in
                guard let text = String.fromDatabaseValue(values[0]) else { return nil }
                return cipher.seal(text)
            })
        db.add(
            function: DatabaseFunction("at_rest_open", argumentCount: 1, pure: true) { values in
                guard let text = String.fromDatabaseValue(values[0]) else { return nil }
                return try cipher.open(text)
            })
    }
}

extension AtRestFunctions {
    /// Refuses a store its keys cannot open (``AtRestCipher/verify(checks:)``), then records the check value of the
    /// ring's newest key, which is what new values are sealed with from now on. The check values live in `meta` as
    /// `at_rest_key:<id>`; `rekey` removes those of keys no value is sealed with any more.
    package static func verifyAndRecord(_ cipher: AtRestCipher, _ db: Database) throws {
        var checks: [String: String] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT key, value FROM meta WHERE key LIKE 'at_rest_key:%'") {
            let key: String = row[0]
            checks[String(key.dropFirst(checkPrefix.count))] = row[1]
        }
        try cipher.verify(checks: checks)
        if let check = cipher.checkValue(), checks[check.keyId] == nil {
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES (?, ?)", arguments: [checkPrefix + check.keyId, check.value])
        }
    }

    package static let checkPrefix = "at_rest_key:"
}
