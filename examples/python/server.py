"""An MCP server (official Python SDK, protocol 2026-07-28) whose tools need the user's account at
a provider, and get it through mcp-connect: `InputRequiredResult` + `requestState`. It validates
the user's MCP access token (a JWT from MCP_ISSUER for this server's resource) and forwards it to
mcp-connect as `subject_token`, the proof of who is asking. Talking to mcp-connect and building the
MCP answer is one call of a helper from the mcp-connect-client package (clients/python); what is
left here is the tool logic. Two tools ask the provider the same question:

- `whoami` fetches the user's token (`token_or_input_required`) and calls PROVIDER_API with it;
- `whoami_via_proxy` sends the call to mcp-connect's proxy (`proxy_or_input_required`), which
  adds the token and forwards it to PROXY_PATH (default `whoami`) below the provider's API base
  URL: this server never holds the token. The recommended way (with `token_access = "proxy"`
  on the client, `whoami` is refused).

    python3 -m venv .venv && . .venv/bin/activate   # Debian refuses a system-wide pip install
    pip install -r examples/python/requirements.txt   # from the repository's root
    MCP_CONNECT_URL=http://127.0.0.1:8080 MCP_CONNECT_API_KEY=... PROVIDER=acme \
    PROVIDER_API=https://api.acme.test/whoami MCP_ISSUER=https://auth.example.com \
    python server.py --port 8765

(Against `mcp-connect demo`: see docs/mcp-integration.md, "Run it against the demo";
client.py beside this file calls it.)
"""

import argparse
import asyncio
import os

import httpx2 as httpx
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_connect_client import Client
from mcp_connect_client.mcp_sdk import NotConnected, proxy_or_input_required, token_or_input_required
from mcp_types import InputRequiredResult

connect = Client(os.environ["MCP_CONNECT_URL"], os.environ["MCP_CONNECT_API_KEY"])
PROVIDER, PROVIDER_API = os.environ["PROVIDER"], os.environ["PROVIDER_API"]
# The same whoami through the proxy: a path below the provider's API base URL (the demo's
# sandbox: /dev/sandbox/api, so `whoami` is PROVIDER_API's /dev/sandbox/api/whoami).
PROXY_PATH = os.environ.get("PROXY_PATH", "whoami")
ISSUER = os.environ.get("MCP_ISSUER")  # the MCP authorization server


class JwtVerifier:
    """MCP authorization: the user's access token must be a JWT from ISSUER (its JWKS) for this
    server's resource. The subject is its `sub`, never a value from tool input."""

    def __init__(self, audience: str):
        meta = httpx.get(f"{ISSUER}/.well-known/openid-configuration").json()
        self.jwks, self.audience = jwt.PyJWKClient(meta["jwks_uri"]), audience

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await asyncio.to_thread(self.jwks.get_signing_key_from_jwt, token)
            claims = jwt.decode(token, key.key, algorithms=["ES256", "RS256"], audience=self.audience, issuer=ISSUER)
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=claims.get("client_id", ""), scopes=[], subject=claims["sub"])


class DemoVerifier:
    """Without MCP_ISSUER: fixed tokens (DEMO_USERS=token=user,...) stand in for authorization."""

    users = dict(pair.split("=", 1) for pair in os.environ.get("DEMO_USERS", "").split(",") if pair)

    async def verify_token(self, token: str) -> AccessToken | None:
        sub = self.users.get(token)
        return AccessToken(token=token, client_id="demo-client", scopes=[], subject=sub) if sub else None


def build(url: str) -> MCPServer:
    audience = os.environ.get("MCP_AUDIENCE", f"{url}/mcp")
    mcp = MCPServer(
        "whoami-python",
        token_verifier=JwtVerifier(audience) if ISSUER else DemoVerifier(),
        # False, not unset (which warns): JwtVerifier checks the token's `aud` against `audience`
        # itself. The SDK's own check would compare the token's resource with this server's URL,
        # but the audience is MCP_AUDIENCE: `mcp-connect demo` issues every token for
        # http://127.0.0.1:8765/mcp whatever port this server listens on, and behind a proxy the
        # public URL is not the one listened on.
        auth=AuthSettings(issuer_url=url, resource_server_url=f"{url}/mcp", validate_token_resource=False),
    )

    @mcp.tool()
    async def whoami(ctx: Context) -> str | InputRequiredResult:
        """Who you are at the provider (connects your account first if needed)."""
        user = get_access_token()
        # Proof of subject with MCP_ISSUER: the token the user presented, checked again by mcp-connect.
        subject_token = user.token if ISSUER else None
        try:
            # The token, or the InputRequiredResult that asks the user to connect (the client shows
            # the URL and calls again with the answer; at most three rounds).
            got = await token_or_input_required(connect, ctx, PROVIDER, subject=user.subject,
                                                subject_token=subject_token)
        except NotConnected as e:  # declined, cancelled, or not finished in time
            return str(e)
        if isinstance(got, InputRequiredResult):
            return got
        async with httpx.AsyncClient(timeout=30) as http:
            me = await http.get(PROVIDER_API, headers={"authorization": f"Bearer {got.access_token}"})
        return f"{PROVIDER} says you are {me.json()['sub']}"

    @mcp.tool()
    async def whoami_via_proxy(ctx: Context) -> str | InputRequiredResult:
        """Who you are at the provider, asked through mcp-connect's proxy: this server never
        holds your token (connects your account first if needed)."""
        user = get_access_token()
        subject_token = user.token if ISSUER else None
        try:
            # The provider's answer, or the InputRequiredResult that asks the user to connect
            # (the same rounds as whoami's).
            got = await proxy_or_input_required(connect, ctx, PROVIDER, PROXY_PATH, subject=user.subject,
                                                subject_token=subject_token)
        except NotConnected as e:
            return str(e)
        if isinstance(got, InputRequiredResult):
            return got
        if not got.is_success:  # the provider's own refusal, passed on as it answered
            return f"{PROVIDER} answered {got.status_code}"
        return f"{PROVIDER} says you are {got.json()['sub']} (through mcp-connect's proxy)"

    return mcp


if __name__ == "__main__":
    args = argparse.ArgumentParser()
    args.add_argument("--port", type=int, default=8765)
    port = args.parse_args().port
    url = f"http://127.0.0.1:{port}"
    uvicorn.run(build(url).streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
