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
// the URL; it retries the tool call when the user is done (one round per call).
//
// `NotConnectedError` (decline, cancel, declined on the consent page, rounds used up) carries a
// sentence for the user: left uncaught, the SDK ends the call with `isError` and that message.

import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { UrlElicitationRequiredError, type ElicitRequestURLParams } from '@modelcontextprotocol/sdk/types.js';

import { ConnectError, MCP_2025_11_25, type Client, type Token } from './index.js';

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
}

export interface TokenOrElicitOptions {
  maxRounds?: number;
  waitSeconds?: number;
  /** Send `notifications/elicitation/complete` once connected (default true). */
  notifyCompletion?: boolean;
}

/**
 * The user's token at the provider, asking them to connect first when needed (see above).
 * `server` is the low-level SDK server (`McpServer#server`). Throws `NotConnectedError`, the
 * SDK's `UrlElicitationRequiredError` (-32042) for clients without URL elicitation, or
 * `ConnectError` for anything else.
 */
export async function tokenOrElicit(server: Server, connect: Client, req: TokenOrElicitRequest, opts: TokenOrElicitOptions = {}): Promise<Token> {
  const maxRounds = opts.maxRounds ?? DEFAULT_MAX_ROUNDS;
  const waitSeconds = opts.waitSeconds ?? DEFAULT_WAIT_SECONDS;
  const who = { provider: req.provider, subject: req.subject, subjectToken: req.subjectToken, scopes: req.scopes };
  let el;
  try {
    return await connect.token({ ...who, elicit: true });
  } catch (e) {
    if (!(e instanceof ConnectError && e.needsAuthorization && e.elicitation)) throw e;
    el = e.elicitation;
  }
  const era = el.mcp[MCP_2025_11_25];
  if (!server.getClientCapabilities()?.elicitation?.url) {
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
      // Still pending: the same elicitation again (or not_connected without `elicit`).
      if (!(e.needsAuthorization || e.code === 'not_connected')) throw e;
    }
  }
  throw new NotConnectedError(`Still not connected to ${req.provider}. Open the link whenever you are ready, then ask again.`, 'rounds', req.provider);
}
