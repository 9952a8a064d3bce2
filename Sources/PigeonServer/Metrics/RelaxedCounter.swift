import NIOConcurrencyHelpers

#if canImport(Synchronization)
import Synchronization
#endif

/// A count that only grows, added to on hot paths and read now and then (``StatisticsSampler``): one relaxed
/// atomic add where the standard library has `Atomic` (Linux; macOS 15 and iOS 18 on), a lock before.
final class RelaxedCounter: Sendable {
    private let storage: any CountStorage

    init() {
        #if canImport(Synchronization)
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) {
            storage = AtomicCount()
            return
        }
        #endif
        storage = LockedCount()
    }

    func add(_ amount: Int = 1) { storage.add(amount) }

    var value: Int { storage.value }
}

private protocol CountStorage: Sendable {
    func add(_ amount: Int)
    var value: Int { get }
}

#if canImport(Synchronization)
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
private final class AtomicCount: CountStorage {
    private let count = Atomic<Int>(0)

    func add(_ amount: Int) { count.wrappingAdd(amount, ordering: .relaxed) }

    var value: Int { count.load(ordering: .relaxed) }
}
#endif

private final class LockedCount: CountStorage {
    private let count = NIOLockedValueBox(0)

    func add(_ amount: Int) { count.withLockedValue { $0 &+= amount } }

    var value: Int { count.withLockedValue { $0 } }
}
