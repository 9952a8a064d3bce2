// PigeonJS: reaction keys (the server's rule, the same cases as PigeonKit's: Clients/vectors/reaction-keys.json) and the
// aggregate a device shows with its pending changes.

// MARK: - Reactions

/** An app's reaction token; otherwise a key is one emoji. Either is at most 64 bytes of UTF-8 (the server's rule). */
export const APP_TOKEN = /^[a-z0-9_:+-]{1,32}$/;
export const EMOJI = /\p{Extended_Pictographic}|\p{Regional_Indicator}|\u20E3/u;

/**
 * Whether the server can take `key`: an app token, or a single grapheme with an emoji in it. What this lets through the
 * server may still refuse (it checks the emoji exactly); a refused reaction is dropped then (see `react`).
 */
export function isReactionKey(key) {
    if (typeof key !== "string" || key === "" || new TextEncoder().encode(key).length > 64) return false;
    if (APP_TOKEN.test(key)) return true;
    if (!EMOJI.test(key)) return false;
    if (typeof Intl.Segmenter !== "function") return true;
    return [...new Intl.Segmenter(undefined, { granularity: "grapheme" }).segment(key)].length === 1;
}

export const INVISIBLE = /[\u200B-\u200F\u202A-\u202E\u2028\u2029\u2060-\u2064\u2066-\u2069\u061C\uFEFF\u180E\u0000-\u001F\u007F-\u009F]/u;
export const TAG = /[\u{E0020}-\u{E007F}]/u;

/**
 * The one form the server stores a reaction key in, or null when it takes no such key (the server's rule): an app token
 * as it is; an emoji without variation selectors but one U+FE0F after each emoji not drawn as one by default (unless a
 * skin tone follows), so ❤, ❤️ and ❤ with extra selectors are one key, ❤️. Invisible characters are refused, but for
 * the joiner between two emoji and the tags of a subdivision flag.
 */
export function canonicalReactionKey(key) {
    if (typeof key !== "string" || key === "") return null;
    if (APP_TOKEN.test(key)) return key;
    const scalars = [...key].filter((c) => c !== "\uFE0F" && c !== "\uFE0E");
    if (scalars.length === 0) return null;
    const isEmoji = (c) => c !== undefined && /\p{Emoji}/u.test(c);
    const isModifier = (c) => c !== undefined && /\p{Emoji_Modifier}/u.test(c);
    let out = "";
    for (let i = 0; i < scalars.length; i++) {
        const c = scalars[i];
        const next = scalars[i + 1];
        if (c === "\u200D") {
            if (!(isEmoji(scalars[i - 1]) || isModifier(scalars[i - 1])) || !isEmoji(next)) return null;
        } else if (TAG.test(c)) {
            if (scalars[0] !== "\u{1F3F4}" || scalars[scalars.length - 1] !== "\u{E007F}") return null;
        } else if (INVISIBLE.test(c)) {
            return null;
        }
        out += c;
        const ascii = c.codePointAt(0) < 0x80;
        if (ascii && next !== "\u20E3") return null;
        const presentable = isEmoji(c) && !/\p{Emoji_Presentation}/u.test(c) && !isModifier(c) && !TAG.test(c);
        if (presentable && !isModifier(next)) out += "\uFE0F";
    }
    return isReactionKey(out) ? out : null;
}

/**
 * The aggregate a device shows: the server's (`{key, count, me}`, keys in order of first use) with this user's changes
 * that the server has not confirmed applied in order. Adding a key the user holds, or removing one it does not, changes
 * nothing, so a change the server's aggregate already has is counted once.
 */
export function withPendingReactions(reactions, pending) {
    const result = (reactions ?? []).map((reaction) => ({ ...reaction }));
    for (const { key, add } of pending ?? []) {
        const index = result.findIndex((reaction) => reaction.key === key);
        const entry = index >= 0 ? result[index] : null;
        if (add) {
            if (entry?.me) continue;
            if (entry) Object.assign(entry, { count: entry.count + 1, me: true });
            else result.push({ key, count: 1, me: true });
        } else if (entry?.me) {
            if (entry.count <= 1) result.splice(index, 1);
            else Object.assign(entry, { count: entry.count - 1, me: false });
        }
    }
    return result;
}
