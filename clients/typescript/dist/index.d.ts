export { Verifier, WebhookError, TOLERANCE_SECONDS } from './webhooks.js';
import { type Account, type ConnectEvent } from './webhooks.js';
export type { Account, ConnectEvent, EventData } from './webhooks.js';
/** The two MCP protocol versions whose payloads every elicitation carries. */
export declare const MCP_2025_11_25 = "2025-11-25";
export declare const MCP_2026_07_28 = "2026-07-28";
/** The longest the service holds a waiting request (`wait_seconds`, `?wait=`). */
export declare const MAX_WAIT_SECONDS = 60;
/** Retries of one call (429 with a short `Retry-After`; transport failures and 503 on reads). */
export declare const DEFAULT_MAX_RETRIES = 2;
/** A `Retry-After` longer than this (seconds) is not slept through: the error reaches the caller. */
export declare const DEFAULT_MAX_RETRY_AFTER = 10;
/** `code` of a ConnectError when mcp-connect could not be reached (then `status` is undefined). */
export declare const TRANSPORT_ERROR = "transport_error";
/** `code` of a ConnectError when the answer was not mcp-connect's JSON (e.g. a proxy's page). */
export declare const UNEXPECTED_RESPONSE = "unexpected_response";
/** The response header on errors answered by mcp-connect itself through the proxy (its value is
 * the error's `code`), rather than by the provider. */
export declare const OWN_ERROR_HEADER = "mcp-connect-error";
/** The response header on a provider's 401 that mcp-connect could not retry itself: the token
 * was refreshed; send the call again. See `tokenRefreshed`. */
export declare const TOKEN_REFRESHED_HEADER = "mcp-connect-token-refreshed";
type Json = Record<string, unknown>;
/** An elicitation (`ElicitationView`): a connect URL for one user at one provider. */
export interface Elicitation {
    id: string;
    /** The connect URL for the user. Carries no personal data. */
    url: string;
    /** What the MCP client shows the user; names the provider. */
    message: string;
    /** `pending`, `completed`, `declined`, `expired` or `failed`. */
    status: string;
    subject: string;
    provider: string;
    scopes: string[];
    expires_at: string;
    connection_id?: string | null;
    /** Ready-to-send payloads keyed by MCP protocol version (see the functions below). */
    mcp: {
        '2026-07-28': {
            method: 'elicitation/create';
            params: UrlElicitationParams;
        };
        '2025-11-25': {
            params: UrlElicitationParams & {
                elicitationId: string;
            };
            error: {
                code: number;
                message: string;
                data: {
                    elicitations: Array<UrlElicitationParams & {
                        elicitationId: string;
                    }>;
                };
            };
        };
    };
    /** Sealed state for `InputRequiredResult.requestState` (2026-07-28); hand it back to `token`. */
    request_state?: string | null;
    /** Why it failed, when `status` is `failed`. */
    reason?: string | null;
}
export interface UrlElicitationParams {
    mode: 'url';
    url: string;
    message: string;
    elicitationId?: string;
}
/** A credential to call the provider with (`TokenResponse`). */
export interface Token {
    access_token: string;
    token_type: string;
    expires_at?: string | null;
    scopes: string[];
    connection_id: string;
    /** What the provider said that API calls need (e.g. `instance_url`). */
    metadata: Json;
    params: Json;
    /** `oauth2`, or the kind of credential an API-key provider holds. */
    credential_type: string;
    api_key?: string | null;
    header_name?: string | null;
    header_value?: string | null;
    username?: string | null;
    password?: string | null;
    /** Which of the user's accounts at the provider this token is for (absent from a service older
     * than accounts). */
    account?: Account;
}
/** One account the caller may name (`AccountChoice`), as `account_selection_required` lists
 * them on `ConnectError#accounts`. Never a token. */
export interface AccountChoice {
    id: string;
    label: string | null;
    nickname: string | null;
    connection_id: string;
    /** Whether it is the user's default account at the provider. */
    default: boolean;
}
/** A connection's metadata (`ConnectionView`), never its tokens. */
export interface Connection {
    id: string;
    subject: string;
    provider: string;
    /** `active`, `needs_reauth` or `revoked`. */
    status: string;
    scopes: string[];
    has_refresh_token: boolean;
    /** The account's label (also `account.label`; kept for callers written before accounts). */
    account_label?: string | null;
    /** Which account at the provider this connection is (absent from a service older than
     * accounts). */
    account?: Account;
    /** Whether it is the user's default account at the provider: what `token` without `account`
     * gets. */
    default?: boolean;
    expires_at?: string | null;
    last_refresh_at?: string | null;
    last_error?: string | null;
    created_at: string;
    updated_at: string;
}
/** What revoking a connection did (`RevocationReport`). */
export interface Revocation {
    connection_id: string;
    refresh_token: string;
    access_token: string;
    tokens_deleted: boolean;
    message: string;
}
/** One message of `GET /v1/events`; `id` is the sequence number to resume after. */
export interface StreamedEvent {
    id: number;
    event: ConnectEvent;
}
/** `POST /v1/tokens`. Give `subject` (the validated MCP user's `sub`), `subjectToken` (that
 * user's MCP access token, as proof), or both. */
