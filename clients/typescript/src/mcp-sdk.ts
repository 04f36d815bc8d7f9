// The official MCP TypeScript SDK (`@modelcontextprotocol/sdk` 1.x, protocol 2025-11-25): one
// call that turns "not connected" into the right answer for that protocol.
//
//   import { tokenOrElicit } from 'mcp-connect-client/mcp-sdk';
//   mcp.registerTool('whoami', { description: '...' }, async () => {
//     const token = await tokenOrElicit(mcp.server, connect, { provider: 'github', subject, subjectToken });
//     return callGitHub(token.access_token);
//   });
//
// When the client declared URL elicitation (`capabilities.elicitation.url`), it is asked with
// `elicitation/create`; `accept` only means the user agreed to open the URL, so the helper then
// waits at mcp-connect for the flow to finish, `waitSeconds` at a time, at most `maxRounds` times
// (default DEFAULT_MAX_ROUNDS = 3 of 20 s: about a minute), sends
// `notifications/elicitation/complete` when it completes, and returns the token. A tool with no
// cap holds the call for minutes after the user walked away or refused.
//
// A client without URL elicitation gets the `-32042` error (UrlElicitationRequiredError) carrying
// the URL; it retries the tool call when the user is done (one round per call). `mode: 'error'`
// answers every client that way (the tool call ends at once instead of holding the user's
// request open); with `completions` (a `Completions` listening to mcp-connect's event stream) the
// client that got it hears `notifications/elicitation/complete` when the flow ends.
//
// `NotConnectedError` (decline, cancel, declined on the consent page, rounds used up) carries a
// sentence for the user: left uncaught, the SDK ends the call with `isError` and that message.

import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { UrlElicitationRequiredError, type ElicitRequestURLParams } from '@modelcontextprotocol/sdk/types.js';

import { ConnectError, MCP_2025_11_25, type Client, type ConnectEvent, type Token } from './index.js';

/** Waits at mcp-connect (of `waitSeconds` each) after the user accepted, before giving up. */
export const DEFAULT_MAX_ROUNDS = 3;
/** How long each round waits at mcp-connect for the user to finish the flow. */
export const DEFAULT_WAIT_SECONDS = 20;

/** The user did not connect. `why`: `decline`, `cancel` (in the MCP client), `declined` (on the
 * consent page) or `rounds` (did not finish within `maxRounds`). */
export class NotConnectedError extends Error {
  readonly why: string;
  readonly provider: string;

  constructor(message: string, why: string, provider: string) {
    super(message);
    this.name = 'NotConnectedError';
    this.why = why;
    this.provider = provider;
  }
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

/** mcp-connect events that end an elicitation's flow, one way or the other. */
const ENDED = new Set(['elicitation.completed', 'elicitation.declined', 'elicitation.failed']);
/** How long a `-32042` answer is remembered when its elicitation carries no expiry. */
const REMEMBER_MS = 15 * 60_000;

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
export class Completions {
  readonly #connect: Client;
  readonly #waiting = new Map<string, { notify: () => Promise<void>; until: number }>();

  constructor(connect: Client) {
    this.#connect = connect;
  }

  /** Elicitations whose client still waits to hear that they ended. */
  get size(): number {
    return this.#waiting.size;
  }

