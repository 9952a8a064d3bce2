/// Which partition of the event log (and of the Redis buffer) a conversation belongs to: FNV-1a of its id's UTF-8
/// bytes modulo the partition count, the same on every node and every run.
///
/// The PostgreSQL store and the Redis Streams buffer use the same function, so with the same partition count a
/// processing batch read from one buffer partition writes into one event partition.
public enum EventPartitioning {
    public static func partition(ofConversation conversationId: String, partitions: Int) -> Int {
        var hash: UInt32 = 2_166_136_261
        for byte in conversationId.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 16_777_619
        }
        return Int(hash % UInt32(max(1, partitions)))
    }
}
