from __future__ import annotations

from typing import Any

from ._models import AccountChoice, Elicitation

#: `code` of a ConnectError raised when mcp-connect could not be reached or answered something
#: that is not JSON (no HTTP status, or a proxy's page).
TRANSPORT_ERROR = "transport_error"
UNEXPECTED_RESPONSE = "unexpected_response"


class ConnectError(Exception):
    """Every failure of a call: the API's stable `code` (`not_connected`,
    `authorization_required`, `invalid_request_state`, `rate_limited`, ...), its message, the HTTP
    status, and what some codes carry (the ready `elicitation` of `authorization_required` /
    `reauthorization_required`, `reason`, `elicitation_id`, `retry_after`, the
    `missing_scopes` of `insufficient_scope`, the `accounts` of `account_selection_required`).

    Transport failures have `code == "transport_error"` and `status is None`."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        *,
        elicitation: Elicitation | None = None,
        reason: str | None = None,
        elicitation_id: str | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
        missing_scopes: tuple[str, ...] = (),
        accounts: tuple[AccountChoice, ...] = (),
    ) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"mcp-connect answered {status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.elicitation = elicitation
        self.reason = reason
        self.elicitation_id = elicitation_id
        self.retry_after = retry_after
        self.body = body or {}
        #: `insufficient_scope`: the scopes the call needs that the grant does not hold.
        self.missing_scopes = missing_scopes
        #: `account_selection_required`: the user's accounts at the provider, one of which to
        #: name as `account`.
        self.accounts = accounts

    @classmethod
    def from_body(cls, status: int, body: Any, retry_after: float | None = None) -> ConnectError:
        if not isinstance(body, dict) or not isinstance(body.get("error"), str):
            text = str(body)[:200]
            return cls(UNEXPECTED_RESPONSE, text, status, retry_after=retry_after)
        el = body.get("elicitation")
        missing = body.get("missing_scopes")
        accounts = body.get("accounts")
        return cls(
            body["error"],
            str(body.get("message", "")),
            status,
            elicitation=Elicitation.from_json(el) if isinstance(el, dict) else None,
            reason=body.get("reason") if isinstance(body.get("reason"), str) else None,
            elicitation_id=body.get("elicitation_id") if isinstance(body.get("elicitation_id"), str) else None,
            retry_after=retry_after,
            body=body,
            missing_scopes=tuple(s for s in missing if isinstance(s, str)) if isinstance(missing, list) else (),
            accounts=tuple(AccountChoice.from_json(a) for a in accounts if isinstance(a, dict))
            if isinstance(accounts, list)
            else (),
        )

    @property
    def needs_authorization(self) -> bool:
        """`authorization_required` or `reauthorization_required`: the user must (re)connect."""
        return self.code in ("authorization_required", "reauthorization_required")

    @property
    def is_declined(self) -> bool:
        """The user declined the awaited elicitation and nothing is connected."""
        return self.code == "authorization_declined"

    @property
    def needs_account_selection(self) -> bool:
        """`account_selection_required`: the user holds several accounts at the provider and this
        client must name one (`account=`, e.g. the `id` of one of `accounts`)."""
        return self.code == "account_selection_required"

    @property
    def is_insufficient_scope(self) -> bool:
        """`insufficient_scope`: the grant lacks `missing_scopes` (asked without `elicit`; with
        it, the answer is `authorization_required` with an elicitation for the upgrade)."""
        return self.code == "insufficient_scope"
