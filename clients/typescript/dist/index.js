// Client for mcp-connect: third-party OAuth for MCP servers through URL-mode elicitation
// (docs/mcp-integration.md). Node 20+: global fetch, no runtime dependencies.
//
//   const connect = new Client('https://connect.example.com', apiKey);
//   try {
//     const token = await connect.token({ provider: 'github', subject, elicit: true });
//   } catch (e) {
//     if (e instanceof ConnectError && e.elicitation) { /* hand it to the MCP client */ }
//   }
//
// The proxy (the provider token never reaches this process):
//
//   const resp = await connect.proxy({ provider: 'github', path: 'user', subjectToken });
//   // resp: the provider's own Response, whatever its status; mcp-connect's refusals throw
//
// Webhook signatures: `mcp-connect-client/webhooks`. The official MCP SDK helper (2025-11-25):
// `mcp-connect-client/mcp-sdk`.
export { Verifier, WebhookError, TOLERANCE_SECONDS } from './webhooks.js';
import { parseEvent } from './webhooks.js';
/** The two MCP protocol versions whose payloads every elicitation carries. */
export const MCP_2025_11_25 = '2025-11-25';
export const MCP_2026_07_28 = '2026-07-28';
/** The longest the service holds a waiting request (`wait_seconds`, `?wait=`). */
export const MAX_WAIT_SECONDS = 60;
/** Retries of one call (429 with a short `Retry-After`; transport failures and 503 on reads). */
export const DEFAULT_MAX_RETRIES = 2;
/** A `Retry-After` longer than this (seconds) is not slept through: the error reaches the caller. */
export const DEFAULT_MAX_RETRY_AFTER = 10;
/** `code` of a ConnectError when mcp-connect could not be reached (then `status` is undefined). */
export const TRANSPORT_ERROR = 'transport_error';
/** `code` of a ConnectError when the answer was not mcp-connect's JSON (e.g. a proxy's page). */
export const UNEXPECTED_RESPONSE = 'unexpected_response';
/** The response header on errors answered by mcp-connect itself through the proxy (its value is
 * the error's `code`), rather than by the provider. */
export const OWN_ERROR_HEADER = 'mcp-connect-error';
/** The response header on a provider's 401 that mcp-connect could not retry itself: the token
 * was refreshed; send the call again. See `tokenRefreshed`. */
export const TOKEN_REFRESHED_HEADER = 'mcp-connect-token-refreshed';
/**
 * Every failure of a call: the API's stable `code` (`not_connected`, `authorization_required`,
 * `invalid_request_state`, `rate_limited`, ...), its message, the HTTP status, and what some
 * codes carry (the ready `elicitation` of `authorization_required` / `reauthorization_required`,
 * `reason`, `elicitationId`, `retryAfter`, the `missingScopes` of `insufficient_scope`, the
 * `accounts` of `account_selection_required`). Transport failures: `code === 'transport_error'`,
 * no status.
 */
