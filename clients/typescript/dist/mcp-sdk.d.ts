import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { type Client, type Token } from './index.js';
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
export declare function tokenOrElicit(server: Server, connect: Client, req: TokenOrElicitRequest, opts?: TokenOrElicitOptions): Promise<Token>;
