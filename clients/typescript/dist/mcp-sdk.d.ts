import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { type Client, type ConnectEvent, type Token } from './index.js';
/** Waits at mcp-connect (of `waitSeconds` each) after the user accepted, before giving up. */
export declare const DEFAULT_MAX_ROUNDS = 3;
/** How long each round waits at mcp-connect for the user to finish the flow. */
export declare const DEFAULT_WAIT_SECONDS = 20;
/** The user did not connect. `why`: `decline`, `cancel` (in the MCP client), `declined` (on the
 * consent page) or `rounds` (did not finish within `maxRounds`). */
export declare class NotConnectedError extends Error {
    readonly why: string;
    readonly provider: string;
    constructor(message: string, why: string, provider: string);
}
export interface TokenOrElicitRequest {
    provider: string;
    /** The validated MCP user's `sub`, never a value from tool input. */
    subject?: string;
    /** The MCP access token that user presented (proof of subject). */
    subjectToken?: string;
    scopes?: string[];
    /** Which of the user's accounts at the provider (its id, label or nickname): a token for it,
     * or, when it is not connected, the request to add it. Without it: the user's default account;
     * a client that must name one gets `ConnectError` with `needsAccountSelection` and `accounts`. */
    account?: string;
}
export interface TokenOrElicitOptions {
    maxRounds?: number;
    waitSeconds?: number;
    /** Send `notifications/elicitation/complete` once connected (default true). */
    notifyCompletion?: boolean;
    /** `'auto'` (default): `elicitation/create` when the client declared URL elicitation, else the
     * `-32042` error. `'error'`: the `-32042` error for every client, so the tool call ends at once
     * and the client calls again when the user is done. */
    mode?: 'auto' | 'error';
    /** Where a `-32042` answer is remembered, so that its client hears
     * `notifications/elicitation/complete` when the flow ends (see `Completions`). */
    completions?: Completions;
}
/**
 * Sends `notifications/elicitation/complete` to the clients that were answered `-32042`, when
 * mcp-connect's event stream (`GET /v1/events`) says their flow ended (completed, declined or
 * failed); the client then calls the tool again. One per process, shared by every session:
 *
 *   const completions = new Completions(connect);
 *   void completions.listen();                     // runs until `signal` aborts
 *   await tokenOrElicit(mcp.server, connect, req, { mode: 'error', completions });
 *
 * What it remembers is forgotten when notified or when the elicitation expires.
 */
export declare class Completions {
    #private;
    constructor(connect: Client);
    /** Elicitations whose client still waits to hear that they ended. */
    get size(): number;
    /** Remembers that `server`'s client waits to hear when elicitation `id` ends, until
     * `expiresAt` (the elicitation's `expires_at`). A client that did not declare URL elicitation
     * cannot be told (the notification is part of it) and is not remembered. */
    track(server: Server, id: string, expiresAt?: string): void;
    /** Notifies the waiting client when `event` ends its elicitation; true when it did. A client
     * that has gone away is not an error: there is no one left to tell. */
    handle(event: ConnectEvent): Promise<boolean>;
    /** Reads the event stream until `signal` aborts. When the stream ends (mcp-connect shuts down)
     * or fails, it reconnects after `retryMs` (default 1000), resuming after the last event seen so
     * that nothing in between is missed; `onError` hears each failure. `lastEventId` starts from
     * an earlier point of the stream (0: its beginning) instead of from now. */
    listen(opts?: {
        signal?: AbortSignal;
        retryMs?: number;
        lastEventId?: number;
        onError?: (err: unknown) => void;
    }): Promise<void>;
}
/**
 * The user's token at the provider, asking them to connect first when needed (see above).
 * `server` is the low-level SDK server (`McpServer#server`). Throws `NotConnectedError`, the
 * SDK's `UrlElicitationRequiredError` (-32042) for clients without URL elicitation (or for every
 * client with `mode: 'error'`), or
 * `ConnectError` for anything else.
 */
export declare function tokenOrElicit(server: Server, connect: Client, req: TokenOrElicitRequest, opts?: TokenOrElicitOptions): Promise<Token>;
