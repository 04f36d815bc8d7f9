// A client for the example server (official TypeScript SDK, protocol 2025-11-25): it calls a tool,
// shows the connect URL when the server needs the user to connect a provider account, and calls
// the tool again once the user is done.
//
//   MCP_TOKEN=<the user's MCP access token> npx tsx client.ts [http://127.0.0.1:8766/mcp] [whoami_later|whoami]
//
// Against `mcp-connect demo`, MCP_TOKEN comes from its development issuer:
//   MCP_TOKEN=$(curl -sS -X POST http://127.0.0.1:8080/dev/issuer/mcp-token -d user=alice | sed -E 's/.*"access_token":"([^"]*)".*/\1/')
import readline from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ElicitationCompleteNotificationSchema, ElicitRequestSchema, UrlElicitationRequiredError,
} from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.argv[2] ?? 'http://127.0.0.1:8766/mcp');
const tool = process.argv[3] ?? 'whoami_later';
const token = process.env.MCP_TOKEN ?? (() => { throw new Error('set MCP_TOKEN'); })();

// The user's go-ahead, typed here: Enter once the browser says the account is connected.
const lines = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise<string>((resolve) => { lines.once('line', resolve); });

// URL mode: the user opens the link in a browser; this client never sees their credentials.
function show(message: string, link: string) {
  console.log(`${message}\nOpen: ${link}\nPress Enter when you are done (or type "decline").`);
}

// `elicitation.url` tells the server this client can show a URL.
const client = new Client({ name: 'whoami-client', version: '0.0.0' }, { capabilities: { elicitation: { url: {} } } });

// `whoami` asks with elicitation/create and waits: answer once the user has been there.
client.setRequestHandler(ElicitRequestSchema, async ({ params }) => {
  if (params.mode !== 'url') return { action: 'decline' };
  show(params.message, params.url);
  return { action: (await nextLine()).trim() === 'decline' ? 'decline' : 'accept' };
});

// The server says when a flow it handed out has finished (notifications/elicitation/complete).
const completed = new Map<string, () => void>();
client.setNotificationHandler(ElicitationCompleteNotificationSchema, ({ params }) => {
  completed.get(params.elicitationId)?.();
});

const textOf = (r: Awaited<ReturnType<typeof client.callTool>>) =>
  (r.content as { type: string; text?: string }[]).map((c) => c.text ?? '').join('');

async function call(): Promise<string> {
  try {
    return textOf(await client.callTool({ name: tool, arguments: {} }, undefined, { timeout: 600_000 }));
  } catch (e) {
    // `whoami_later` answers at once with -32042 (URLElicitationRequiredError): show the URL, wait
    // for the completion notification (or Enter), then call the tool again.
    if (!(e instanceof UrlElicitationRequiredError)) throw e;
    const waits = e.elicitations.map((el) => {
      show(el.message, el.url);
      return new Promise<void>((resolve) => { completed.set(el.elicitationId, resolve); });
    });
    const typed = await Promise.race([Promise.all(waits).then(() => ''), nextLine()]);
    if (typed.trim() === 'decline') return 'Not connected: you chose to decline.';
    return textOf(await client.callTool({ name: tool, arguments: {} }));
  }
}

await client.connect(new StreamableHTTPClientTransport(url, {
  requestInit: { headers: { authorization: `Bearer ${token}` } },
}));
console.log(`${tool}: ${await call()}`);
// Once connected, the same call answers straight away.
console.log(`${tool} again: ${await call()}`);
await client.close();
lines.close();
