import Foundation
import PigeonBenchSupport

/// The PostgreSQL and Redis the production backends run on. Each backend's run gets a namespace of its own: a fresh
/// name used as the PostgreSQL schema (`?schema=`) and as the Redis key prefix (`?prefix=`), removed afterwards, so
/// that runs neither see each other's data nor leave theirs behind.
struct ProductionServices: Sendable {
    /// `postgres://…` without a schema.
    let postgresURL: String
    /// `redis://…` without a prefix.
    let redisURL: String

    /// The URLs given as options, or else `PIGEON_POSTGRES_URL` and `PIGEON_REDIS_URL` (what `scripts/services.sh
    /// start` prints); a missing one is an error.
    init(postgresURL: String?, redisURL: String?, environment: [String: String]) throws {
        let hint = "(`eval \"$(scripts/services.sh start)\"` starts both on loopback and sets them; scripts/bench.sh does so)"
        guard let postgresURL = postgresURL ?? environment["PIGEON_POSTGRES_URL"], !postgresURL.isEmpty else {
            throw BenchError.missingSetting("the production backends need PostgreSQL: pass --postgres-url or set PIGEON_POSTGRES_URL \(hint)")
        }
        guard let redisURL = redisURL ?? environment["PIGEON_REDIS_URL"], !redisURL.isEmpty else {
            throw BenchError.missingSetting("the production backends need Redis: pass --redis-url or set PIGEON_REDIS_URL \(hint)")
        }
        guard postgresURL.hasPrefix("postgres://") || postgresURL.hasPrefix("postgresql://"), !postgresURL.contains("schema=") else {
            throw BenchError.missingSetting("the PostgreSQL URL must be a postgres:// URL without a schema (each run makes its own): \(postgresURL)")
        }
        guard redisURL.hasPrefix("redis://"), !redisURL.contains("prefix=") else {
            throw BenchError.missingSetting("the Redis URL must be a redis:// URL without a prefix (each run makes its own): \(redisURL)")
        }
        self.postgresURL = postgresURL
        self.redisURL = redisURL
    }

    /// A fresh namespace: `bench_` and 10 random lower-case letters and digits (all of one length, so that no
    /// namespace's key prefix is the start of another's).
    static func makeNamespace() -> String {
        let characters = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return "bench_" + String((0..<10).map { _ in characters.randomElement()! })
    }

    /// The pigeon-server options of a node in `namespace`.
    func serverArguments(namespace: String) -> [String] {
        [
            "--store", Self.adding("schema", namespace, to: postgresURL), "--buffer", Self.adding("prefix", namespace, to: redisURL),
            // A production store never opens registration by default: the benchmark registers its own devices.
            "--open-registration",
        ]
    }

    /// The TCP port of the PostgreSQL URL (5432 when it names none).
    var postgresPort: Int { URLComponents(string: postgresURL)?.port ?? 5432 }

    /// PostgreSQL's postmaster and redis-server, for their CPU figures, when they run on this machine and can be
    /// found through `psql` and `redis-cli`; what cannot be found is left out, with a printed note.
    func observedProcesses() async -> [ObservedService] {
        var services: [ObservedService] = []
        do {
            // The checkpointer lives as long as the server; its parent is the postmaster.
            let output = try await ExternalCommand.output(
                of: "psql",
                ["-X", "-A", "-t", "-d", postgresURL, "-c", "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"]
            )
            if let checkpointer = pid_t(output.trimmingCharacters(in: .whitespacesAndNewlines)),
                let postmaster = ProcessStats.parentPID(of: checkpointer), ProcessStats.commandName(of: postmaster) == "postgres"
            {
                services.append(ObservedService(name: "postgres", pid: postmaster))
            } else {
                print("note: PostgreSQL's processes are not on this machine; no PostgreSQL CPU figures")
            }
        } catch {
            print("note: no PostgreSQL CPU figures: \(error)")
        }
        do {
            let output = try await ExternalCommand.output(of: "redis-cli", ["-u", redisURL, "INFO", "server"])
            let line = output.split(whereSeparator: \.isNewline).first { $0.hasPrefix("process_id:") }
            if let line, let pid = pid_t(line.dropFirst("process_id:".count).trimmingCharacters(in: .whitespaces)),
                ProcessStats.commandName(of: pid)?.hasPrefix("redis-server") == true
            {
                services.append(ObservedService(name: "redis", pid: pid))
            } else {
                print("note: redis-server is not on this machine; no Redis CPU figures")
            }
        } catch {
            print("note: no Redis CPU figures: \(error)")
        }
        return services
    }

    /// Drops the schema `namespace` (`DROP SCHEMA … CASCADE`) and deletes the Redis keys that start with it. Returns
    /// what could not be removed, in words; empty when everything was.
    func removeNamespace(_ namespace: String) async -> [String] {
        var failures: [String] = []
        do {
            _ = try await ExternalCommand.output(
                of: "psql",
                [
                    "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", postgresURL, "-c", "SET client_min_messages TO warning",
                    "-c", "DROP SCHEMA IF EXISTS \(namespace) CASCADE",
                ],
                timeout: .seconds(120)
            )
        } catch {
            failures.append("PostgreSQL schema \(namespace) (psql \(postgresURL) -c 'DROP SCHEMA \(namespace) CASCADE'): \(error)")
        }
        do {
            let keys = try await ExternalCommand.output(of: "redis-cli", ["-u", redisURL, "--scan", "--pattern", "\(namespace)*"])
                .split(separator: "\n").map(String.init)
            for start in stride(from: 0, to: keys.count, by: 500) {
                _ = try await ExternalCommand.output(of: "redis-cli", ["-u", redisURL, "DEL"] + keys[start..<min(start + 500, keys.count)])
            }
        } catch {
            failures.append("Redis keys \(namespace)* (redis-cli -u \(redisURL) --scan --pattern '\(namespace)*' | xargs redis-cli -u \(redisURL) del): \(error)")
        }
        return failures
    }

    private static func adding(_ name: String, _ value: String, to url: String) -> String {
        url + (url.contains("?") ? "&" : "?") + name + "=" + value
    }
}