export class ConnectError extends Error {
    code;
    status;
    elicitation;
    reason;
    elicitationId;
    retryAfter;
    /** `insufficient_scope`: the scopes the call needs that the grant does not hold (else empty). */
    missingScopes;
    /** `account_selection_required`: the user's accounts at the provider, one of which to name as
     * `account` (else empty). */
    accounts;
    body;
    constructor(code, message, status, more = {}) {
        super(status === undefined ? `${code}: ${message}` : `mcp-connect answered ${status} ${code}: ${message}`, { cause: more.cause });
        this.name = 'ConnectError';
        this.code = code;
        this.status = status;
        this.elicitation = more.elicitation;
        this.reason = more.reason;
        this.elicitationId = more.elicitationId;
        this.retryAfter = more.retryAfter;
        this.missingScopes = more.missingScopes ?? [];
        this.accounts = more.accounts ?? [];
        this.body = more.body ?? {};
    }
    /** The human sentence the API sent. */
    get apiMessage() {
        return typeof this.body.message === 'string' ? this.body.message : this.message;
    }
    /** `authorization_required` or `reauthorization_required`: the user must (re)connect. */
    get needsAuthorization() {
        return this.code === 'authorization_required' || this.code === 'reauthorization_required';
    }
    /** The user declined the awaited elicitation and nothing is connected. */
    get isDeclined() {
        return this.code === 'authorization_declined';
    }
    /** `account_selection_required`: the user holds several accounts at the provider and this
     * client must name one (`account`, e.g. the `id` of one of `accounts`). */
    get needsAccountSelection() {
        return this.code === 'account_selection_required';
    }
    /** `insufficient_scope`: the grant lacks `missingScopes` (asked without `elicit`; with it, the
     * answer is `authorization_required` with an elicitation for the upgrade). */
    get isInsufficientScope() {
        return this.code === 'insufficient_scope';
    }
    static fromBody(status, body, retryAfter) {
        if (typeof body !== 'object' || body === null || typeof body.error !== 'string') {
            return new ConnectError(UNEXPECTED_RESPONSE, String(typeof body === 'string' ? body : JSON.stringify(body)).slice(0, 200), status, { retryAfter });
        }
        const b = body;
        const str = (v) => (typeof v === 'string' ? v : undefined);
        const el = b.elicitation;
        return new ConnectError(b.error, str(b.message) ?? '', status, {
            elicitation: typeof el === 'object' && el !== null ? el : undefined,
            reason: str(b.reason),
            elicitationId: str(b.elicitation_id),
            retryAfter,
            missingScopes: Array.isArray(b.missing_scopes) ? b.missing_scopes.filter((s) => typeof s === 'string') : [],
            accounts: Array.isArray(b.accounts) ? b.accounts.filter(isObject).map(accountChoice) : [],
            body: b,
        });
    }
}
const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const strOrNull = (v) => (typeof v === 'string' ? v : null);
function accountChoice(a) {
    return {
        id: typeof a.id === 'string' ? a.id : '',
        label: strOrNull(a.label),
        nickname: strOrNull(a.nickname),
        connection_id: typeof a.connection_id === 'string' ? a.connection_id : '',
        default: a.default === true,
    };
}
/** Whether the provider refused the token on this proxied answer (a 401) and mcp-connect refreshed
 * it without sending the call again (its body was too large to keep): send it again, and it goes
 * out with the new token. */
export function tokenRefreshed(resp) {
    return resp.headers.get(TOKEN_REFRESHED_HEADER) === 'true';
}
/** Percent-encodes every character a URL parser might, so that a path as written and as the parser
 * serialized it compare equal unless the parser changed it (it resolves dot segments, turns `\`
 * into `/`, drops tabs, line breaks, trailing spaces and a `#fragment`). */
