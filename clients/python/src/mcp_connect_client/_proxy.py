"""The proxy (`ANY /v1/proxy/{provider}/{path}`): the provider's answer as the caller gets it,
and how a call's path and headers are put together."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx2 as httpx

from ._errors import TRANSPORT_ERROR, ConnectError

#: The header on every error mcp-connect answers itself (its `code`), rather than the provider:
#: a provider's own 404 or 401 never carries it.
OWN_ERROR_HEADER = "mcp-connect-error"
#: On a provider's 401 that could not be retried (its body was too large to keep): the token
#: was refreshed, the same call may be sent again.
TOKEN_REFRESHED_HEADER = "mcp-connect-token-refreshed"

# Headers that name the caller or the user to mcp-connect. The proxy never passes them on to
# the provider; the client sets its own and drops a caller's, so that headers built from tool
# input cannot name another user.
_OURS = ("authorization", "subject-token")
_OURS_PREFIX = "connect-"

#: Query parameters for a proxied call, added after any query in its `path`.
ProxyQuery = Mapping[str, str | Sequence[str]] | Sequence[tuple[str, str]]

# A dot segment sent as typed would be resolved by the HTTP library before it leaves
# (`a/../b` becomes `b`, and `../../connections` another mcp-connect endpoint). Percent-encoded
# it reaches mcp-connect, which refuses it either way (400 `invalid_request`).
_DOT_SEGMENTS = {".": "%2E", "..": "%2E%2E"}


def proxy_target(provider: str, path: str, params: ProxyQuery | None = None) -> str:
    """`/v1/proxy/{provider}/{path}`: `path` (below the provider's API base, with any query) as
    given, one leading `/` optional, and `params` encoded after its query. Nothing is resolved
    or repaired: what mcp-connect refuses (`..`, `//`, encoded slashes) reaches it and is refused
    there. Only what the HTTP library would otherwise change is escaped: dot segments, and `#`
    (it would cut the rest off)."""
    rest = path[1:] if path.startswith("/") else path
    rest = rest.replace("#", "%23")
    route, q, query = rest.partition("?")
    route = "/".join(_DOT_SEGMENTS.get(seg, seg) for seg in route.split("/"))
    if params:
        pairs = params.items() if isinstance(params, Mapping) else params
        more = urlencode(
            [(k, v) for k, vs in pairs for v in ([vs] if isinstance(vs, str) else vs)], quote_via=quote
        )
        query = f"{query}&{more}" if query else more
        q = "?"
    # A provider name is letters, digits, - and _ (anything else is mcp-connect's 400).
    return f"/v1/proxy/{quote(provider, safe='')}/{route}{q}{query}"


def caller_headers(headers: Mapping[str, str] | None) -> httpx.Headers:
    """The caller's headers for the provider, without those that speak to mcp-connect."""
    out = httpx.Headers()
    for name, value in (headers or {}).items():
        low = name.lower()
        if low in _OURS or low.startswith(_OURS_PREFIX):
            continue
        out[name] = value
    return out


@dataclass(frozen=True)
class ProxyResponse:
    """The provider's answer through the proxy, whatever its status (a provider's 404 or 401 is
    an answer, not an error): its status, its headers (without `Set-Cookie` and hop-by-hop ones)
    and its body. mcp-connect's own refusals are raised as `ConnectError` instead.

    From `Client.proxy` the body has been read (`content`, `text`, `json()`); from
    `Client.proxy_stream` it is read with `aiter_bytes()` or `aread()`. `response` is the
    underlying `httpx2.Response`."""

    response: httpx.Response

    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.response.headers

    @property
    def is_success(self) -> bool:
        return self.response.is_success

    @property
    def token_refreshed(self) -> bool:
        """`MCP-Connect-Token-Refreshed: true` (on a 401): the provider refused the token,
        mcp-connect refreshed it, and sending the same call again uses the new one."""
        return self.response.headers.get(TOKEN_REFRESHED_HEADER, "").strip().lower() == "true"

    @property
    def content(self) -> bytes:
        return self.response.content

    @property
    def text(self) -> str:
        return self.response.text

    def json(self) -> Any:
        return self.response.json()

    async def aread(self) -> bytes:
        try:
            return await self.response.aread()
        except httpx.TransportError as e:
            raise ConnectError(TRANSPORT_ERROR, f"the proxied answer was cut off ({type(e).__name__})") from e

    async def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.aiter_bytes(chunk_size):
                yield chunk
        except httpx.TransportError as e:
            raise ConnectError(TRANSPORT_ERROR, f"the proxied answer was cut off ({type(e).__name__})") from e

    def __repr__(self) -> str:
        return f"ProxyResponse(status_code={self.status_code}, token_refreshed={self.token_refreshed})"
