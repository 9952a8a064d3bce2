// PigeonJS: the error every call rejects with.

/** An error of a call: `code` is the server's error code (docs/API.md) or `network` / `timeout` / `stopped`. */
export class PigeonError extends Error {
    constructor(code, message, { status = 0, retryAfter = null } = {}) {
        super(message);
        this.name = "PigeonError";
        this.code = code;
        this.status = status;
        this.retryAfter = retryAfter;
    }
}
