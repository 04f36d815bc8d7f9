"""The official MCP Python SDK as a real client, driven by tests/sdk/sdk.test.mjs.

    python_client.py URL BEARER SCENARIO [OTHER_BEARER]

Prints one JSON object per line: `{"event": "elicit", ...}` when the server asks for input (then
reads the action - accept / decline / cancel - from stdin), `{"event": "result", ...}` or
`{"event": "error", ...}` at the end. Scenarios: `call` (call the tool, answering elicitations),
`forged` (retry with a forged requestState, and with a genuine one under another user's token).
"""

import json
import sys

import anyio
import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, ErrorData


def emit(**kw):
    print(json.dumps(kw), flush=True)


def transport(url, bearer):
    return streamable_http_client(url, http_client=httpx.AsyncClient(headers={"authorization": f"Bearer {bearer}"}, timeout=90))


async def on_elicit(context, params) -> ElicitResult | ErrorData:
    emit(event="elicit", params=params.model_dump(mode="json", by_alias=True, exclude_none=True))
    action = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
    return ElicitResult(action=action)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def call(url, bearer):
    async with Client(transport(url, bearer), elicitation_callback=on_elicit) as client:
        emit(event="connected", protocol=client.protocol_version)
        try:
            result = await client.call_tool("whoami", {})
            emit(event="result", text=text_of(result), is_error=bool(result.is_error))
        except MCPError as e:
            emit(event="error", code=e.error.code, message=e.error.message)


async def refused(client, **kw):
    try:
        r = await client.session.call_tool("whoami", {}, allow_input_required=True, **kw)
        return {"refused": bool(getattr(r, "is_error", False)), "kind": type(r).__name__, "text": text_of(r) if hasattr(r, "content") else ""}
    except MCPError as e:
        return {"refused": True, "code": e.error.code, "message": e.error.message}


async def forged(url, bearer, other):
    accept = {"connect": ElicitResult(action="accept")}
    async with Client(transport(url, bearer), elicitation_callback=on_elicit) as client:
        first = await client.session.call_tool("whoami", {}, allow_input_required=True)
        genuine = first.request_state
        forged = await refused(client, input_responses=accept, request_state="v1.forged-by-the-client")
        altered = await refused(client, input_responses=accept, request_state=genuine[:-4] + ("AAAA" if not genuine.endswith("AAAA") else "BBBB"))
    async with Client(transport(url, other), elicitation_callback=on_elicit) as client:
        replayed = await refused(client, input_responses=accept, request_state=genuine)
    emit(event="result", first=type(first).__name__, forged=forged, altered=altered, replayed=replayed)


if __name__ == "__main__":
    url, bearer, scenario = sys.argv[1:4]
    if scenario == "forged":
        anyio.run(forged, url, bearer, sys.argv[4])
    else:
        anyio.run(call, url, bearer)
