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

/** An mcp-connect event (`EventBody`), as webhooks and `GET /v1/events` carry it. */
export interface ConnectEvent {
  /** `elicitation.completed`, `elicitation.declined`, `elicitation.failed`,
   * `connection.needs_reauth` or `connection.revoked`. */
  type: string;
  timestamp: string;
  data: EventData;
}

export interface EventData {
  client_id: string;
  subject: string;
  provider: string;
  elicitation_id?: string | null;
  connection_id?: string | null;
  /** Which account the connection is: on connection events and a completed elicitation's. */
  account?: Account | null;
  status?: string | null;
}

/** Which of the user's accounts at a provider (`AccountRef`): on a token, a connection and
 * connection events. Never a token. Name it as `account` in `Client#token` (its `id`, or its
 * label or nickname when no other account of the user's shares it). */
export interface Account {
  /** The provider's stable id of the account; empty where the provider names none. */
  id: string;
  /** A label people recognise (login, email, workspace name), when the provider gave one. */
  label: string | null;
  /** The user's own name for it, when they gave one. */
  nickname?: string | null;
}

/** The webhook is not one mcp-connect sent with this secret (or not a recent one). */
export class WebhookError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebhookError';
  }
}

export function parseEvent(v: unknown): ConnectEvent {
  const o = v as Record<string, unknown> | null;
  const d = o?.data as Record<string, unknown> | null | undefined;
  const ok = typeof o?.type === 'string' && typeof o.timestamp === 'string' && typeof d === 'object' && d !== null
    && typeof d.client_id === 'string' && typeof d.subject === 'string' && typeof d.provider === 'string';
  if (!ok) throw new WebhookError('the body is not an mcp-connect event');
  return v as ConnectEvent;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function decodeBase64(s: string): Buffer | undefined {
  if (s.length % 4 !== 0 || !BASE64.test(s)) return undefined;
  return Buffer.from(s, 'base64');
}

type Headers = Record<string, string | string[] | undefined> | { get(name: string): string | null };

/** Checks webhook signatures with one client's secret (`whsec_` + base64). */
export class Verifier {
  readonly #key: Buffer;

  constructor(secret: string) {
    const key = secret.startsWith('whsec_') ? decodeBase64(secret.slice('whsec_'.length).trim()) : undefined;
    if (!key || key.length === 0) throw new WebhookError('the webhook secret must be `whsec_` followed by base64');
    this.#key = key;
  }

  /** The key stays out of logs and inspection. */
  toJSON() { return 'Verifier([redacted])'; }

  /** Verifies a request as received: its headers (Node's `req.headers` or a fetch `Headers`) and
   * the raw body bytes, before any JSON parsing. Returns the event. */
  verify(headers: Headers, body: string | Uint8Array, now?: number): ConnectEvent {
    const get = (name: string): string => {
      let v: string | string[] | null | undefined;
      if (typeof (headers as { get?: unknown }).get === 'function') v = (headers as { get(n: string): string | null }).get(name);
      else {
        const entry = Object.entries(headers as Record<string, string | string[] | undefined>).find(([k]) => k.toLowerCase() === name);
        v = entry?.[1];
      }
      if (Array.isArray(v)) v = v.join(' ');
      if (v === null || v === undefined) throw new WebhookError(`the ${name} header is missing`);
      return v;
    };
    const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
    this.verifySignature(get('webhook-id'), get('webhook-timestamp'), get('webhook-signature'), bytes, now);
    let parsed: unknown;
    try { parsed = JSON.parse(bytes.toString('utf8')); } catch (e) { throw new WebhookError(`the body is not an mcp-connect event: ${(e as Error).message}`); }
    return parseEvent(parsed);
  }

  /** The signature and freshness check alone (for other HTTP stacks, and tests). `now` in Unix seconds. */
  verifySignature(id: string, timestamp: string, signatures: string, body: string | Uint8Array, now?: number): void {
    const t = timestamp.trim();
    if (!/^-?\d+$/.test(t)) throw new WebhookError('the webhook-timestamp header is not a Unix time in seconds');
    const ts = Number(t);
    const current = now ?? Math.floor(Date.now() / 1000);
    if (Math.abs(current - ts) > TOLERANCE_SECONDS) throw new WebhookError('the webhook is too old or too far in the future');
    const expected = this.sign(id, ts, body);
    for (const candidate of signatures.split(' ')) {
      if (!candidate.startsWith('v1,')) continue;
      const sig = decodeBase64(candidate.slice(3));
      if (sig && sig.length === expected.length && timingSafeEqual(sig, expected)) return;
    }
    throw new WebhookError('no signature matches: the body or headers were altered, or the secret is wrong');
  }

  /** The raw HMAC the service sends (base64 after `v1,`). */
  sign(id: string, timestamp: number, body: string | Uint8Array): Buffer {
    return createHmac('sha256', this.#key).update(`${id}.${timestamp}.`).update(typeof body === 'string' ? Buffer.from(body, 'utf8') : body).digest();
  }
}
