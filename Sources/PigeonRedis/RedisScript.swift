/// A Lua script, run with `EVALSHA` by its SHA-1 (computed locally), falling back to `EVAL` when Redis does not
/// know it yet (first use, or Redis restarted): see ``RedisClient/evalScript(_:keys:arguments:routingKey:)``.
public struct RedisScript: Sendable, Hashable {
    /// The Lua source.
    public let source: String
    /// The SHA-1 of the source in lowercase hex: the name Redis caches the script under.
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        self.sha1 = SHA1.hexDigest(source.utf8)
    }

    /// `EVALSHA sha1 numkeys key... arg...`.
    func evalSHACommand(keys: [String], arguments: [any RESPArgument]) -> RESPCommand {
        command("EVALSHA", sha1, keys: keys, arguments: arguments)
    }

    /// `EVAL source numkeys key... arg...`.
    func evalCommand(keys: [String], arguments: [any RESPArgument]) -> RESPCommand {
        command("EVAL", source, keys: keys, arguments: arguments)
    }

    private func command(_ name: String, _ script: String, keys: [String], arguments: [any RESPArgument]) -> RESPCommand {
        var command = RESPCommand(name, script, keys.count)
        command.append(contentsOf: keys)
        for argument in arguments { command.append(argument) }
        return command
    }
}

extension RedisScript {
    /// One run of a script, for ``RedisClient/evalScripts(_:routingKey:)``.
    public struct Call: Sendable {
        public var script: RedisScript
        public var keys: [String]
        public var arguments: [any RESPArgument]

        public init(_ script: RedisScript, keys: [String] = [], arguments: [any RESPArgument] = []) {
            self.script = script
            self.keys = keys
            self.arguments = arguments
        }
    }
}
