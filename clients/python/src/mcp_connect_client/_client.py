from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import anyio
import httpx2 as httpx

from ._errors import TRANSPORT_ERROR, UNEXPECTED_RESPONSE, ConnectError
from ._models import Connection, Elicitation, Event, Revocation, StreamedEvent, Token
from ._proxy import OWN_ERROR_HEADER, ProxyQuery, ProxyResponse, caller_headers, proxy_target

#: The longest the service holds a waiting request (`wait_seconds`, `?wait=`).
MAX_WAIT_SECONDS = 60
#: Retries of one call (429 with a short `Retry-After`; transport failures and 503 on reads).
DEFAULT_MAX_RETRIES = 2
#: A `Retry-After` longer than this is not slept through: the error reaches the caller at once.
DEFAULT_MAX_RETRY_AFTER = 10.0
#: Long enough for the longest wait the service holds.
DEFAULT_TIMEOUT = httpx.Timeout(MAX_WAIT_SECONDS + 15, connect=5)


def _segment(s: str) -> str:
    # Ids are URL-safe by construction; anything else is percent-encoded rather than trusted.
    return quote(s, safe="")


class Client:
    """The mcp-connect API client (`Authorization: Bearer <api key>`).

    `base_url` is mcp-connect's `public_url`; `api_key` one from its `[[clients]]`. Use it as an
    async context manager, or call `aclose()`. Pass `http` to bring your own `httpx2.AsyncClient`
    (it is then yours to close).

    Retries are bounded (`max_retries`) and only where a second attempt cannot do anything twice:
    any call answered `429 rate_limited` with a `Retry-After` of at most `max_retry_after`
    seconds (the request was not processed), and the reads (`get_elicitation`,
    `wait_elicitation`, `connections`) after a transport failure or `503 unavailable`.
    `token`, `create_elicitation` and `revoke` are never re-sent after a transport failure;
    `proxy` is never re-sent at all (its body may be a stream, and the provider may have acted).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        http: httpx.AsyncClient | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._api_key = api_key
        self._own_http = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
        self._max_retries = max(0, max_retries)
        self._max_retry_after = max_retry_after

    def __repr__(self) -> str:
        return f"Client({self._base!r}, api_key=[redacted])"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    def _headers(self, subject_token: str | None = None) -> dict[str, str]:
        h = {"authorization": f"Bearer {self._api_key}", "accept": "application/json"}
        if subject_token is not None:
            # A token never goes into a URL: the service reads it from this header.
            h["subject-token"] = subject_token
        return h

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        subject_token: str | None = None,
        read: bool = False,
    ) -> Any:
        url = f"{self._base}{path}"
        attempt = 0
        while True:
            try:
                resp = await self._http.request(
                    method, url, json=body, params=params, headers=self._headers(subject_token)
                )
            except httpx.TransportError as e:
                if read and attempt < self._max_retries:
                    attempt += 1
                    await anyio.sleep(0.25 * 2**attempt)
                    continue
                raise ConnectError(TRANSPORT_ERROR, f"could not reach mcp-connect ({type(e).__name__})") from e
            if resp.is_success:
                try:
                    return resp.json()
                except ValueError as e:
                    raise ConnectError.from_body(resp.status_code, resp.text) from e
            retry_after = _retry_after(resp)
            if attempt < self._max_retries:
                if resp.status_code == 429 and retry_after is not None and retry_after <= self._max_retry_after:
                    attempt += 1
                    await anyio.sleep(retry_after)
                    continue
                if resp.status_code == 503 and read:
                    attempt += 1
                    await anyio.sleep(min(retry_after or 0.25 * 2**attempt, self._max_retry_after))
                    continue
            try:
                parsed: Any = resp.json()
            except ValueError:
                parsed = resp.text
            raise ConnectError.from_body(resp.status_code, parsed, retry_after)

    async def token(
        self,
        provider: str,
        *,
        subject: str | None = None,
        subject_token: str | None = None,
        account: str | None = None,
        scopes: Sequence[str] | None = None,
        min_ttl_seconds: int | None = None,
        force_refresh: bool = False,
        elicit: bool = False,
        elicitation_id: str | None = None,
        request_state: str | None = None,
        wait_seconds: int | None = None,
    ) -> Token:
        """`POST /v1/tokens`: the user's credential at `provider`, refreshed first when needed.

        `subject` is the `sub` of the user's validated MCP access token; `subject_token` that
        token itself, as proof (either or both). `account`: which of the user's accounts at the
        provider (its `Account.id`, or its label or nickname when no other account shares it);
        without it the user's default one, or `account_selection_required` (`e.accounts`) for a
        client that must name one. `scopes`: what this call needs (more than the grant holds:
        `insufficient_scope` with `e.missing_scopes`; with `elicit`, the user is asked for the
        union). `force_refresh`: the provider just refused the token. `elicit`: when not
        connected, raise `authorization_required` carrying a ready `elicitation` instead of
        `not_connected`. `elicitation_id` or `request_state` with `wait_seconds` (at most 60):
        wait for that elicitation to finish first.
        """
        body = _request_body(
            provider=provider,
            subject=subject,
            subject_token=subject_token,
            account=account,
            scopes=None if scopes is None else list(scopes),
            min_ttl_seconds=min_ttl_seconds,
            force_refresh=True if force_refresh else None,
            elicit=True if elicit else None,
            elicitation_id=elicitation_id,
            request_state=request_state,
            wait_seconds=None if wait_seconds is None else max(0, min(wait_seconds, MAX_WAIT_SECONDS)),
        )
        return Token.from_json(await self._call("POST", "/v1/tokens", body=body))

    async def create_elicitation(
        self,
        provider: str,
        *,
        subject: str | None = None,
        subject_token: str | None = None,
        scopes: Sequence[str] | None = None,
        params: dict[str, Any] | None = None,
        add_account: bool = False,
    ) -> Elicitation:
        """`POST /v1/elicitations`: a connect URL for the user at `provider` (a still-pending one
        for the same request is handed out again). `add_account`: ask the user to connect another
        account there rather than reconnect the one they have (which account it becomes is the
        provider's answer: one already connected is reconnected)."""
        body = _request_body(
            provider=provider,
            subject=subject,
            subject_token=subject_token,
            scopes=None if scopes is None else list(scopes),
            params=params,
            add_account=True if add_account else None,
        )
        return Elicitation.from_json(await self._call("POST", "/v1/elicitations", body=body))

    async def get_elicitation(self, elicitation_id: str) -> Elicitation:
        """`GET /v1/elicitations/{id}`."""
        return Elicitation.from_json(await self._call("GET", f"/v1/elicitations/{_segment(elicitation_id)}", read=True))

    async def wait_elicitation(self, elicitation_id: str, wait_seconds: int = MAX_WAIT_SECONDS) -> Elicitation:
        """`GET /v1/elicitations/{id}?wait=`: returns once it is no longer pending, or when
        `wait_seconds` (at most 60) have passed (then `status` is still `pending`)."""
        wait = max(0, min(wait_seconds, MAX_WAIT_SECONDS))
        return Elicitation.from_json(
            await self._call(
                "GET", f"/v1/elicitations/{_segment(elicitation_id)}", params={"wait": str(wait)}, read=True
            )
        )

    async def connections(self, subject: str | None = None, *, subject_token: str | None = None) -> list[Connection]:
        """`GET /v1/connections`: the user's connections this client may use (metadata only)."""
        params = {"subject": subject} if subject is not None else None
        body = await self._call("GET", "/v1/connections", params=params, subject_token=subject_token, read=True)
        return [Connection.from_json(c) for c in body.get("connections", [])]

    async def revoke(self, connection_id: str, *, subject_token: str | None = None) -> Revocation:
        """`DELETE /v1/connections/{id}`: revokes at the provider and deletes the tokens."""
        return Revocation.from_json(
            await self._call("DELETE", f"/v1/connections/{_segment(connection_id)}", subject_token=subject_token)
        )

    async def events(self, last_event_id: int | None = None) -> AsyncIterator[StreamedEvent]:
        """`GET /v1/events`: this client's events as they happen. Pass the last
        `StreamedEvent.id` seen to replay what was missed. The iterator ends when the service
        closes the stream (it does on shutdown): reconnect then."""
        headers = self._headers() | {"accept": "text/event-stream"}
        if last_event_id is not None:
            headers["last-event-id"] = str(last_event_id)
        try:
            # A stream stays open; only connecting is bounded.
            async with self._http.stream(
                "GET", f"{self._base}/v1/events", headers=headers, timeout=httpx.Timeout(None, connect=5)
            ) as resp:
                if not resp.is_success:
                    raw = await resp.aread()
                    try:
                        parsed: Any = json.loads(raw)
                    except ValueError:
                        parsed = raw.decode("utf-8", "replace")
                    raise ConnectError.from_body(resp.status_code, parsed, _retry_after(resp))
                seq: int | None = None
                data: list[str] = []
                async for line in resp.aiter_lines():
                    if line == "":
                        if seq is not None and data:
                            try:
                                event = Event.from_json(json.loads("\n".join(data)))
                            except (ValueError, KeyError):
                                event = None
                            if event is not None:
                                yield StreamedEvent(seq, event)
                        seq, data = None, []
                    elif line.startswith("id:"):
                        try:
                            seq = int(line[3:].strip())
                        except ValueError:
                            seq = None
                    elif line.startswith("data:"):
                        v = line[5:]
                        data.append(v[1:] if v.startswith(" ") else v)
        except httpx.TransportError as e:
            raise ConnectError(TRANSPORT_ERROR, f"the event stream failed ({type(e).__name__})") from e

    async def proxy(
        self,
        provider: str,
        path: str,
        *,
        method: str = "GET",
        subject_token: str | None = None,
        subject: str | None = None,
        account: str | None = None,
        headers: Mapping[str, str] | None = None,
        params: ProxyQuery | None = None,
        body: bytes | str | AsyncIterable[bytes] | None = None,
        json: Any = None,
    ) -> ProxyResponse:
        """`ANY /v1/proxy/{provider}/{path}`: calls the provider's API through mcp-connect, which
        adds the user's token; this server never holds it. Returns the provider's answer,
        whatever its status, with its body read (`Client.proxy_stream` streams it). Raises
        `ConnectError` when mcp-connect answered itself (`MCP-Connect-Error`): `not_connected`,
        `reauthorization_required`, `account_selection_required`, `forbidden`,
        `invalid_request` (a path that could leave the API base), `upstream_error`, ...

        `path`: below the provider's API base URL, with any query (`"repos/o/r/issues?state=open"`),
        sent as given (a leading `/` is optional): `..`, `//` and encoded slashes are mcp-connect's
        400, never repaired here. The user: `subject_token` (their MCP access token, the proof)
        or, for a client allowed to name it, `subject`. `account`: which of their accounts at the
        provider (id or label). `headers` go to the provider (`Authorization`, `Subject-Token`
        and `Connect-*` are mcp-connect's and are not sent from here); `params` are added to the
        query; `body` (bytes, text or an async stream) or `json` is the request body.

        A 401 with `token_refreshed` means mcp-connect refreshed the token after the provider
        refused it and could not replay the call itself (a body over 64 KiB): send it again.
        """
        async with self.proxy_stream(
            provider,
            path,
            method=method,
            subject_token=subject_token,
            subject=subject,
            account=account,
            headers=headers,
            params=params,
            body=body,
            json=json,
        ) as answer:
            await answer.aread()
            return answer

    @asynccontextmanager
    async def proxy_stream(
        self,
        provider: str,
        path: str,
        *,
        method: str = "GET",
        subject_token: str | None = None,
        subject: str | None = None,
        account: str | None = None,
        headers: Mapping[str, str] | None = None,
        params: ProxyQuery | None = None,
        body: bytes | str | AsyncIterable[bytes] | None = None,
        json: Any = None,
    ) -> AsyncIterator[ProxyResponse]:
        """`proxy` with the answer's body still streaming: read it inside the block
        (`async for chunk in answer.aiter_bytes()`); it is closed when the block ends.

            async with connect.proxy_stream("github", "repos/o/r/tarball/main", subject_token=t) as answer:
                async for chunk in answer.aiter_bytes():
                    ...
        """
        if body is not None and json is not None:
            raise ValueError("a proxied call has one body: pass `body` or `json`, not both")
        h = caller_headers(headers)
        h["authorization"] = f"Bearer {self._api_key}"
        if subject_token is not None:
            h["subject-token"] = subject_token
        if subject is not None:
            h["connect-subject"] = subject
        if account is not None:
            h["connect-account"] = account
        request = self._http.build_request(
            method.upper(),
            f"{self._base}{proxy_target(provider, path, params)}",
            headers=h,
            content=body,
            json=json,
        )
        try:
            resp = await self._http.send(request, stream=True)
        except httpx.TransportError as e:
            raise ConnectError(TRANSPORT_ERROR, f"could not reach mcp-connect ({type(e).__name__})") from e
        try:
            if OWN_ERROR_HEADER in resp.headers:
                raise await _own_error(resp)
            yield ProxyResponse(resp)
        finally:
            await resp.aclose()


def _retry_after(resp: httpx.Response) -> float | None:
    v = resp.headers.get("retry-after")
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        return None


async def _own_error(resp: httpx.Response) -> ConnectError:
    """mcp-connect's own answer on the proxy: its JSON error, or (no body, as to a `HEAD`, or
    not JSON) the code its `MCP-Connect-Error` header names."""
    try:
        raw = await resp.aread()
    except httpx.TransportError:
        raw = b""
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return ConnectError.from_body(resp.status_code, parsed, _retry_after(resp))
    code = resp.headers.get(OWN_ERROR_HEADER, "").strip()[:64] or UNEXPECTED_RESPONSE
    text = raw.decode("utf-8", "replace")[:200]
    return ConnectError(code, text, resp.status_code, retry_after=_retry_after(resp))


def _request_body(**fields: Any) -> dict[str, Any]:
    """A JSON request body of the fields given a value: the API reads a missing field as its
    default, so `None` (and a `False` flag, passed as `None`) is left out rather than sent."""
    return {name: value for name, value in fields.items() if value is not None}