export interface TokenRequest {
    provider: string;
    subject?: string;
    subjectToken?: string;
    /** Which of the user's accounts at the provider: its `Account.id`, or its label or nickname
     * when no other account shares it. Without it: the user's default account, or
     * `account_selection_required` (`e.accounts`) for a client that must name one. */
    account?: string;
    /** What this call needs. More than the grant holds: `insufficient_scope` (`e.missingScopes`);
     * with `elicit`, the user is asked for the union. */
    scopes?: string[];
    minTtlSeconds?: number;
    /** The provider just refused the token: refresh (never answers with the token held before). */
    forceRefresh?: boolean;
    /** When not connected, fail with `authorization_required` carrying a ready elicitation. */
    elicit?: boolean;
    /** Wait for this elicitation first (with `waitSeconds`). */
    elicitationId?: string;
    /** Instead of `elicitationId`: the elicitation's `request_state`, as handed out. */
    requestState?: string;
    /** Hold the request while the awaited elicitation is pending (at most 60). */
    waitSeconds?: number;
}
/** One call to a provider's API through the proxy (`ANY /v1/proxy/{provider}/{path}`). Give
 * `subjectToken` (the user's MCP access token, as proof), `subject` (for a client allowed to
 * name it), or both. */
export interface ProxyRequest {
    provider: string;
    /** Below the provider's API base URL, with any query (`'repos/o/r/issues?state=open'`); a
     * leading `/` is dropped. Sent as written: a path mcp-connect refuses (`..`, `//`, encoded
     * slashes: 400 `invalid_request`) is not repaired, and one that fetch would rewrite before
     * sending (dot segments, backslashes, tabs or line breaks, a `#`) is refused here with the same
     * code, before anything is sent. */
    path: string;
    /** `GET` unless given (upper-cased). */
    method?: string;
    subjectToken?: string;
    subject?: string;
    /** Which of the user's accounts at the provider (`Connect-Account`: its id or label). */
    account?: string;
    /** Headers for the provider (`Authorization`, cookies, `Connect-*`, `Subject-Token` and
     * hop-by-hop headers never reach it). */
    headers?: RequestInit['headers'];
    /** Added after the path's own query. */
    query?: Record<string, string> | URLSearchParams | Array<[string, string]>;
    /** The request body; a stream is streamed. */
    body?: RequestInit['body'];
    /** Ends the call (and the reading of its body). Replaces the client's `timeoutMs` for this
     * call. */
    signal?: AbortSignal;
}
export interface CreateElicitationRequest {
    provider: string;
    subject?: string;
    subjectToken?: string;
    scopes?: string[];
    params?: Json;
    /** Ask the user to connect another account at the provider rather than reconnect the one they
     * have (which account it becomes is the provider's answer: one already connected is
     * reconnected). */
    addAccount?: boolean;
}
/**
 * Every failure of a call: the API's stable `code` (`not_connected`, `authorization_required`,
 * `invalid_request_state`, `rate_limited`, ...), its message, the HTTP status, and what some
 * codes carry (the ready `elicitation` of `authorization_required` / `reauthorization_required`,
 * `reason`, `elicitationId`, `retryAfter`, the `missingScopes` of `insufficient_scope`, the
 * `accounts` of `account_selection_required`). Transport failures: `code === 'transport_error'`,
 * no status.
 */
export declare class ConnectError extends Error {
    readonly code: string;
    readonly status: number | undefined;
    readonly elicitation: Elicitation | undefined;
    readonly reason: string | undefined;
    readonly elicitationId: string | undefined;
    readonly retryAfter: number | undefined;
    /** `insufficient_scope`: the scopes the call needs that the grant does not hold (else empty). */
    readonly missingScopes: string[];
    /** `account_selection_required`: the user's accounts at the provider, one of which to name as
     * `account` (else empty). */
    readonly accounts: AccountChoice[];
    readonly body: Json;
    constructor(code: string, message: string, status?: number, more?: {
        elicitation?: Elicitation;
        reason?: string;
        elicitationId?: string;
        retryAfter?: number;
        missingScopes?: string[];
        accounts?: AccountChoice[];
        body?: Json;
        cause?: unknown;
    });
    /** The human sentence the API sent. */
    get apiMessage(): string;
    /** `authorization_required` or `reauthorization_required`: the user must (re)connect. */
    get needsAuthorization(): boolean;
    /** The user declined the awaited elicitation and nothing is connected. */
    get isDeclined(): boolean;
    /** `account_selection_required`: the user holds several accounts at the provider and this
     * client must name one (`account`, e.g. the `id` of one of `accounts`). */
    get needsAccountSelection(): boolean;
    /** `insufficient_scope`: the grant lacks `missingScopes` (asked without `elicit`; with it, the
     * answer is `authorization_required` with an elicitation for the upgrade). */
    get isInsufficientScope(): boolean;
    static fromBody(status: number, body: unknown, retryAfter?: number): ConnectError;
}
/** Whether the provider refused the token on this proxied answer (a 401) and mcp-connect refreshed
 * it without sending the call again (its body was too large to keep): send it again, and it goes
 * out with the new token. */
