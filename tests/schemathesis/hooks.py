"""Schemathesis hooks for tests/schemathesis/run.sh (loaded through SCHEMATHESIS_HOOKS).

They bound the test run, not the product:
- long polls (`wait` on GET /v1/elicitations/{id}, `wait_seconds` on POST /v1/tokens) of 2 to 60
  seconds become 1 second, so a run that finds a pending elicitation does not sit out up to 60 s
  per request (values over 60 are left alone: the service refuses them at once);
- in positive (schema-valid) cases, a generated `request_state` is dropped: it is a sealed value
  that only this service issues, so any made-up one is refused with 400 `invalid_request_state`
  by design (the document says so). Negative cases keep it;
- in positive cases, every other generated `provider` name becomes the demo's provider
  (`sandbox`), so requests reach past "no such provider" into elicitations and token look-ups;
- in positive cases, a generated `dpop.htu` that is not a URL an HTTP client could send a
  request to becomes one: the document says "an absolute http(s) URL" (pattern
  `^https?://`), which JSON Schema cannot narrow to what parses (`http://[` matches both), and
  the service refuses the rest with 400 `invalid_request` by design. Negative cases keep it.
"""

import re

import schemathesis
from schemathesis import GenerationMode

MAX_WAIT = 1
LONGEST = 60
DEMO_PROVIDER = "sandbox"
# What certainly parses as an absolute URL: letters-first host labels, an optional short port,
# plain path segments.
SENDABLE_URL = re.compile(r"^https?://[a-z][a-z0-9]*(\.[a-z][a-z0-9]*)*(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~-]*)*$")
SOME_MCP_SERVER = "https://mcp.example.com/mcp"


def _bounded(value):
    """The wait to send instead of `value`, or None to leave it as generated."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return str(MAX_WAIT) if MAX_WAIT < number <= LONGEST else None
    if isinstance(value, (int, float)) and MAX_WAIT < value <= LONGEST:
        return MAX_WAIT
    return None


@schemathesis.hook
def before_call(ctx, case, kwargs):
    if isinstance(case.query, dict) and _bounded(case.query.get("wait")) is not None:
        case.query["wait"] = _bounded(case.query["wait"])
    if isinstance(case.body, dict):
        if _bounded(case.body.get("wait_seconds")) is not None:
            case.body["wait_seconds"] = _bounded(case.body["wait_seconds"])
        mode = getattr(getattr(case.meta, "generation", None), "mode", None)
        if mode == GenerationMode.POSITIVE:
            if isinstance(case.body.get("request_state"), str):
                case.body["request_state"] = None
            dpop = case.body.get("dpop")
            if isinstance(dpop, dict) and isinstance(dpop.get("htu"), str):
                if not SENDABLE_URL.match(dpop["htu"]):
                    dpop["htu"] = SOME_MCP_SERVER
            provider = case.body.get("provider")
            if isinstance(provider, str) and len(provider) % 2 == 0:
                case.body["provider"] = DEMO_PROVIDER
