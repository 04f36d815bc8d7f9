"""The proxy in mcp_connect_client against a stub transport: what a call sends (path as given,
the user, the account, the caller's headers and body) and how answers are told apart (the
provider's, whatever the status, against mcp-connect's own `MCP-Connect-Error`). Needs no demo;
test_client.py makes the same calls through the real service.

    clients/python/.venv/bin/python -m unittest discover -s clients/python/tests -p 'test_proxy.py' -v
"""

from __future__ import annotations

import json
import unittest
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx2 as httpx
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import InputRequiredResult

from mcp_connect_client import (
    MCP_2026_07_28,
    TOKEN_REFRESHED_HEADER,
    TRANSPORT_ERROR,
    Client,
    ConnectError,
    ProxyResponse,
)
from mcp_connect_client.mcp_sdk import NotConnected, proxy_or_input_required

NOT_CONNECTED = {"error": "not_connected", "message": "kate has not connected sandbox"}


def stub(*answers: httpx.Response | Exception) -> tuple[Client, list[httpx.Request]]:
    """A client whose calls get `answers` in turn; the requests it sent are kept (bodies read)."""
    sent: list[httpx.Request] = []
    queue = list(answers)

    async def handle(req: httpx.Request) -> httpx.Response:
        await req.aread()
        sent.append(req)
        a = queue.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    return Client("http://connect.test/", "the-api-key", http=httpx.AsyncClient(transport=httpx.MockTransport(handle))), sent


def own(status: int, body: dict[str, Any] | None, code: str | None = None) -> httpx.Response:
    """An answer of mcp-connect itself: `MCP-Connect-Error: <code>`."""
    code = code or (body or {}).get("error", "")
    if body is None:
        return httpx.Response(status, headers={"mcp-connect-error": code})
    return httpx.Response(status, headers={"mcp-connect-error": code}, json=body)


class ProxyRequestTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_call_carries_the_api_key_the_user_and_the_account_as_headers(self) -> None:
        c, sent = stub(httpx.Response(200, json={"sub": "kate"}), httpx.Response(200, json={}))
        await c.proxy("sandbox", "whoami", subject_token="mcp-token-of-kate", account="Work")
        req = sent[-1]
        self.assertEqual((req.method, req.url.raw_path), ("GET", b"/v1/proxy/sandbox/whoami"))
        self.assertEqual(req.headers["authorization"], "Bearer the-api-key")
        self.assertEqual((req.headers["subject-token"], req.headers["connect-account"]), ("mcp-token-of-kate", "Work"))
        self.assertNotIn("connect-subject", req.headers)
        await c.proxy("sandbox", "/whoami", subject="kate")
        req = sent[-1]
        self.assertEqual((req.url.raw_path, req.headers["connect-subject"]), (b"/v1/proxy/sandbox/whoami", "kate"))
        self.assertNotIn("subject-token", req.headers)
        self.assertNotIn("connect-account", req.headers)

    async def test_paths_go_as_given_and_dot_segments_are_not_resolved_away(self) -> None:
        cases = {
            "repos/o/r/issues?state=open": b"/v1/proxy/github/repos/o/r/issues?state=open",
            # What mcp-connect refuses reaches it: these are its 400s, not ours to repair.
            "//user": b"/v1/proxy/github//user",
            "a%2Fb": b"/v1/proxy/github/a%2Fb",
            "a\\b": b"/v1/proxy/github/a\\b",
            # Sent as typed, an HTTP library resolves these (`../../connections` would be
            # mcp-connect's own /v1/connections); encoded, mcp-connect sees and refuses them.
            "../../connections": b"/v1/proxy/github/%2E%2E/%2E%2E/connections",
            "a/./b/..": b"/v1/proxy/github/a/%2E/b/%2E%2E",
            # Only in the path: a query's dots are data.
            "search?q=../..": b"/v1/proxy/github/search?q=../..",
            # `#` would cut the rest off.
            "files/a#b": b"/v1/proxy/github/files/a%23b",
        }
        c, sent = stub(*[httpx.Response(200) for _ in cases])
        for path, target in cases.items():
            await c.proxy("github", path, subject="kate")
            self.assertEqual(sent[-1].url.raw_path, target, path)

    async def test_params_follow_the_path_s_query_and_the_method_and_body_go_as_given(self) -> None:
        c, sent = stub(httpx.Response(201), httpx.Response(200), httpx.Response(204))
        await c.proxy("slack", "chat.postMessage?x=1", method="post", subject="kate",
                      params={"a": "b c", "many": ["1", "2"]}, json={"channel": "C1", "text": "hi"})
        req = sent[-1]
        self.assertEqual(req.method, "POST")
        self.assertEqual(req.url.raw_path, b"/v1/proxy/slack/chat.postMessage?x=1&a=b%20c&many=1&many=2")
        self.assertEqual((json.loads(req.content), req.headers["content-type"]), ({"channel": "C1", "text": "hi"}, "application/json"))
        await c.proxy("slack", "files", method="PUT", subject="kate", params=[("k", "v")], body=b"\x00raw",
                      headers={"Content-Type": "application/octet-stream"})
        self.assertEqual((sent[-1].url.raw_path, sent[-1].content), (b"/v1/proxy/slack/files?k=v", b"\x00raw"))
        self.assertEqual(sent[-1].headers["content-type"], "application/octet-stream")

        async def chunks() -> AsyncIterator[bytes]:
            yield b"one,"
            yield b"two"

        await c.proxy("slack", "upload", method="POST", subject="kate", body=chunks())
        self.assertEqual(sent[-1].content, b"one,two")
        with self.assertRaises(ValueError):
            await c.proxy("slack", "x", subject="kate", body=b"a", json={"b": 1})

    async def test_the_caller_s_headers_reach_the_provider_but_never_speak_for_mcp_connect(self) -> None:
        c, sent = stub(httpx.Response(200))
        await c.proxy("github", "user", subject_token="t", headers={
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            # From tool input, these would name another user or key; they are not sent.
            "Authorization": "Bearer someone-else",
            "Connect-Subject": "mallory",
            "connect-account": "theirs",
            "Subject-Token": "another-token",
        })
        h = sent[-1].headers
        self.assertEqual((h["accept"], h["x-github-api-version"]), ("application/vnd.github+json", "2022-11-28"))
        self.assertEqual(h.get_list("authorization"), ["Bearer the-api-key"])
        self.assertEqual(h.get_list("subject-token"), ["t"])
        self.assertNotIn("connect-subject", h)
        self.assertNotIn("connect-account", h)


class ProxyAnswerTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_provider_s_answer_is_returned_whatever_its_status(self) -> None:
        c, _ = stub(
            httpx.Response(200, json={"sub": "kate"}, headers={"x-ratelimit-remaining": "41"}),
            httpx.Response(404, json={"message": "Not Found"}),
            httpx.Response(401, headers={"www-authenticate": "Bearer"}),
        )
        ok = await c.proxy("github", "user", subject="kate")
        self.assertIsInstance(ok, ProxyResponse)
        self.assertEqual((ok.status_code, ok.is_success, ok.json(), ok.headers["x-ratelimit-remaining"]), (200, True, {"sub": "kate"}, "41"))
        self.assertFalse(ok.token_refreshed)
        # A provider's 404 (no MCP-Connect-Error) is its answer, not "not connected".
        missing = await c.proxy("github", "nope", subject="kate")
        self.assertEqual((missing.status_code, missing.is_success, missing.json()), (404, False, {"message": "Not Found"}))
        refused = await c.proxy("github", "user", subject="kate")
        self.assertEqual((refused.status_code, refused.token_refreshed), (401, False))
        self.assertEqual(refused.response.status_code, 401)

    async def test_token_refreshed_says_the_call_may_be_sent_again(self) -> None:
        c, _ = stub(httpx.Response(401, headers={TOKEN_REFRESHED_HEADER: "true"}, text="refused"))
        answer = await c.proxy("github", "upload", method="POST", subject="kate", body=b"x" * 70_000)
        self.assertEqual((answer.status_code, answer.token_refreshed, answer.text), (401, True, "refused"))
        self.assertIn("token_refreshed=True", repr(answer))

    async def test_mcp_connect_s_own_errors_are_raised_with_their_code(self) -> None:
        elicitation = {"id": "e1", "url": "http://connect.test/connect/e1", "status": "pending", "mcp": {}}
        c, sent = stub(
            own(404, NOT_CONNECTED),
            own(400, {"error": "invalid_request", "message": "the path has a . or .. segment"}),
            own(409, {"error": "reauthorization_required", "message": "m", "elicitation": elicitation}),
            own(429, {"error": "rate_limited", "message": "slow down"}, None),
            own(404, None, "not_connected"),
            own(502, None, ""),
        )
        expect = [
            ("not_connected", 404),
            ("invalid_request", 400),
            ("reauthorization_required", 409),
            ("rate_limited", 429),
            # No body (a HEAD, say): the header still names the code.
            ("not_connected", 404),
            ("unexpected_response", 502),
        ]
        for code, status in expect:
            with self.assertRaises(ConnectError) as cm:
                await c.proxy("sandbox", "whoami", subject="kate")
            self.assertEqual((cm.exception.code, cm.exception.status), (code, status))
            if code == "reauthorization_required":
                self.assertTrue(cm.exception.needs_authorization)
                self.assertEqual(getattr(cm.exception.elicitation, "id", None), "e1")
        self.assertEqual(len(sent), len(expect), "nothing is sent twice, not even after a 429")

    async def test_unreachable_is_a_transport_error(self) -> None:
        c, sent = stub(httpx.ConnectError("refused"), httpx.Response(200))
        with self.assertRaises(ConnectError) as cm:
            await c.proxy("sandbox", "whoami", subject="kate")
        self.assertEqual((cm.exception.code, cm.exception.status, len(sent)), (TRANSPORT_ERROR, None, 1))

    async def test_proxy_stream_hands_out_the_body_as_it_comes(self) -> None:
        async def body() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"chunk{i};".encode()

        c, _ = stub(httpx.Response(200, content=body()), own(404, NOT_CONNECTED))
        got = []
        async with c.proxy_stream("sandbox", "big", subject="kate") as answer:
            self.assertEqual(answer.status_code, 200)
            async for chunk in answer.aiter_bytes():
                got.append(chunk)
        self.assertEqual(b"".join(got), b"chunk0;chunk1;chunk2;")
        with self.assertRaises(ConnectError) as cm:
            async with c.proxy_stream("sandbox", "big", subject="kate"):
                self.fail("an error of mcp-connect is raised before the block")
        self.assertEqual(cm.exception.code, "not_connected")


