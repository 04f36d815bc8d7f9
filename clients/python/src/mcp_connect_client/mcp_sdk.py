"""The official MCP Python SDK (`mcp` 2.x, protocol 2026-07-28): one call that turns "not
connected" into the right answer for that protocol, `InputRequiredResult` with `requestState`.

    from mcp_connect_client.mcp_sdk import token_or_input_required

    @mcp.tool()
    async def whoami(ctx: Context) -> str | InputRequiredResult:
        user = get_access_token()
        got = await token_or_input_required(connect, ctx, "github", subject=user.subject,
                                            subject_token=user.token)
        if isinstance(got, InputRequiredResult):
            return got                      # the client shows the URL and retries the call
        return await call_github(got.access_token)

Each `InputRequiredResult` is one round. `accept` only means the user agreed to open the URL, so
the retry asks mcp-connect with the echoed state and waits up to `wait_seconds` for the flow to
finish; a user who has not finished gets another round, at most `max_rounds` (default
`DEFAULT_MAX_ROUNDS`, 3: with the default 20 s wait, about a minute), then `NotConnected`. A tool
with no cap keeps a client asking for minutes after the user walked away or refused.

`NotConnected` is the SDK's `ToolError`: left uncaught, the call ends with `is_error` and its
friendly message; catch it to answer in your own words.

`account=` names one of the user's accounts at the provider (its id, label or nickname): a token
for it, or, when it is not connected, the request to add it. Without it the user's default
account; a client configured to name one gets `ConnectError` with `needs_account_selection` and
`accounts` to choose from.

The proxy, where this server never holds the token (`token_access = "proxy"` on its client, the
recommended mode, refuses it tokens altogether): `proxy_or_input_required` makes the provider
call through mcp-connect and answers "not connected" the same way, with the same rounds:

    @mcp.tool()
    async def whoami(ctx: Context) -> str | InputRequiredResult:
        user = get_access_token()
        got = await proxy_or_input_required(connect, ctx, "github", "user", subject=user.subject,
                                            subject_token=user.token)
        if isinstance(got, InputRequiredResult):
            return got
        return got.json()["login"]          # the provider's answer, whatever its status

Its rounds wait for the elicitation by id (`GET /v1/elicitations/{id}?wait=`), not through
`POST /v1/tokens`, so no token is fetched on the way; with `subject` given, a `requestState` for
another user's or another provider's elicitation is refused.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, Mapping, Sequence
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import InputRequiredResult

from ._client import Client
from ._errors import ConnectError
from ._models import MCP_2026_07_28, Token
from ._proxy import ProxyQuery, ProxyResponse

#: Rounds of `InputRequiredResult` for one tool call before giving up (the SDK's own client
#: gives up after 10; stopping first gives the user a sentence instead of a client error).
DEFAULT_MAX_ROUNDS = 3
#: How long each retry waits at mcp-connect for the user to finish the flow.
DEFAULT_WAIT_SECONDS = 20

# The round counter travels with mcp-connect's sealed state: `r<round>:<request_state>`. The
# SDK seals every outgoing requestState again; on SDKs that do not, a client that rewrites the
# counter only prolongs its own waiting, and mcp-connect still checks the sealed part.
_STATE = re.compile(r"^r(\d{1,3}):(.+)$", re.DOTALL)
# The proxy helper's: `p<round>:<elicitation id>`, the elicitation the user was asked to finish.
_PROXY_STATE = re.compile(r"^p(\d{1,3}):([^\s/]{1,256})$")
#: What the proxy answers when the user must connect (or reconnect) first.
_CONNECT_FIRST = frozenset({"not_connected", "authorization_required", "reauthorization_required"})


class NotConnected(ToolError):
    """The user did not connect: declined or cancelled the request, declined on the consent
    page, or did not finish within `max_rounds`. `why` is `decline`, `cancel`, `declined` or
    `rounds`."""

    def __init__(self, message: str, why: str, provider: str) -> None:
        super().__init__(message)
        self.why = why
        self.provider = provider


def _state(raw: str | None) -> tuple[int, str | None]:
    if raw is None:
        return 0, None
    m = _STATE.match(raw)
    if m is None:
        # A state from an mcp-connect elicitation handed out verbatim: its first round.
        return 1, raw
    return int(m.group(1)), m.group(2)


async def token_or_input_required(
    connect: Client,
    ctx: Context[Any, Any],
    provider: str,
    *,
    subject: str | None = None,
    subject_token: str | None = None,
    scopes: Sequence[str] | None = None,
    account: str | None = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    wait_seconds: int = DEFAULT_WAIT_SECONDS,
    key: str = "connect",
) -> Token | InputRequiredResult:
    """The user's token at `provider`, or the `InputRequiredResult` to return from the tool.

    `subject` / `subject_token`: the validated MCP user (e.g. `get_access_token().subject` and
    `.token`), never a value from tool input. `account`: which of the user's accounts at the
    provider (see the module's notes). Raises `NotConnected` when the user declined, cancelled or
    did not finish within `max_rounds`; any other failure is a `ConnectError`.
    """
    answer = (ctx.input_responses or {}).get(key)
    action = getattr(answer, "action", None)
    if answer is not None and action != "accept":
        raise NotConnected(f"Not connected to {provider}: you chose to {action}.", str(action), provider)
    rounds, state = _state(ctx.request_state)
    ask: dict[str, Any] = {
        "subject": subject,
        "subject_token": subject_token,
        "account": account,
        "scopes": scopes,
        "elicit": True,
    }
    try:
        try:
            if state is None:
                return await connect.token(provider, **ask)
            return await connect.token(provider, request_state=state, wait_seconds=wait_seconds, **ask)
        except ConnectError as e:
            if state is not None and e.code == "invalid_request_state" and e.reason == "expired":
                # The elicitation ran out while the user was away: start over with a new one.
                return await connect.token(provider, **ask)
            raise
    except ConnectError as e:
        if e.is_declined:
            raise NotConnected(f"Not connected to {provider}: you declined.", "declined", provider) from e
        if not (e.needs_authorization and e.elicitation is not None):
            raise
        if rounds >= max_rounds:
            raise NotConnected(
                f"Still not connected to {provider}. Open the link whenever you are ready, then ask again.",
                "rounds",
                provider,
            ) from e
        el = e.elicitation
        return InputRequiredResult(
            input_requests={key: el.mcp[MCP_2026_07_28]},
            request_state=f"r{rounds + 1}:{el.request_state}",
        )


def _proxy_state(raw: str | None) -> tuple[int, str | None]:
    if raw is None:
        return 0, None
    m = _PROXY_STATE.match(raw)
    if m is None:
        raise ToolError("This call carries a requestState this tool did not hand out: call it again without one.")
    return int(m.group(1)), m.group(2)


async def proxy_or_input_required(
    connect: Client,
    ctx: Context[Any, Any],
    provider: str,
    path: str,
    *,
    method: str = "GET",
    subject: str | None = None,
    subject_token: str | None = None,
    account: str | None = None,
    headers: Mapping[str, str] | None = None,
    params: ProxyQuery | None = None,
    body: bytes | str | AsyncIterable[bytes] | None = None,
    json: Any = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    wait_seconds: int = DEFAULT_WAIT_SECONDS,
    key: str = "connect",
) -> ProxyResponse | InputRequiredResult:
    """The provider's answer to `method` `path` through mcp-connect's proxy (`Client.proxy`,
    whatever its status), or the `InputRequiredResult` to return from the tool when the user
    must connect (or reconnect) first.

    `subject` / `subject_token`: the validated MCP user, never a value from tool input; give
    `subject` whenever it is known, it also ties the rounds to that user. `account`: which of the
    user's accounts (when it is not connected, the user is asked to add it). Raises
    `NotConnected` when the user declined, cancelled or did not finish within `max_rounds`; any
    other refusal of mcp-connect is a `ConnectError`. `headers`, `params`, `body` and `json` as
    in `Client.proxy`; each round is a new tool call, which builds the body again.
    """
    answer = (ctx.input_responses or {}).get(key)
    action = getattr(answer, "action", None)
    if answer is not None and action != "accept":
        raise NotConnected(f"Not connected to {provider}: you chose to {action}.", str(action), provider)
    rounds, elicitation_id = _proxy_state(ctx.request_state)
    if elicitation_id is not None:
        # `accept` only means the user went to the URL: wait for them to finish there.
        el = await connect.wait_elicitation(elicitation_id, wait_seconds)
        if el.provider != provider or (subject is not None and el.subject != subject):
            raise ToolError("This call carries a requestState of another request: call it again without one.")
        if el.status == "declined":
            raise NotConnected(f"Not connected to {provider}: you declined.", "declined", provider)
    try:
        return await connect.proxy(
            provider,
            path,
            method=method,
            subject=subject,
            subject_token=subject_token,
            account=account,
            headers=headers,
            params=params,
            body=body,
            json=json,
        )
    except ConnectError as e:
        if e.code not in _CONNECT_FIRST:
            raise
        if rounds >= max_rounds:
            raise NotConnected(
                f"Still not connected to {provider}. Open the link whenever you are ready, then ask again.",
                "rounds",
                provider,
            ) from e
    # A still-pending elicitation for the same request is handed out again: one URL per user.
    el = await connect.create_elicitation(
        provider, subject=subject, subject_token=subject_token, add_account=account is not None
    )
    return InputRequiredResult(
        input_requests={key: el.mcp[MCP_2026_07_28]},
        request_state=f"p{rounds + 1}:{el.id}",
    )
