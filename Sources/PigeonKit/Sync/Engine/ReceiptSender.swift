import PigeonProtocol

/// Sends the delivered and read receipts this device owes, batched, and only on a live stream.
struct ReceiptSender: EnginePart {
    let shared: EngineShared

    /// Sends the delivered and read watermarks this device owes, batched: every wake within the debounce
    /// interval becomes one receipt per conversation and kind. Confirmed by the server's echo (`receipt` events
    /// for this user), so a receipt lost with a connection is sent again on the next one.
    func run() async {
        while !Task.isCancelled {
            await receiptWake.wait()
            try? await clock.sleep(for: settings.receiptDelay)
            guard let connection = onlineConnection else { continue }
            do {
                for receipt in try await store.pendingReceipts() {
                    let key = "\(receipt.kind.rawValue)/\(receipt.conversationId)"
                    let alreadySent = slot.withLockedValue { $0.receiptsSent[key] ?? 0 }
                    guard receipt.upToSeq > alreadySent else { continue }
                    try await connection.sendReceipt(ReceiptRequest(kind: receipt.kind, upToSeq: receipt.upToSeq), to: receipt.conversationId)
                    slot.withLockedValue { slot in
                        slot.receiptsSent[key] = receipt.upToSeq
                        slot.receiptsSentCount += 1
                    }
                }
            } catch {
                logger.debug("sending receipts failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Queues a read receipt now (``PigeonClient/markRead(conversationId:upToSeq:)``).
    func receiptsChanged() { receiptWake.notify() }}