const canonical = (s) => s.replace(/[^A-Za-z0-9\-._~!$&()*+,;=:@/?%]/gu, (c) => {
    if (c === "'")
        return '%27';
    try {
        return encodeURIComponent(c);
    }
    catch {
        return '%EF%BF%BD';
    }
});
/** 2026-07-28: the `{method: "elicitation/create", params}` object for `InputRequiredResult.inputRequests`. */
export function inputRequest(el) {
    return el.mcp[MCP_2026_07_28];
}
/** 2026-07-28: a complete `InputRequiredResult` (wire form) asking for this elicitation under `key`. */
export function inputRequiredResult(el, key = 'connect') {
    const r = { resultType: 'input_required', inputRequests: { [key]: inputRequest(el) } };
    if (el.request_state)
        r.requestState = el.request_state;
    return r;
}
/** 2025-11-25: the `elicitation/create` params (`mode`, `elicitationId`, `url`, `message`). */
export function createParams(el) {
    return el.mcp[MCP_2025_11_25].params;
}
/** 2025-11-25: the URLElicitationRequiredError (`code: -32042`, `message`, `data`). */
export function urlElicitationRequiredError(el) {
    return el.mcp[MCP_2025_11_25].error;
}
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });
const segment = (s) => encodeURIComponent(s);
const clampWait = (s) => Math.max(0, Math.min(Math.floor(s), MAX_WAIT_SECONDS));
function retryAfterOf(resp) {
    const v = resp.headers.get('retry-after');
    if (v === null)
        return undefined;
    const n = Number(v);
    return Number.isFinite(n) ? Math.max(0, n) : undefined;
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
export class Client {
    #base;
    #apiKey;
    #maxRetries;
    #maxRetryAfter;
    #timeoutMs;
    #fetch;
    constructor(baseUrl, apiKey, options = {}) {
        this.#base = baseUrl.replace(/\/+$/, '');
        this.#apiKey = apiKey;
        this.#maxRetries = Math.max(0, options.maxRetries ?? DEFAULT_MAX_RETRIES);
        this.#maxRetryAfter = options.maxRetryAfter ?? DEFAULT_MAX_RETRY_AFTER;
        this.#timeoutMs = options.timeoutMs ?? (MAX_WAIT_SECONDS + 15) * 1000;
        this.#fetch = options.fetch ?? globalThis.fetch;
    }
    /** The key stays out of logs and inspection. */
    toJSON() { return { baseUrl: this.#base }; }
    #headers(subjectToken) {
        const h = { authorization: `Bearer ${this.#apiKey}`, accept: 'application/json' };
        // A token never goes into a URL: the service reads it from this header.
        if (subjectToken !== undefined)
            h['subject-token'] = subjectToken;
        return h;
    }
    async #call(method, path, opts = {}) {
        const url = new URL(`${this.#base}${path}`);
        for (const [k, v] of Object.entries(opts.query ?? {}))
            url.searchParams.set(k, v);
        const headers = this.#headers(opts.subjectToken);
        if (opts.body !== undefined)
            headers['content-type'] = 'application/json';
        for (let attempt = 0;; attempt += 1) {
            let resp;
            try {
                resp = await this.#fetch(url, {
                    method,
                    headers,
                    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
                    signal: AbortSignal.timeout(this.#timeoutMs),
                });
            }
            catch (err) {
                if (opts.read && attempt < this.#maxRetries) {
                    await sleep(250 * 2 ** (attempt + 1));
                    continue;
                }
                const kind = err?.cause?.code ?? err?.name ?? 'error';
                throw new ConnectError(TRANSPORT_ERROR, `could not reach mcp-connect (${kind})`, undefined, { cause: err });
            }
            const text = await resp.text();
            let parsed = text;
            try {
                parsed = JSON.parse(text);
            }
            catch { /* not JSON: reported as unexpected_response */ }
            if (resp.ok) {
                if (typeof parsed !== 'object' || parsed === null)
                    throw ConnectError.fromBody(resp.status, text);
                return parsed;
            }
            const retryAfter = retryAfterOf(resp);
            if (attempt < this.#maxRetries) {
                if (resp.status === 429 && retryAfter !== undefined && retryAfter <= this.#maxRetryAfter) {
                    await sleep(retryAfter * 1000);
                    continue;
                }
                if (resp.status === 503 && opts.read) {
                    await sleep(Math.min(retryAfter ?? 0.25 * 2 ** (attempt + 1), this.#maxRetryAfter) * 1000);
                    continue;
                }
            }
            throw ConnectError.fromBody(resp.status, parsed, retryAfter);
        }
    }
    /** `POST /v1/tokens`: the user's credential at the provider, refreshed first when needed. */
    async token(req) {
        // JSON.stringify leaves out `undefined` fields: the API reads a missing field as its default.
        const body = {
            provider: req.provider,
            subject: req.subject,
            subject_token: req.subjectToken,
            account: req.account,
            scopes: req.scopes,
            min_ttl_seconds: req.minTtlSeconds,
            force_refresh: req.forceRefresh ? true : undefined,
            elicit: req.elicit ? true : undefined,
            elicitation_id: req.elicitationId,
            request_state: req.requestState,
            wait_seconds: req.waitSeconds === undefined ? undefined : clampWait(req.waitSeconds),
        };
        return this.#call('POST', '/v1/tokens', { body });
    }
    /** `POST /v1/elicitations`: a connect URL for the user at the provider (a still-pending one for
     * the same request is handed out again). */
    async createElicitation(req) {
        const body = {
            provider: req.provider,
            subject: req.subject,
            subject_token: req.subjectToken,
            scopes: req.scopes,
            params: req.params,
            add_account: req.addAccount ? true : undefined,
        };
        return this.#call('POST', '/v1/elicitations', { body });
    }
    /** `GET /v1/elicitations/{id}`. */
    async getElicitation(id) {
        return this.#call('GET', `/v1/elicitations/${segment(id)}`, { read: true });
    }
    /** `GET /v1/elicitations/{id}?wait=`: returns once it is no longer pending, or when
     * `waitSeconds` (at most 60) have passed (then `status` is still `pending`). */
    async waitElicitation(id, waitSeconds = MAX_WAIT_SECONDS) {
        return this.#call('GET', `/v1/elicitations/${segment(id)}`, { query: { wait: String(clampWait(waitSeconds)) }, read: true });
    }
    /** `GET /v1/connections`: the user's connections this client may use (metadata only). */
    async connections(who) {
        const query = who.subject === undefined ? {} : { subject: who.subject };
        const list = await this.#call('GET', '/v1/connections', { query, subjectToken: who.subjectToken, read: true });
        return list.connections ?? [];
    }
    /** `DELETE /v1/connections/{id}`: revokes at the provider and deletes the tokens. */
    async revoke(connectionId, opts = {}) {
        return this.#call('DELETE', `/v1/connections/${segment(connectionId)}`, { subjectToken: opts.subjectToken });
    }
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
    async proxy(req) {
        const provider = segment(req.provider);
        let target = `/v1/proxy/${provider}/${req.path.replace(/^\/+/, '')}`;
        if (req.query !== undefined) {
            const qs = new URLSearchParams(req.query).toString();
            if (qs)
                target += `${req.path.includes('?') ? '&' : '?'}${qs}`;
        }
        const base = new URL(this.#base);
        const url = new URL(`${this.#base}${target}`);
        const sent = new URL(url);
        sent.hash = '';
        const written = `${base.pathname.replace(/\/$/, '')}${target}`;
        if (canonical(sent.href.slice(sent.href.indexOf('/', sent.protocol.length + 2))) !== canonical(written)) {
            // fetch would send another path than the one given (`..` resolved, `\` as `/`): possibly
            // one outside the proxy, with this client's API key. mcp-connect refuses these paths.
            throw new ConnectError('invalid_request', 'the proxy path cannot be sent as written (dot segments, backslashes, tabs, line breaks or a #fragment): nothing was sent');
        }
        const headers = new Headers(req.headers);
        for (const own of ['subject-token', 'connect-subject', 'connect-account'])
            headers.delete(own);
        headers.set('authorization', `Bearer ${this.#apiKey}`);
        // The user's token goes in a header, never in the URL.
        if (req.subjectToken !== undefined)
            headers.set('subject-token', req.subjectToken);
        if (req.subject !== undefined)
            headers.set('connect-subject', req.subject);
        if (req.account !== undefined)
            headers.set('connect-account', req.account);
        const init = {
            method: (req.method ?? 'GET').toUpperCase(),
            headers,
            body: req.body,
            redirect: 'manual',
            signal: req.signal ?? AbortSignal.timeout(this.#timeoutMs),
        };
        // A stream body needs it (Node's fetch); harmless otherwise.
        if (req.body !== undefined && req.body !== null)
            init.duplex = 'half';
        let resp;
        try {
            resp = await this.#fetch(url, init);
        }
        catch (err) {
            const kind = err?.cause?.code ?? err?.name ?? 'error';
            throw new ConnectError(TRANSPORT_ERROR, `could not reach mcp-connect (${kind})`, undefined, { cause: err });
        }
        if (!resp.headers.has(OWN_ERROR_HEADER))
            return resp;
        const text = await resp.text();
        let parsed = text;
        try {
            parsed = JSON.parse(text);
        }
        catch { /* not JSON: reported as unexpected_response */ }
        throw ConnectError.fromBody(resp.status, parsed, retryAfterOf(resp));
    }
    /** `GET /v1/events`: this client's events as they happen. Pass the last `StreamedEvent.id`
     * seen to replay what was missed; `signal` ends the stream. The iterator also ends when the
     * service closes the stream (it does on shutdown): reconnect then. */
    async *events(opts = {}) {
        const headers = { ...this.#headers(), accept: 'text/event-stream' };
        if (opts.lastEventId !== undefined)
            headers['last-event-id'] = String(opts.lastEventId);
        let resp;
        try {
            resp = await this.#fetch(`${this.#base}/v1/events`, { headers, signal: opts.signal });
        }
        catch (err) {
            throw new ConnectError(TRANSPORT_ERROR, 'could not reach mcp-connect', undefined, { cause: err });
        }
        if (!resp.ok || !resp.body) {
            const text = await resp.text();
            let parsed = text;
            try {
                parsed = JSON.parse(text);
            }
            catch { /* reported as unexpected_response */ }
            throw ConnectError.fromBody(resp.status, parsed, retryAfterOf(resp));
        }
        const decoder = new TextDecoder();
        let buf = '';
        try {
            for await (const chunk of resp.body) {
                buf += decoder.decode(chunk, { stream: true }).replace(/\r\n/g, '\n');
                for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
                    const block = buf.slice(0, end);
                    buf = buf.slice(end + 2);
                    let id;
                    const data = [];
                    for (const line of block.split('\n')) {
                        if (line.startsWith('id:'))
                            id = Number(line.slice(3).trim());
                        else if (line.startsWith('data:'))
                            data.push(line.slice(5).replace(/^ /, ''));
                    }
                    if (id === undefined || !Number.isFinite(id) || data.length === 0)
                        continue;
                    let event;
                    try {
                        event = parseEvent(JSON.parse(data.join('\n')));
                    }
                    catch {
                        event = undefined;
                    }
                    if (event)
                        yield { id, event };
                }
            }
        }
        catch (err) {
            if (opts.signal?.aborted)
                return;
            throw new ConnectError(TRANSPORT_ERROR, 'the event stream failed', undefined, { cause: err });
        }
    }
}