  /** Remembers that `server`'s client waits to hear when elicitation `id` ends, until
   * `expiresAt` (the elicitation's `expires_at`). A client that did not declare URL elicitation
   * cannot be told (the notification is part of it) and is not remembered. */
  track(server: Server, id: string, expiresAt?: string): void {
    const now = Date.now();
    for (const [key, w] of this.#waiting) if (w.until <= now) this.#waiting.delete(key);
    if (!server.getClientCapabilities()?.elicitation?.url) return;
    const until = expiresAt === undefined ? Number.NaN : Date.parse(expiresAt);
    this.#waiting.set(id, { notify: server.createElicitationCompletionNotifier(id), until: Number.isFinite(until) ? until : now + REMEMBER_MS });
  }

  /** Notifies the waiting client when `event` ends its elicitation; true when it did. A client
   * that has gone away is not an error: there is no one left to tell. */
  async handle(event: ConnectEvent): Promise<boolean> {
    const id = event.data.elicitation_id;
    const waiting = ENDED.has(event.type) && id ? this.#waiting.get(id) : undefined;
    if (!id || !waiting) return false;
    this.#waiting.delete(id);
    try {
      await waiting.notify();
      return true;
    } catch {
      return false;
    }
  }

  /** Reads the event stream until `signal` aborts. When the stream ends (mcp-connect shuts down)
   * or fails, it reconnects after `retryMs` (default 1000), resuming after the last event seen so
   * that nothing in between is missed; `onError` hears each failure. `lastEventId` starts from
   * an earlier point of the stream (0: its beginning) instead of from now. */
  async listen(opts: { signal?: AbortSignal; retryMs?: number; lastEventId?: number; onError?: (err: unknown) => void } = {}): Promise<void> {
    let last = opts.lastEventId;
    while (!opts.signal?.aborted) {
      try {
        for await (const m of this.#connect.events({ lastEventId: last, signal: opts.signal })) {
          last = m.id;
          await this.handle(m.event);
        }
      } catch (err) {
        opts.onError?.(err);
      }
      if (opts.signal?.aborted) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, opts.retryMs ?? 1000);
        function done() {
          clearTimeout(timer);
          opts.signal?.removeEventListener('abort', done);
          resolve();
        }
        opts.signal?.addEventListener('abort', done, { once: true });
      });
    }
  }
}

/**
 * The user's token at the provider, asking them to connect first when needed (see above).
 * `server` is the low-level SDK server (`McpServer#server`). Throws `NotConnectedError`, the
 * SDK's `UrlElicitationRequiredError` (-32042) for clients without URL elicitation (or for every
 * client with `mode: 'error'`), or
 * `ConnectError` for anything else.
 */
export async function tokenOrElicit(server: Server, connect: Client, req: TokenOrElicitRequest, opts: TokenOrElicitOptions = {}): Promise<Token> {
  const maxRounds = opts.maxRounds ?? DEFAULT_MAX_ROUNDS;
  const waitSeconds = opts.waitSeconds ?? DEFAULT_WAIT_SECONDS;
  const who = { provider: req.provider, subject: req.subject, subjectToken: req.subjectToken, scopes: req.scopes, account: req.account };
  let el;
  try {
    return await connect.token({ ...who, elicit: true });
  } catch (e) {
    if (!(e instanceof ConnectError && e.needsAuthorization && e.elicitation)) throw e;
    el = e.elicitation;
  }
  const era = el.mcp[MCP_2025_11_25];
  if (opts.mode === 'error' || !server.getClientCapabilities()?.elicitation?.url) {
    opts.completions?.track(server, el.id, el.expires_at);
    throw new UrlElicitationRequiredError(era.error.data.elicitations as ElicitRequestURLParams[], era.error.message);
  }
  const { action } = await server.elicitInput(era.params as ElicitRequestURLParams);
  if (action !== 'accept') throw new NotConnectedError(`Not connected to ${req.provider}: you chose to ${action}.`, action, req.provider);
  for (let round = 0; round < maxRounds; round += 1) {
    try {
      const token = await connect.token({ ...who, elicitationId: el.id, waitSeconds });
      if (opts.notifyCompletion ?? true) await server.createElicitationCompletionNotifier(el.id)();
      return token;
    } catch (e) {
      if (!(e instanceof ConnectError)) throw e;
      if (e.isDeclined) throw new NotConnectedError(`Not connected to ${req.provider}: you declined.`, 'declined', req.provider);
      // Still pending: the same elicitation again, or, as these waits do not set `elicit`,
      // not_connected (nothing connected yet) or insufficient_scope (a scope upgrade).
      if (!(e.needsAuthorization || e.code === 'not_connected' || e.isInsufficientScope)) throw e;
    }
  }
  throw new NotConnectedError(`Still not connected to ${req.provider}. Open the link whenever you are ready, then ask again.`, 'rounds', req.provider);
}
