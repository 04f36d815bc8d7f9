"""A client for the example server (official Python SDK, protocol 2026-07-28): it calls `whoami`,
shows the connect URL when the server needs the user to connect a provider account, and calls
the tool again once the user is done; then `whoami_via_proxy`, the same question asked through
mcp-connect's proxy.

    MCP_TOKEN=<the user's MCP access token> python client.py [http://127.0.0.1:8765/mcp]

Against `mcp-connect demo`, MCP_TOKEN comes from its development issuer:
    MCP_TOKEN=$(curl -sS -X POST http://127.0.0.1:8080/dev/issuer/mcp-token -d user=alice \\
      | sed -E 's/.*"access_token":"([^"]*)".*/\\1/')
"""

import os
import sys

import anyio
import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult


async def show_url(context, params) -> ElicitResult:
    """URL mode: the user opens the link in a browser; this client never sees their credentials.
    `accept` tells the server the user went there; it then waits for mcp-connect to finish."""
    print(f"{params.message}\nOpen: {params.url}\nPress Enter when you are done (or type \"decline\").", flush=True)
    typed = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
    return ElicitResult(action="decline" if typed == "decline" else "accept")


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def main(url: str):
    bearer = {"authorization": f"Bearer {os.environ['MCP_TOKEN']}"}
    transport = streamable_http_client(url, http_client=httpx.AsyncClient(headers=bearer, timeout=90))
    # The SDK answers the server's InputRequiredResult by calling `show_url`, then repeats the
    # tool call with the answer and the server's requestState, until the tool has a result.
    async with Client(transport, elicitation_callback=show_url) as client:
        print("whoami:", text_of(await client.call_tool("whoami", {})), flush=True)
        # Once connected, the same call answers straight away.
        print("whoami again:", text_of(await client.call_tool("whoami", {})), flush=True)
        # The same question through mcp-connect's proxy: the server never holds the token.
        print("whoami_via_proxy:", text_of(await client.call_tool("whoami_via_proxy", {})), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8765/mcp")
