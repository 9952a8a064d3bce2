/// One user the caller blocks (API.md 1.2, "Consent and blocking"), as `GET /v1/blocks` lists it.
public struct Block: Codable, Sendable, Equatable {
    /// The blocked user.
    public var userId: String
    /// When the block was made (milliseconds since the epoch); a repeated `PUT` keeps the first time.
    public var at: Int64

    public init(userId: String, at: Int64) {
        self.userId = userId
        self.at = at
    }
}

/// `GET /v1/blocks` answer: every user the caller blocks, oldest block first.
public struct BlockList: Codable, Sendable, Equatable {
    public var blocks: [Block]

    public init(blocks: [Block]) {
        self.blocks = blocks
    }
}

/// The bounds of blocking.
public enum BlockLimits {
    /// Most users one user blocks at once (a `PUT` past it is `400`).
    public static let perUser = 10_000
}