export declare function tokenRefreshed(resp: Response): boolean;
/** The 2026-07-28 `elicitation/create` input request an elicitation carries. */
export type InputRequest = Elicitation['mcp']['2026-07-28'];
/** The 2025-11-25 URL-mode `elicitation/create` params an elicitation carries. */
export type CreateParams = Elicitation['mcp']['2025-11-25']['params'];
/** The 2025-11-25 URLElicitationRequiredError (`-32042`) an elicitation carries. */
export type UrlElicitationRequiredErrorData = Elicitation['mcp']['2025-11-25']['error'];
/** A 2026-07-28 `InputRequiredResult`, in wire form. */
export interface InputRequiredResultWire {
    resultType: 'input_required';
    inputRequests: Record<string, InputRequest>;
    requestState?: string;
}
/** 2026-07-28: the `{method: "elicitation/create", params}` object for `InputRequiredResult.inputRequests`. */
export declare function inputRequest(el: Elicitation): InputRequest;
/** 2026-07-28: a complete `InputRequiredResult` (wire form) asking for this elicitation under `key`. */
export declare function inputRequiredResult(el: Elicitation, key?: string): InputRequiredResultWire;
/** 2025-11-25: the `elicitation/create` params (`mode`, `elicitationId`, `url`, `message`). */
export declare function createParams(el: Elicitation): CreateParams;
/** 2025-11-25: the URLElicitationRequiredError (`code: -32042`, `message`, `data`). */
export declare function urlElicitationRequiredError(el: Elicitation): UrlElicitationRequiredErrorData;
export interface ClientOptions {
    /** Bounded retries (default 2); see `Client`. */
    maxRetries?: number;
    /** Seconds; a longer `Retry-After` is not waited for (default 10). */
    maxRetryAfter?: number;
    /** Per-request timeout in ms (default 75 000: the longest wait the service holds, and a margin). */
    timeoutMs?: number;
    /** Bring your own fetch (tests, proxies). */
    fetch?: typeof fetch;
}
/**
 * The mcp-connect API client (`Authorization: Bearer <api key>`). `baseUrl` is mcp-connect's
 * `public_url`; `apiKey` one from its `[[clients]]`.
 *
 * Retries are bounded (`maxRetries`) and only where a second attempt cannot do anything twice:
 * any call answered `429 rate_limited` with a `Retry-After` of at most `maxRetryAfter` seconds
 * (the request was not processed), and the reads (`getElicitation`, `waitElicitation`,
 * `connections`) after a transport failure or `503 unavailable`. `token`, `createElicitation`
 * and `revoke` are never re-sent after a transport failure.
 */
export declare class Client {
    #private;
    constructor(baseUrl: string, apiKey: string, options?: ClientOptions);
    /** The key stays out of logs and inspection. */
    toJSON(): {
        baseUrl: string;
    };
    /** `POST /v1/tokens`: the user's credential at the provider, refreshed first when needed. */
    token(req: TokenRequest): Promise<Token>;
    /** `POST /v1/elicitations`: a connect URL for the user at the provider (a still-pending one for
     * the same request is handed out again). */
    createElicitation(req: CreateElicitationRequest): Promise<Elicitation>;
    /** `GET /v1/elicitations/{id}`. */
    getElicitation(id: string): Promise<Elicitation>;
    /** `GET /v1/elicitations/{id}?wait=`: returns once it is no longer pending, or when
     * `waitSeconds` (at most 60) have passed (then `status` is still `pending`). */
    waitElicitation(id: string, waitSeconds?: number): Promise<Elicitation>;
    /** `GET /v1/connections`: the user's connections this client may use (metadata only). */
    connections(who: {
        subject?: string;
        subjectToken?: string;
    }): Promise<Connection[]>;
    /** `DELETE /v1/connections/{id}`: revokes at the provider and deletes the tokens. */
    revoke(connectionId: string, opts?: {
        subjectToken?: string;
    }): Promise<Revocation>;
    /**
     * `ANY /v1/proxy/{provider}/{path}`: the call, sent to the provider's API by mcp-connect with
     * the user's token, which never reaches this process. Resolves to the provider's answer,
     * whatever its status (a 404 or 401 of the provider's is an answer, not an error), its body
     * still streaming; `tokenRefreshed(resp)` says whether a 401 may be sent again. Rejects with
     * `ConnectError` for mcp-connect's own refusals, told apart by their `MCP-Connect-Error` header
     * (`not_connected`, `forbidden`, `invalid_request`, `upstream_error`, ...; ask
     * `createElicitation` for the connect URL), and for a transport failure. Never retried: the
     * call may not be safe to repeat.
     */
    proxy(req: ProxyRequest): Promise<Response>;
    /** `GET /v1/events`: this client's events as they happen. Pass the last `StreamedEvent.id`
     * seen to replay what was missed; `signal` ends the stream. The iterator also ends when the
     * service closes the stream (it does on shutdown): reconnect then. */
    events(opts?: {
        lastEventId?: number;
        signal?: AbortSignal;
    }): AsyncGenerator<StreamedEvent>;
}