class ProxyHelperTest(unittest.IsolatedAsyncioTestCase):
    """proxy_or_input_required with a stand-in for the SDK's Context (test_client.py runs it in
    an MCPServer against the demo)."""

    def ctx(self, action: str | None = None, state: str | None = None) -> Any:
        return SimpleNamespace(
            input_responses=None if action is None else {"connect": SimpleNamespace(action=action)},
            request_state=state,
        )

    def elicitation(self, status: str = "pending", subject: str = "kate", provider: str = "sandbox") -> dict[str, Any]:
        return {"id": "el1", "url": "http://connect.test/connect/el1", "status": status, "subject": subject,
                "provider": provider, "mcp": {MCP_2026_07_28: {"method": "elicitation/create", "params": {
                    "mode": "url", "url": "http://connect.test/connect/el1", "message": "Connect Sandbox"}}}}

    async def test_connected_the_answer_comes_straight_back(self) -> None:
        c, sent = stub(httpx.Response(200, json={"sub": "kate"}))
        got = await proxy_or_input_required(c, self.ctx(), "sandbox", "whoami", subject="kate", subject_token="t")
        assert isinstance(got, ProxyResponse)
        self.assertEqual(got.json(), {"sub": "kate"})
        self.assertEqual([r.url.path for r in sent], ["/v1/proxy/sandbox/whoami"])

    async def test_not_connected_asks_with_an_elicitation_and_never_fetches_a_token(self) -> None:
        c, sent = stub(own(404, NOT_CONNECTED), httpx.Response(201, json=self.elicitation()))
        got = await proxy_or_input_required(c, self.ctx(), "sandbox", "whoami", subject="kate", account="Work")
        assert isinstance(got, InputRequiredResult)
        self.assertEqual(got.request_state, "p1:el1")
        self.assertEqual([(r.method, r.url.path) for r in sent], [("GET", "/v1/proxy/sandbox/whoami"), ("POST", "/v1/elicitations")])
        self.assertEqual(json.loads(sent[1].content), {"provider": "sandbox", "subject": "kate", "add_account": True})

    async def test_the_retry_waits_for_the_elicitation_then_calls_again(self) -> None:
        c, sent = stub(httpx.Response(200, json=self.elicitation("completed")), httpx.Response(200, json={"sub": "kate"}))
        got = await proxy_or_input_required(c, self.ctx("accept", "p1:el1"), "sandbox", "whoami", subject="kate", wait_seconds=7)
        assert isinstance(got, ProxyResponse)
        self.assertEqual(got.json(), {"sub": "kate"})
        self.assertEqual([(r.url.path, r.url.query) for r in sent], [("/v1/elicitations/el1", b"wait=7"), ("/v1/proxy/sandbox/whoami", b"")])

    async def test_decline_cancel_and_too_many_rounds_end_with_not_connected(self) -> None:
        c, _ = stub()
        for action in ("decline", "cancel"):
            with self.assertRaises(NotConnected) as cm:
                await proxy_or_input_required(c, self.ctx(action, "p1:el1"), "sandbox", "whoami", subject="kate")
            self.assertEqual(cm.exception.why, action)
        c, _ = stub(httpx.Response(200, json=self.elicitation("declined")))
        with self.assertRaises(NotConnected) as cm:
            await proxy_or_input_required(c, self.ctx("accept", "p1:el1"), "sandbox", "whoami", subject="kate")
        self.assertEqual(cm.exception.why, "declined")
        c, sent = stub(httpx.Response(200, json=self.elicitation()), own(404, NOT_CONNECTED))
        with self.assertRaises(NotConnected) as cm:
            await proxy_or_input_required(c, self.ctx("accept", "p3:el1"), "sandbox", "whoami", subject="kate")
        self.assertEqual((cm.exception.why, len(sent)), ("rounds", 2))

    async def test_a_state_for_another_user_or_not_ours_is_refused(self) -> None:
        c, sent = stub(httpx.Response(200, json=self.elicitation("completed", subject="erin")))
        with self.assertRaises(ToolError):
            await proxy_or_input_required(c, self.ctx("accept", "p1:el1"), "sandbox", "whoami", subject="kate")
        self.assertEqual(len(sent), 1, "no call for kate on erin's state")
        for state in ("r1:v1.sealed-by-mcp-connect", "p1:", "garbage"):
            with self.assertRaises(ToolError):
                await proxy_or_input_required(c, self.ctx("accept", state), "sandbox", "whoami", subject="kate")

    async def test_other_refusals_reach_the_tool(self) -> None:
        c, _ = stub(own(403, {"error": "forbidden", "message": "not on the allow-list"}))
        with self.assertRaises(ConnectError) as cm:
            await proxy_or_input_required(c, self.ctx(), "sandbox", "admin", subject="kate")
        self.assertEqual(cm.exception.code, "forbidden")


if __name__ == "__main__":
    unittest.main()
