/** How far a webhook's timestamp may be from now (seconds), either way. */
export declare const TOLERANCE_SECONDS: number;
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
export declare class WebhookError extends Error {
    constructor(message: string);
}
export declare function parseEvent(v: unknown): ConnectEvent;
type Headers = Record<string, string | string[] | undefined> | {
    get(name: string): string | null;
};
/** Checks webhook signatures with one client's secret (`whsec_` + base64). */
export declare class Verifier {
    #private;
    constructor(secret: string);
    /** The key stays out of logs and inspection. */
    toJSON(): string;
    /** Verifies a request as received: its headers (Node's `req.headers` or a fetch `Headers`) and
     * the raw body bytes, before any JSON parsing. Returns the event. */
    verify(headers: Headers, body: string | Uint8Array, now?: number): ConnectEvent;
    /** The signature and freshness check alone (for other HTTP stacks, and tests). `now` in Unix seconds. */
    verifySignature(id: string, timestamp: string, signatures: string, body: string | Uint8Array, now?: number): void;
    /** The raw HMAC the service sends (base64 after `v1,`). */
    sign(id: string, timestamp: number, body: string | Uint8Array): Buffer;
}
export {};
