// Compiled (not run) by `npm run check`: a strict NodeNext consumer of the published entry points,
// through the package's own `exports` and the committed .d.ts files.
import { Client, ConnectError, OWN_ERROR_HEADER, inputRequiredResult, tokenRefreshed, type Account, type AccountChoice, type Connection, type Elicitation, type ProxyRequest, type Token } from 'mcp-connect-client';
import { Verifier, type ConnectEvent } from 'mcp-connect-client/webhooks';
import { Completions, DEFAULT_MAX_ROUNDS, NotConnectedError, tokenOrElicit } from 'mcp-connect-client/mcp-sdk';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';

const connect = new Client('https://connect.example.com', 'key', { maxRetries: 1 });
const mcp = new McpServer({ name: 'consumer', version: '0.0.0' });
const completions = new Completions(connect);
void completions.listen({ signal: AbortSignal.timeout(1000), onError: (err: unknown) => String(err) });
mcp.registerTool('whoami', { description: 'who you are' }, async () => {
  try {
    const token: Token = await tokenOrElicit(mcp.server, connect, { provider: 'github', subject: 'alice' }, { maxRounds: DEFAULT_MAX_ROUNDS, mode: 'error', completions });
    return { content: [{ type: 'text' as const, text: token.token_type }] };
  } catch (e) {
    if (e instanceof NotConnectedError) return { content: [{ type: 'text' as const, text: e.message }], isError: true };
    if (e instanceof ConnectError && e.elicitation) {
      const el: Elicitation = e.elicitation;
      const state: string | undefined = inputRequiredResult(el).requestState;
      return { content: [{ type: 'text' as const, text: state ?? el.url }] };
    }
    throw e;
  }
});
mcp.registerTool('work', { description: 'at your work account' }, async () => {
  try {
    const token = await tokenOrElicit(mcp.server, connect, { provider: 'github', subject: 'alice', account: 'work' });
    const account: Account | undefined = token.account;
    return { content: [{ type: 'text' as const, text: account?.nickname ?? account?.label ?? account?.id ?? '' }] };
  } catch (e) {
    if (e instanceof ConnectError && e.needsAccountSelection) {
      const choices: AccountChoice[] = e.accounts;
      return { content: [{ type: 'text' as const, text: choices.map((a) => `${a.label ?? a.id}${a.default ? ' (default)' : ''}`).join(', ') }] };
    }
    if (e instanceof ConnectError && e.isInsufficientScope) return { content: [{ type: 'text' as const, text: e.missingScopes.join(' ') }], isError: true };
    throw e;
  }
});
const another: Promise<Elicitation> = connect.createElicitation({ provider: 'github', subject: 'alice', addAccount: true });
const defaults: Promise<Connection[]> = connect.connections({ subject: 'alice' }).then((cs) => cs.filter((c) => c.default === true && c.account !== undefined));
const event: ConnectEvent = new Verifier('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw').verify({}, '');
const eventAccount: Account | null | undefined = event.data.account;
const ask: ProxyRequest = { provider: 'github', path: 'repos/o/r/issues', method: 'POST', subjectToken: 'mcp-token', account: 'work', headers: { 'content-type': 'application/json' }, query: { state: 'open' }, body: JSON.stringify({ title: 't' }) };
const proxied: Promise<{ status: number; retry: boolean; ours: string | null }> = connect.proxy(ask).then((r: Response) => ({ status: r.status, retry: tokenRefreshed(r), ours: r.headers.get(OWN_ERROR_HEADER) }));
export { another, defaults, event, eventAccount, proxied };
