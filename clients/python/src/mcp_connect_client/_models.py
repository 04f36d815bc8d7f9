"""What the API hands out, as typed, read-only objects (docs/openapi.json names the schemas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The two MCP protocol versions whose payloads every elicitation carries.
MCP_2025_11_25 = "2025-11-25"
MCP_2026_07_28 = "2026-07-28"


def _str_list(v: Any) -> tuple[str, ...]:
    return tuple(str(s) for s in v) if isinstance(v, list) else ()


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class Account:
    """Which of the user's accounts at a provider (`AccountRef`): on a token, a connection and
    connection events. Never a token. Name it as `account` in `Client.token` (its `id`, or its
    label or nickname when no other account of the user's shares it)."""

    #: The provider's stable id of the account; empty where the provider names none.
    id: str
    #: A label people recognise (login, email, workspace name), when the provider gave one.
    label: str | None
    #: The user's own name for it, when they gave one.
    nickname: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Account:
        return cls(id=str(d.get("id", "")), label=_opt_str(d.get("label")), nickname=_opt_str(d.get("nickname")))


def _opt_account(v: Any) -> Account | None:
    return Account.from_json(v) if isinstance(v, dict) else None


@dataclass(frozen=True)
class AccountChoice:
    """One account the caller may name (`AccountChoice`), as `account_selection_required`
    lists them on `ConnectError.accounts`. Never a token."""

    id: str
    label: str | None
    nickname: str | None
    connection_id: str
    #: Whether it is the user's default account at the provider.
    default: bool

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AccountChoice:
        return cls(
            id=str(d.get("id", "")),
            label=_opt_str(d.get("label")),
            nickname=_opt_str(d.get("nickname")),
            connection_id=str(d.get("connection_id", "")),
            default=d.get("default") is True,
        )


@dataclass(frozen=True)
class Elicitation:
    """An elicitation (`ElicitationView`): a connect URL for one user at one provider."""

    id: str
    #: The connect URL for the user. Carries no personal data.
    url: str
    #: What the MCP client shows the user; names the provider.
    message: str
    #: `pending`, `completed`, `declined`, `expired` or `failed`.
    status: str
    subject: str
    provider: str
    scopes: tuple[str, ...]
    expires_at: str
    connection_id: str | None
    #: Ready-to-send payloads keyed by MCP protocol version (see the methods below).
    mcp: dict[str, Any]
    #: Sealed state for `InputRequiredResult.requestState` (2026-07-28), handed back as
    #: `request_state` to `Client.token`.
    request_state: str | None
    #: Why it failed, when `status` is `failed`.
    reason: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Elicitation:
        return cls(
            id=str(d["id"]),
            url=str(d["url"]),
            message=str(d.get("message", "")),
            status=str(d.get("status", "")),
            subject=str(d.get("subject", "")),
            provider=str(d.get("provider", "")),
            scopes=_str_list(d.get("scopes")),
            expires_at=str(d.get("expires_at", "")),
            connection_id=_opt_str(d.get("connection_id")),
            mcp=_obj(d.get("mcp")),
            request_state=_opt_str(d.get("request_state")),
            reason=_opt_str(d.get("reason")),
        )

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"

    def input_request(self) -> dict[str, Any]:
        """2026-07-28: the `{method: "elicitation/create", params: {mode: "url", ...}}` object for
        `InputRequiredResult.inputRequests`."""
        return dict(self.mcp.get(MCP_2026_07_28) or {})

    def input_required_result(self, key: str = "connect") -> dict[str, Any]:
        """2026-07-28: a complete `InputRequiredResult` (wire form) asking for this elicitation."""
        r: dict[str, Any] = {"resultType": "input_required", "inputRequests": {key: self.input_request()}}
        if self.request_state is not None:
            r["requestState"] = self.request_state
        return r

    def create_params(self) -> dict[str, Any]:
        """2025-11-25: the `elicitation/create` params (`mode`, `elicitationId`, `url`, `message`)."""
        return dict((self.mcp.get(MCP_2025_11_25) or {}).get("params") or {})

    def url_elicitation_required_error(self) -> dict[str, Any]:
        """2025-11-25: the URLElicitationRequiredError (`code: -32042`, `message`, `data`)."""
        return dict((self.mcp.get(MCP_2025_11_25) or {}).get("error") or {})


@dataclass(frozen=True)
class Token:
    """A credential to call the provider with (`TokenResponse`). Its repr hides the secrets."""

    access_token: str = field(repr=False)
    token_type: str
    expires_at: str | None
    scopes: tuple[str, ...]
    connection_id: str
    #: What the provider said that API calls need (e.g. `instance_url`).
    metadata: dict[str, Any]
    #: `oauth2`, or the kind of credential an API-key provider holds.
    credential_type: str
    params: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)
    header_name: str | None = None
    header_value: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: Which of the user's accounts at the provider this token is for (`None` from a service
    #: older than accounts).
    account: Account | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Token:
        return cls(
            access_token=str(d["access_token"]),
            token_type=str(d.get("token_type", "Bearer")),
            expires_at=_opt_str(d.get("expires_at")),
            scopes=_str_list(d.get("scopes")),
            connection_id=str(d.get("connection_id", "")),
            metadata=_obj(d.get("metadata")),
            credential_type=str(d.get("credential_type", "oauth2")),
            params=_obj(d.get("params")),
            api_key=_opt_str(d.get("api_key")),
            header_name=_opt_str(d.get("header_name")),
            header_value=_opt_str(d.get("header_value")),
            username=_opt_str(d.get("username")),
            password=_opt_str(d.get("password")),
            account=_opt_account(d.get("account")),
        )


