"""Async, typed client for mcp-connect: third-party OAuth for MCP servers through URL-mode
elicitation (docs/mcp-integration.md).

    async with Client("https://connect.example.com", api_key) as connect:
        try:
            token = await connect.token("github", subject=user_sub, elicit=True)
        except ConnectError as e:
            if e.elicitation is None:
                raise
            ...  # hand e.elicitation to the MCP client (see mcp_connect_client.mcp_sdk)

The proxy, where the token never reaches this server (`ANY /v1/proxy/{provider}/{path}`):

    answer = await connect.proxy("github", "user", subject_token=mcp_access_token)
    answer.status_code, answer.json()   # the provider's answer, whatever its status

Webhook signatures: `mcp_connect_client.webhooks.Verifier`. The official MCP SDK helpers
(2026-07-28): `mcp_connect_client.mcp_sdk.token_or_input_required` and
`proxy_or_input_required` (extra `mcp`).
"""

from ._client import DEFAULT_MAX_RETRIES, DEFAULT_MAX_RETRY_AFTER, MAX_WAIT_SECONDS, Client
from ._errors import TRANSPORT_ERROR, UNEXPECTED_RESPONSE, ConnectError
from ._models import (
    MCP_2025_11_25,
    MCP_2026_07_28,
    Account,
    AccountChoice,
    Connection,
    Elicitation,
    Event,
    EventData,
    Revocation,
    StreamedEvent,
    Token,
)
from ._proxy import OWN_ERROR_HEADER, TOKEN_REFRESHED_HEADER, ProxyQuery, ProxyResponse
from .webhooks import Verifier, WebhookError

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_RETRY_AFTER",
    "MAX_WAIT_SECONDS",
    "MCP_2025_11_25",
    "MCP_2026_07_28",
    "OWN_ERROR_HEADER",
    "TOKEN_REFRESHED_HEADER",
    "TRANSPORT_ERROR",
    "UNEXPECTED_RESPONSE",
    "Account",
    "AccountChoice",
    "Client",
    "ConnectError",
    "Connection",
    "Elicitation",
    "Event",
    "EventData",
    "ProxyQuery",
    "ProxyResponse",
    "Revocation",
    "StreamedEvent",
    "Token",
    "Verifier",
    "WebhookError",
]
