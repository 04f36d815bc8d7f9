"""Verifying mcp-connect's webhooks (Standard Webhooks), exactly as the service signs them
(src/signals/events.rs, `sign`): `webhook-signature: v1,<base64 HMAC-SHA256 of
"{webhook-id}.{webhook-timestamp}.{body}">` under the decoded bytes of the client's `whsec_`
secret. The header may carry several space-separated signatures (key rotation); any `v1` match
is enough. Timestamps more than five minutes away from now are refused (replays).

    verifier = Verifier(os.environ["WEBHOOK_SECRET"])
    event = verifier.verify(request.headers, await request.body())   # raises WebhookError
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping

from ._models import Event

#: How far a webhook's timestamp may be from now, either way.
TOLERANCE_SECONDS = 5 * 60


class WebhookError(Exception):
    """The webhook is not one mcp-connect sent with this secret (or not a recent one)."""


class Verifier:
    """Checks webhook signatures with one client's secret (`whsec_` + base64)."""

    def __init__(self, secret: str) -> None:
        if not secret.startswith("whsec_"):
            raise WebhookError("the webhook secret must be `whsec_` followed by base64")
        try:
            key = base64.b64decode(secret[len("whsec_") :].strip(), validate=True)
        except (binascii.Error, ValueError) as e:
            raise WebhookError("the webhook secret must be `whsec_` followed by base64") from e
        if not key:
            raise WebhookError("the webhook secret must be `whsec_` followed by base64")
        self._key = key

    def __repr__(self) -> str:
        return "Verifier([redacted])"

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: int | None = None) -> Event:
        """Verifies a request as received (its headers and the raw body bytes, before any JSON
        parsing) and returns the event."""
        lower = {k.lower(): v for k, v in headers.items()}

        def header(name: str) -> str:
            v = lower.get(name)
            if v is None:
                raise WebhookError(f"the {name} header is missing")
            return v

        self.verify_signature(
            header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"), body, now=now
        )
        try:
            return Event.from_json(json.loads(body))
        except (ValueError, KeyError, TypeError) as e:
            raise WebhookError(f"the body is not an mcp-connect event: {e}") from e

    def verify_signature(
        self, webhook_id: str, timestamp: str, signatures: str, body: bytes, *, now: int | None = None
    ) -> None:
        """The signature and freshness check alone (for other HTTP stacks, and tests)."""
        try:
            ts = int(timestamp.strip())
        except ValueError as e:
            raise WebhookError("the webhook-timestamp header is not a Unix time in seconds") from e
        current = int(time.time()) if now is None else now
        if abs(current - ts) > TOLERANCE_SECONDS:
            raise WebhookError("the webhook is too old or too far in the future")
        expected = self.sign(webhook_id, ts, body)
        for candidate in signatures.split(" "):
            if not candidate.startswith("v1,"):
                continue
            try:
                sig = base64.b64decode(candidate[3:], validate=True)
            except (binascii.Error, ValueError):
                continue
            if hmac.compare_digest(sig, expected):
                return
        raise WebhookError("no signature matches: the body or headers were altered, or the secret is wrong")

    def sign(self, webhook_id: str, timestamp: int, body: bytes) -> bytes:
        """The raw HMAC the service sends (base64 after `v1,`)."""
        return hmac.new(self._key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
