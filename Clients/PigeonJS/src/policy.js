// PigeonJS: the outbox's retry policy and the SDK's timings, PigeonKit's `RetryPolicy` and configuration defaults.

// MARK: - Retry policy

/** The outbox's timing, PigeonKit's `RetryPolicy`: 10 s for an answer, 3 tries, backoff 1 s … 60 s with equal jitter. */
export const RETRY = Object.freeze({ ackTimeoutMs: 10_000, tries: 3, backoffBaseMs: 1_000, backoffMaxMs: 60_000 });
/** Stream reconnection: 0.5 s doubling up to 30 s, with equal jitter; a successful open starts again from 0.5 s. */
export const RECONNECT = Object.freeze({ baseMs: 500, maxMs: 30_000 });
/** `start()` resolves at the latest this long after it was called, whatever the connection is doing. */
export const START_SETTLES_MS = 10_000;
/** Delivered receipts wait this long to be coalesced (one per conversation). */
export const RECEIPT_BATCH_MS = 50;
/** History pages the SDK fetches (gap recovery, catch-up). */
export const HISTORY_PAGE = 200;

/**
 * What a failed try of an outbox item calls for, by PigeonKit's rules: `{ wait }` without spending a try (the server
 * unreachable: not the item's fault, checked again every second; a `401`: the token is the problem, it waits for a
 * working one), `{ retry, tries }` after a backoff (a transient error with tries left), or `{ fail }`.
 */
export function afterFailedTry(error, triesBefore) {
    if (error.code === "network") return { wait: 1_000 };
    if (error.status === 401) return { wait: 30_000 };
    const transient = ["timeout", "rate_limited", "overloaded", "internal"].includes(error.code) || error.status >= 500;
    const tries = (triesBefore ?? 0) + 1;
    if (!transient || tries >= RETRY.tries) return { fail: { code: error.code, message: error.message } };
    return { retry: Math.max(backoff(tries, RETRY.backoffBaseMs, RETRY.backoffMaxMs), (error.retryAfter ?? 0) * 1_000), tries };
}

/** Equal jitter: half the exponential delay for sure, the other half at random. */
export function backoff(attempt, baseMs, maxMs) {
    const full = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
    return full / 2 + Math.random() * (full / 2);
}

/** The most bytes of UTF-8 a message's text may have (the server's default limit). */
export const MAX_BODY_BYTES = 65_536;