@dataclass(frozen=True)
class Connection:
    """A connection's metadata (`ConnectionView`), never its tokens."""

    id: str
    subject: str
    provider: str
    #: `active`, `needs_reauth` or `revoked`.
    status: str
    scopes: tuple[str, ...]
    has_refresh_token: bool
    #: The account's label (also `account.label`; kept for callers written before accounts).
    account_label: str | None
    expires_at: str | None
    last_refresh_at: str | None
    last_error: str | None
    created_at: str
    updated_at: str
    #: Which account at the provider this connection is (`None` from a service older than
    #: accounts).
    account: Account | None = None
    #: Whether it is the user's default account at the provider: what `Client.token` without
    #: `account` gets.
    default: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Connection:
        return cls(
            id=str(d["id"]),
            subject=str(d.get("subject", "")),
            provider=str(d.get("provider", "")),
            status=str(d.get("status", "")),
            scopes=_str_list(d.get("scopes")),
            has_refresh_token=bool(d.get("has_refresh_token", False)),
            account_label=_opt_str(d.get("account_label")),
            expires_at=_opt_str(d.get("expires_at")),
            last_refresh_at=_opt_str(d.get("last_refresh_at")),
            last_error=_opt_str(d.get("last_error")),
            created_at=str(d.get("created_at", "")),
            updated_at=str(d.get("updated_at", "")),
            account=_opt_account(d.get("account")),
            default=d.get("default") is True,
        )


@dataclass(frozen=True)
class Revocation:
    """What revoking a connection did (`RevocationReport`)."""

    connection_id: str
    #: What happened to the refresh token at the provider (e.g. `revoked`).
    refresh_token: str
    access_token: str
    tokens_deleted: bool
    message: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Revocation:
        return cls(
            connection_id=str(d["connection_id"]),
            refresh_token=str(d.get("refresh_token", "")),
            access_token=str(d.get("access_token", "")),
            tokens_deleted=bool(d.get("tokens_deleted", False)),
            message=str(d.get("message", "")),
        )


@dataclass(frozen=True)
class EventData:
    client_id: str
    subject: str
    provider: str
    elicitation_id: str | None
    connection_id: str | None
    status: str | None
    #: Which account the connection is: on connection events and a completed elicitation's.
    account: Account | None = None


@dataclass(frozen=True)
class Event:
    """An mcp-connect event (`EventBody`), as webhooks and `GET /v1/events` carry it."""

    #: `elicitation.completed`, `elicitation.declined`, `elicitation.failed`,
    #: `connection.needs_reauth` or `connection.revoked`.
    type: str
    timestamp: str
    data: EventData

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Event:
        data = d["data"]
        if not isinstance(data, dict):
            raise ValueError("`data` is not an object")
        return cls(
            type=str(d["type"]),
            timestamp=str(d["timestamp"]),
            data=EventData(
                client_id=str(data["client_id"]),
                subject=str(data["subject"]),
                provider=str(data["provider"]),
                elicitation_id=_opt_str(data.get("elicitation_id")),
                connection_id=_opt_str(data.get("connection_id")),
                status=_opt_str(data.get("status")),
                account=_opt_account(data.get("account")),
            ),
        )


@dataclass(frozen=True)
class StreamedEvent:
    """One message of `GET /v1/events`; `id` is the sequence number to resume after."""

    id: int
    event: Event
