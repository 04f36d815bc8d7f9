from __future__ import annotations

from typing import Any

from ._models import Elicitation

#: `code` of a ConnectError raised when mcp-connect could not be reached or answered something
#: that is not JSON (no HTTP status, or a proxy's page).
TRANSPORT_ERROR = "transport_error"
UNEXPECTED_RESPONSE = "unexpected_response"


class ConnectError(Exception):
    """Every failure of a call: the API's stable `code` (`not_connected`,
    `authorization_required`, `invalid_request_state`, `rate_limited`, ...), its message, the HTTP
    status, and what some codes carry (the ready `elicitation` of `authorization_required` /
    `reauthorization_required`, `reason`, `elicitation_id`, `retry_after`).

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

    @classmethod
    def from_body(cls, status: int, body: Any, retry_after: float | None = None) -> ConnectError:
        if not isinstance(body, dict) or not isinstance(body.get("error"), str):
            text = str(body)[:200]
            return cls(UNEXPECTED_RESPONSE, text, status, retry_after=retry_after)
        el = body.get("elicitation")
        return cls(
            body["error"],
            str(body.get("message", "")),
            status,
            elicitation=Elicitation.from_json(el) if isinstance(el, dict) else None,
            reason=body.get("reason") if isinstance(body.get("reason"), str) else None,
            elicitation_id=body.get("elicitation_id") if isinstance(body.get("elicitation_id"), str) else None,
            retry_after=retry_after,
            body=body,
        )

    @property
    def needs_authorization(self) -> bool:
        """`authorization_required` or `reauthorization_required`: the user must (re)connect."""
        return self.code in ("authorization_required", "reauthorization_required")

    @property
    def is_declined(self) -> bool:
        """The user declined the awaited elicitation and nothing is connected."""
        return self.code == "authorization_declined"
