// Verifying mcp-connect's webhooks (Standard Webhooks), exactly as the service signs them
// (src/signals/events.rs, `sign`): `webhook-signature: v1,<base64 HMAC-SHA256 of
// "{webhook-id}.{webhook-timestamp}.{body}">` under the decoded bytes of the client's `whsec_`
// secret. The header may carry several space-separated signatures (key rotation); any `v1`
// match is enough. Timestamps more than five minutes away from now are refused (replays).
//
//   const verifier = new Verifier(process.env.WEBHOOK_SECRET);
//   const event = verifier.verify(req.headers, rawBody);   // throws WebhookError
import { createHmac, timingSafeEqual } from 'node:crypto';
/** How far a webhook's timestamp may be from now (seconds), either way. */
export const TOLERANCE_SECONDS = 5 * 60;
/** The webhook is not one mcp-connect sent with this secret (or not a recent one). */
export class WebhookError extends Error {
    constructor(message) {
        super(message);
        this.name = 'WebhookError';
    }
}
export function parseEvent(v) {
    const o = v;
    const d = o?.data;
    const ok = typeof o?.type === 'string' && typeof o.timestamp === 'string' && typeof d === 'object' && d !== null
        && typeof d.client_id === 'string' && typeof d.subject === 'string' && typeof d.provider === 'string';
    if (!ok)
        throw new WebhookError('the body is not an mcp-connect event');
    return v;
}
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
function decodeBase64(s) {
    if (s.length % 4 !== 0 || !BASE64.test(s))
        return undefined;
    return Buffer.from(s, 'base64');
}
/** Checks webhook signatures with one client's secret (`whsec_` + base64). */
export class Verifier {
    #key;
    constructor(secret) {
        const key = secret.startsWith('whsec_') ? decodeBase64(secret.slice('whsec_'.length).trim()) : undefined;
        if (!key || key.length === 0)
            throw new WebhookError('the webhook secret must be `whsec_` followed by base64');
        this.#key = key;
    }
    /** The key stays out of logs and inspection. */
    toJSON() { return 'Verifier([redacted])'; }
    /** Verifies a request as received: its headers (Node's `req.headers` or a fetch `Headers`) and
     * the raw body bytes, before any JSON parsing. Returns the event. */
    verify(headers, body, now) {
        const get = (name) => {
            let v;
            if (typeof headers.get === 'function')
                v = headers.get(name);
            else {
                const entry = Object.entries(headers).find(([k]) => k.toLowerCase() === name);
                v = entry?.[1];
            }
            if (Array.isArray(v))
                v = v.join(' ');
            if (v === null || v === undefined)
                throw new WebhookError(`the ${name} header is missing`);
            return v;
        };
        const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
        this.verifySignature(get('webhook-id'), get('webhook-timestamp'), get('webhook-signature'), bytes, now);
        let parsed;
        try {
            parsed = JSON.parse(bytes.toString('utf8'));
        }
        catch (e) {
            throw new WebhookError(`the body is not an mcp-connect event: ${e.message}`);
        }
        return parseEvent(parsed);
    }
    /** The signature and freshness check alone (for other HTTP stacks, and tests). `now` in Unix seconds. */
    verifySignature(id, timestamp, signatures, body, now) {
        const t = timestamp.trim();
        if (!/^-?\d+$/.test(t))
            throw new WebhookError('the webhook-timestamp header is not a Unix time in seconds');
        const ts = Number(t);
        const current = now ?? Math.floor(Date.now() / 1000);
        if (Math.abs(current - ts) > TOLERANCE_SECONDS)
            throw new WebhookError('the webhook is too old or too far in the future');
        const expected = this.sign(id, ts, body);
        for (const candidate of signatures.split(' ')) {
            if (!candidate.startsWith('v1,'))
                continue;
            const sig = decodeBase64(candidate.slice(3));
            if (sig && sig.length === expected.length && timingSafeEqual(sig, expected))
                return;
        }
        throw new WebhookError('no signature matches: the body or headers were altered, or the secret is wrong');
    }
    /** The raw HMAC the service sends (base64 after `v1,`). */
    sign(id, timestamp, body) {
        return createHmac('sha256', this.#key).update(`${id}.${timestamp}.`).update(typeof body === 'string' ? Buffer.from(body, 'utf8') : body).digest();
    }
}
