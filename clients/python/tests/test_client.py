"""mcp_connect_client against the real `mcp-connect demo` (MCP_CONNECT_BIN, default
target/debug/mcp-connect), and its MCP helper with the official MCP Python SDK client.

    python3 -m venv clients/python/.venv && clients/python/.venv/bin/pip install 'clients/python[mcp]'
    clients/python/.venv/bin/python -m unittest discover -s clients/python/tests -v
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import unittest
from typing import Any

import httpx2 as httpx
from mcp import Client as McpClient
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitResult, InputRequiredResult

import demo
from mcp_connect_client import (
    MCP_2025_11_25,
    MCP_2026_07_28,
    TRANSPORT_ERROR,
    Account,
    Client,
    ConnectError,
    ProxyResponse,
    Verifier,
    WebhookError,
)
from mcp_connect_client.mcp_sdk import (
    DEFAULT_MAX_ROUNDS,
    NotConnected,
    proxy_or_input_required,
    token_or_input_required,
)

DEMO: demo.Demo


def setUpModule() -> None:
    global DEMO
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    # The SDK logs each anticipated tool failure (the NotConnected answers the tests expect).
    logging.getLogger("mcp").setLevel(logging.ERROR)
    DEMO = demo.start()


def tearDownModule() -> None:
    DEMO.stop()


def connect() -> Client:
    return Client(DEMO.base, DEMO.api_key)


async def whoami(access_token: str) -> str:
    async with httpx.AsyncClient() as h:
        r = await h.get(f"{DEMO.base}/dev/sandbox/api/whoami", headers={"authorization": f"Bearer {access_token}"})
        r.raise_for_status()
        return str(r.json()["sub"])


class ApiTest(unittest.IsolatedAsyncioTestCase):
    async def test_token_elicitation_wait_connections_revoke_and_events(self) -> None:
        async with connect() as c:
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="alice")
            self.assertEqual((cm.exception.code, cm.exception.status), ("not_connected", 404))
            self.assertIsNone(cm.exception.elicitation)

            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="alice", elicit=True)
            e = cm.exception
            self.assertEqual((e.code, e.status), ("authorization_required", 409))
            self.assertTrue(e.needs_authorization)
            el = e.elicitation
            assert el is not None
            self.assertTrue(el.url.startswith(f"{DEMO.base}/connect/"), el.url)
            self.assertEqual((el.subject, el.provider, el.status), ("alice", "sandbox", "pending"))
            self.assertIn("Sandbox", el.message)
            self.assertEqual(el.input_request()["params"]["url"], el.url)
            irr = el.input_required_result("connect")
            self.assertEqual(irr["resultType"], "input_required")
            self.assertEqual(irr["inputRequests"]["connect"], el.mcp[MCP_2026_07_28])
            self.assertEqual(irr["requestState"], el.request_state)
            self.assertEqual(el.create_params()["elicitationId"], el.id)
            self.assertEqual(el.url_elicitation_required_error()["code"], -32042)

            created = await c.create_elicitation("sandbox", subject="alice")
            self.assertEqual(created.url.split("/connect/")[0], DEMO.base)
            self.assertTrue((await c.get_elicitation(el.id)).is_pending)
            started = time.monotonic()
            still = await c.wait_elicitation(el.id, 1)
            self.assertEqual(still.status, "pending")
            self.assertGreaterEqual(time.monotonic() - started, 0.9, "the wait held the request")

            user = demo.later(0.5, demo.user_opens, el.url, "alice")
            done = await c.wait_elicitation(el.id, 30)
            user.join()
            self.assertEqual(done.status, "completed")
            self.assertIsNotNone(done.connection_id)

            token = await c.token("sandbox", subject="alice", request_state=el.request_state, wait_seconds=5)
            self.assertNotIn(token.access_token, repr(token), "the repr hides the token")
            self.assertEqual(token.connection_id, done.connection_id)
            self.assertEqual(await whoami(token.access_token), "alice")
            self.assertEqual(
                (await c.token("sandbox", subject="alice", scopes=["api"])).connection_id, token.connection_id
            )
            # Proof of subject: alice's MCP access token alone names her.
            proved = await c.token("sandbox", subject_token=demo.mcp_token(DEMO.base, "alice"))
            self.assertEqual(proved.connection_id, token.connection_id)

            [conn] = await c.connections("alice")
            self.assertEqual((conn.id, conn.subject, conn.provider, conn.status), (token.connection_id, "alice", "sandbox", "active"))
            self.assertTrue(conn.has_refresh_token, "the sandbox hands out refresh tokens")
            refreshed = await c.token("sandbox", subject="alice", force_refresh=True)
            self.assertNotEqual(refreshed.access_token, token.access_token, "force_refresh refreshed")
            self.assertEqual(await whoami(refreshed.access_token), "alice")
            self.assertEqual(
                [x.id for x in await c.connections(subject_token=demo.mcp_token(DEMO.base, "alice"))], [conn.id]
            )

            gone = await c.revoke(conn.id)
            self.assertEqual(gone.connection_id, conn.id)
            self.assertTrue(gone.tokens_deleted)
            self.assertEqual([x for x in await c.connections("alice") if x.status == "active"], [])
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="alice")
            self.assertEqual(cm.exception.code, "not_connected")

            # The completion signal for this client, replayed from the start of the stream.
            seen: list[tuple[str, str | None]] = []

            async def read() -> None:
                async for m in c.events(last_event_id=0):
                    seen.append((m.event.type, m.event.data.elicitation_id or m.event.data.connection_id))
                    if m.event.type == "connection.revoked" and m.event.data.connection_id == conn.id:
                        return

            await asyncio.wait_for(read(), 15)
            self.assertIn(("elicitation.completed", el.id), seen)

    async def test_a_second_account_is_added_listed_named_and_reported(self) -> None:
        async with connect() as c:
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="kate", elicit=True)
            el = cm.exception.elicitation
            assert el is not None
            await asyncio.to_thread(demo.user_opens, el.url, "kate")
            first = await c.token("sandbox", subject="kate")
            self.assertEqual(first.account, Account("kate", "kate"))

            # A scope the grant lacks, asked without elicit: what is missing, not a connect URL.
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="kate", scopes=["api", "admin"])
            e = cm.exception
            self.assertEqual((e.code, e.status, e.missing_scopes), ("insufficient_scope", 403, ("admin",)))
            self.assertTrue(e.is_insufficient_scope)
            self.assertIsNone(e.elicitation)

            added = await c.create_elicitation("sandbox", subject="kate", add_account=True)
            self.assertNotEqual(added.id, el.id)
            await asyncio.to_thread(demo.user_opens, added.url, "kate", "continue", "kate-work")
            conns = {x.account.id if x.account else None: x for x in await c.connections("kate")}
            self.assertEqual(set(conns), {"kate", "kate-work"})
            self.assertEqual((conns["kate"].default, conns["kate-work"].default), (True, False))
            work = conns["kate-work"]
            self.assertEqual((work.account, work.account_label), (Account("kate-work", "kate-work"), "kate-work"))

            # Without `account`: the default one; with it: the one named.
            self.assertEqual((await c.token("sandbox", subject="kate")).connection_id, first.connection_id)
            named = await c.token("sandbox", subject="kate", account="kate-work")
            self.assertEqual((named.connection_id, named.account), (work.id, work.account))
            self.assertEqual(await whoami(named.access_token), "kate-work")
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="kate", account="kate-home")
            self.assertEqual(cm.exception.code, "not_connected")

            async def completed() -> Any:
                async for m in c.events(last_event_id=0):
                    if m.event.data.elicitation_id == added.id:
                        return m.event

            event = await asyncio.wait_for(completed(), 15)
            self.assertEqual((event.type, event.data.account), ("elicitation.completed", work.account))

    async def test_a_user_who_declines_ends_the_wait_with_authorization_declined(self) -> None:
        async with connect() as c:
            el = await c.create_elicitation("sandbox", subject="dora")
            user = demo.later(0.3, demo.user_opens, el.url, "dora", "decline")
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="dora", elicitation_id=el.id, wait_seconds=30)
            user.join()
            self.assertTrue(cm.exception.is_declined, cm.exception)
            self.assertEqual(cm.exception.elicitation_id, el.id)
            self.assertEqual((await c.get_elicitation(el.id)).status, "declined")

    async def test_the_proxy_calls_the_sandbox_for_the_right_user_and_never_shows_the_token(self) -> None:
        async with connect() as c:
            # Not connected: mcp-connect's own answer, raised, however the user is named.
            for who in ({"subject": "pia"}, {"subject_token": demo.mcp_token(DEMO.base, "pia")}):
                with self.assertRaises(ConnectError) as cm:
                    await c.proxy("sandbox", "whoami", **who)
                self.assertEqual((cm.exception.code, cm.exception.status), ("not_connected", 404), who)
            # A HEAD's error has no body: the MCP-Connect-Error header still names it.
            with self.assertRaises(ConnectError) as cm:
                await c.proxy("sandbox", "whoami", method="HEAD", subject="pia")
            self.assertEqual((cm.exception.code, cm.exception.status), ("not_connected", 404))

            el = await c.create_elicitation("sandbox", subject="pia")
            await asyncio.to_thread(demo.user_opens, el.url, "pia")
            await asyncio.to_thread(demo.user_opens, (await c.create_elicitation("sandbox", subject="quin")).url, "quin")
            token = await c.token("sandbox", subject="pia")

            # The MCP access token proves pia; the sandbox answers for her, through mcp-connect.
            answer = await c.proxy("sandbox", "whoami", subject_token=demo.mcp_token(DEMO.base, "pia"))
            self.assertIsInstance(answer, ProxyResponse)
            self.assertEqual((answer.status_code, answer.token_refreshed), (200, False))
            self.assertEqual(answer.json()["sub"], "pia")
            self.assertNotIn(token.access_token, answer.text, "the provider token never reaches the caller")
            for name, value in answer.headers.multi_items():
                self.assertNotIn(token.access_token, value, name)
                self.assertFalse(name.lower().startswith("set-cookie"), name)
            # Another user, another answer; named by `sub`, with the account named too.
            quin = await c.proxy("sandbox", "/whoami", subject="quin", account="quin")
            self.assertEqual((quin.status_code, quin.json()["sub"]), (200, "quin"))
            with self.assertRaises(ConnectError) as cm:
                await c.proxy("sandbox", "whoami", subject="quin", account="quin-elsewhere")
            self.assertEqual(cm.exception.code, "not_connected")

            # The provider's own refusals are its answers, passed back, not raised.
            missing = await c.proxy("sandbox", "no-such-api", subject="pia")
            self.assertEqual((missing.status_code, missing.is_success), (404, False))
            self.assertNotIn("mcp-connect-error", missing.headers)
            wrong_method = await c.proxy("sandbox", "whoami", method="POST", subject="pia", json={"x": 1})
            self.assertEqual(wrong_method.status_code, 405)

            # Paths that could leave the API base are mcp-connect's 400, never repaired on the
            # way: `../../connections` is not this API's /v1/connections.
            for path in ("../../connections", "a/../whoami", "./whoami", "//whoami", "a%2Fb", "%2e%2e/whoami"):
                with self.assertRaises(ConnectError) as cm:
                    await c.proxy("sandbox", path, subject="pia")
                self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_request", 400), path)
            with self.assertRaises(ConnectError) as cm:
                await c.proxy("elsewhere", "whoami", subject="pia")
            self.assertIn(cm.exception.status, (403, 404))

            async with c.proxy_stream("sandbox", "whoami", subject="pia") as streamed:
                body = b"".join([chunk async for chunk in streamed.aiter_bytes()])
            self.assertEqual(json.loads(body)["sub"], "pia")

    async def test_errors_carry_the_api_code_message_and_status(self) -> None:
        async with Client(DEMO.base, "not-the-key") as bad:
            with self.assertRaises(ConnectError) as cm:
                await bad.token("sandbox", subject="alice")
            self.assertEqual((cm.exception.code, cm.exception.status), ("unauthorized", 401))
            self.assertTrue(cm.exception.message)
        async with connect() as c:
            with self.assertRaises(ConnectError) as cm:
                await c.get_elicitation("no-such-elicitation")
            self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject="alice", request_state="v1.forged", wait_seconds=1)
            self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_request_state", 400))
            self.assertEqual(cm.exception.reason, "invalid")
            with self.assertRaises(ConnectError) as cm:
                await c.token("sandbox", subject_token="not-a-token")
            self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_subject_token", 401))
            with self.assertRaises(ConnectError) as cm:
                await c.token("elsewhere", subject="alice")
            self.assertIn(cm.exception.status, (400, 403, 404))
        async with Client("http://127.0.0.1:9", "k", max_retries=0) as nowhere:
            with self.assertRaises(ConnectError) as cm:
                await nowhere.connections("alice")
            self.assertEqual((cm.exception.code, cm.exception.status), (TRANSPORT_ERROR, None))


class RetryTest(unittest.IsolatedAsyncioTestCase):
    """Which calls are sent again, and how often (a stub transport counts them)."""

    def stub(self, answers: list[Any]) -> tuple[Client, list[str]]:
        calls: list[str] = []

        def handle(req: httpx.Request) -> httpx.Response:
            calls.append(f"{req.method} {req.url.path}")
            a = answers.pop(0) if answers else answers_last[0]
            if isinstance(a, Exception):
                raise a
            assert isinstance(a, httpx.Response)
            return a

        answers_last = [answers[-1]]
        return Client("http://connect.test", "k", http=httpx.AsyncClient(transport=httpx.MockTransport(handle))), calls

    async def test_429_with_a_short_retry_after_is_retried_a_bounded_number_of_times(self) -> None:
        limited = httpx.Response(429, headers={"retry-after": "0"}, json={"error": "rate_limited", "message": "slow down"})
        ok = httpx.Response(200, json={"access_token": "t", "token_type": "Bearer", "connection_id": "c"})
        c, calls = self.stub([limited, limited, ok])
        self.assertEqual((await c.token("p", subject="s")).access_token, "t")
        self.assertEqual(len(calls), 3)
        c, calls = self.stub([limited, limited, limited, ok])
        with self.assertRaises(ConnectError) as cm:
            await c.token("p", subject="s")
        self.assertEqual((cm.exception.code, cm.exception.retry_after, len(calls)), ("rate_limited", 0.0, 3))

    async def test_a_long_retry_after_reaches_the_caller_at_once(self) -> None:
        c, calls = self.stub([httpx.Response(429, headers={"retry-after": "120"}, json={"error": "rate_limited", "message": "m"})])
        with self.assertRaises(ConnectError) as cm:
            await c.connections("s")
        self.assertEqual((cm.exception.retry_after, len(calls)), (120.0, 1))

    async def test_transport_failures_are_retried_for_reads_only(self) -> None:
        down = httpx.ConnectError("refused")
        c, calls = self.stub([down, httpx.Response(200, json={"connections": []})])
        self.assertEqual(await c.connections("s"), [])
        self.assertEqual(len(calls), 2)
        for call in ("token", "revoke", "create"):
            c, calls = self.stub([down, httpx.Response(200, json={})])
            with self.assertRaises(ConnectError) as cm:
                if call == "token":
                    await c.token("p", subject="s")
                elif call == "revoke":
                    await c.revoke("conn")
                else:
                    await c.create_elicitation("p", subject="s")
            self.assertEqual((cm.exception.code, len(calls)), (TRANSPORT_ERROR, 1), call)


class WebhookTest(unittest.TestCase):
    # Signed by the service's own `mcp_connect::signals::events::sign` (clients/rust/tests/
    # webhook_vectors.rs checks that it produces each one); the last is an event as it sends them.
    VECTORS = [
        (v["secret"], v["webhook_id"], v["webhook_timestamp"], v["body"].encode(), v["signature"])
        for v in json.loads((demo.ROOT / "clients" / "testdata" / "webhook-vectors.json").read_text())["vectors"]
    ]

    def test_vectors_signed_by_the_service_verify_and_any_change_is_refused(self) -> None:
        self.assertGreaterEqual(len(self.VECTORS), 2)
        for secret, wid, ts, body, sig in self.VECTORS:
            v = Verifier(secret)
            now = int(ts)
            v.verify_signature(wid, ts, sig, body, now=now)
            v.verify_signature(wid, ts, f"v1,bm9wZQ== {sig}", body, now=now)  # rotation: any match
            for bad in [
                (wid, ts, sig, body + b" "),
                ("msg_other", ts, sig, body),
                (wid, str(now + 1), sig, body),
                (wid, ts, sig.replace("v1,", "v2,"), body),
            ]:
                with self.assertRaises(WebhookError):
                    v.verify_signature(*bad, now=now)
            with self.assertRaisesRegex(WebhookError, "too old"):
                v.verify_signature(wid, ts, sig, body, now=now + 301)
            with self.assertRaises(WebhookError):
                Verifier("whsec_" + base64.b64encode(b"another key of 24 bytes!").decode()).verify_signature(
                    wid, ts, sig, body, now=now
                )

    def test_verify_reads_the_headers_and_parses_the_event(self) -> None:
        secret, wid, ts, body, sig = self.VECTORS[-1]
        event = Verifier(secret).verify(
            {"Webhook-Id": wid, "Webhook-Timestamp": ts, "Webhook-Signature": sig}, body, now=int(ts)
        )
        self.assertEqual((event.type, event.data.subject, event.data.provider), ("elicitation.completed", "alice", "sandbox"))
        self.assertEqual(event.data.account, Account("alice-work", "alice-work"))
        with self.assertRaisesRegex(WebhookError, "webhook-signature"):
            Verifier(secret).verify({"webhook-id": wid, "webhook-timestamp": ts}, body, now=int(ts))

    def test_secrets_must_be_whsec_base64(self) -> None:
        for bad in ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!"]:
            with self.assertRaises(WebhookError):
                Verifier(bad)
        self.assertNotIn("MfKQ", repr(Verifier("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")))


class McpHelperTest(unittest.IsolatedAsyncioTestCase):
    """token_or_input_required in a tool of an MCPServer, called by the official SDK client."""

    def server(self, subject: str, **kw: Any) -> MCPServer:
        mcp = MCPServer("helper-test")
        conn = connect()
        self.addAsyncCleanup(conn.aclose)

        @mcp.tool()
        async def whoami_tool(ctx: Context) -> str | InputRequiredResult:
            got = await token_or_input_required(conn, ctx, "sandbox", subject=subject, **kw)
            if isinstance(got, InputRequiredResult):
                return got
            return f"sandbox says you are {await whoami(got.access_token)}"

        return mcp

    async def call(self, mcp: MCPServer, answer: Any) -> tuple[Any, list[dict[str, Any]]]:
        asked: list[dict[str, Any]] = []

        async def on_elicit(context: Any, params: Any) -> ElicitResult:
            asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
            return ElicitResult(action=answer(params))

        async with McpClient(mcp, elicitation_callback=on_elicit) as client:
            self.assertEqual(client.protocol_version, MCP_2026_07_28)
            result = await client.call_tool("whoami_tool", {})
        return result, asked

    @staticmethod
    def text(result: Any) -> str:
        return "".join(getattr(c, "text", "") for c in result.content)

    async def test_input_required_the_user_connects_and_the_retry_returns_provider_data(self) -> None:
        users: list[Any] = []

        def accept(params: Any) -> str:
            # accept = the user agreed to open the URL; they finish while the retry waits.
            users.append(demo.later(0.5, demo.user_opens, params.url, "erin"))
            return "accept"

        result, asked = await self.call(self.server("erin"), accept)
        for u in users:
            u.join()
        self.assertEqual(self.text(result), "sandbox says you are erin")
        self.assertFalse(result.is_error)
        self.assertEqual(len(asked), 1)
        self.assertEqual(asked[0]["mode"], "url")
        self.assertTrue(asked[0]["url"].startswith(f"{DEMO.base}/connect/"))

    async def test_a_named_account_that_is_not_connected_is_asked_for_and_then_served(self) -> None:
        users: list[Any] = []

        def accept(params: Any) -> str:
            users.append(demo.later(0.5, demo.user_opens, params.url, "lena", "continue", "lena-work"))
            return "accept"

        result, asked = await self.call(self.server("lena", account="lena-work"), accept)
        for u in users:
            u.join()
        self.assertEqual(self.text(result), "sandbox says you are lena-work")
        self.assertEqual(len(asked), 1)

    async def test_decline_in_the_client_ends_the_call_with_a_sentence(self) -> None:
        result, asked = await self.call(self.server("fred"), lambda _: "decline")
        self.assertEqual(len(asked), 1)
        self.assertTrue(result.is_error)
        self.assertTrue(self.text(result).endswith("Not connected to sandbox: you chose to decline."), self.text(result))

    async def test_a_user_who_never_finishes_gets_an_answer_after_max_rounds(self) -> None:
        started = time.monotonic()
        result, asked = await self.call(self.server("gwen", max_rounds=2, wait_seconds=1), lambda _: "accept")
        self.assertEqual(len(asked), 2, "one URL request per round, no more")
        self.assertTrue(result.is_error)
        self.assertIn("Still not connected to sandbox", self.text(result))
        self.assertLess(time.monotonic() - started, 20)
        self.assertEqual(DEFAULT_MAX_ROUNDS, 3)


class McpProxyHelperTest(McpHelperTest):
    """proxy_or_input_required in a tool of an MCPServer, called by the official SDK client: the
    same rounds, the provider's answer through the proxy at the end."""

    def server(self, subject: str, **kw: Any) -> MCPServer:
        mcp = MCPServer("proxy-helper-test")
        conn = connect()
        self.addAsyncCleanup(conn.aclose)

        @mcp.tool()
        async def whoami_tool(ctx: Context) -> str | InputRequiredResult:
            got = await proxy_or_input_required(conn, ctx, "sandbox", "whoami", subject=subject, **kw)
            if isinstance(got, InputRequiredResult):
                return got
            return f"sandbox says you are {got.json()['sub']}"

        return mcp

    async def test_input_required_the_user_connects_and_the_retry_returns_provider_data(self) -> None:
        users: list[Any] = []

        def accept(params: Any) -> str:
            users.append(demo.later(0.5, demo.user_opens, params.url, "ruth"))
            return "accept"

        mcp = self.server("ruth", subject_token=demo.mcp_token(DEMO.base, "ruth"))
        result, asked = await self.call(mcp, accept)
        for u in users:
            u.join()
        self.assertEqual(self.text(result), "sandbox says you are ruth")
        self.assertFalse(result.is_error)
        self.assertEqual(len(asked), 1)
        self.assertEqual(asked[0]["mode"], "url")
        self.assertTrue(asked[0]["url"].startswith(f"{DEMO.base}/connect/"))
        # Connected: the next call answers at once.
        result, asked = await self.call(mcp, lambda _: "decline")
        self.assertEqual((self.text(result), asked), ("sandbox says you are ruth", []))

    async def test_a_named_account_that_is_not_connected_is_asked_for_and_then_served(self) -> None:
        users: list[Any] = []

        def accept(params: Any) -> str:
            users.append(demo.later(0.5, demo.user_opens, params.url, "sven", "continue", "sven-work"))
            return "accept"

        result, asked = await self.call(self.server("sven", account="sven-work"), accept)
        for u in users:
            u.join()
        self.assertEqual(self.text(result), "sandbox says you are sven-work")
        self.assertEqual(len(asked), 1)


class PackagingTest(unittest.TestCase):
    def test_the_package_is_typed(self) -> None:
        import importlib.resources

        self.assertTrue(importlib.resources.files("mcp_connect_client").joinpath("py.typed").is_file())
        self.assertEqual({MCP_2025_11_25, MCP_2026_07_28}, {"2025-11-25", "2026-07-28"})


if __name__ == "__main__":
    unittest.main()
