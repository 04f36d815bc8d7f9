"""Accounts (several per provider) in mcp_connect_client, against a stub transport: what the
requests carry and how the answers, errors and events are read. Needs no demo.

    clients/python/.venv/bin/python -m unittest discover -s clients/python/tests -p 'test_accounts.py' -v
"""

from __future__ import annotations

import json
import unittest
from types import SimpleNamespace
from typing import Any

import httpx2 as httpx

from mcp_connect_client import Account, AccountChoice, Client, ConnectError, Event
from mcp_connect_client.mcp_sdk import token_or_input_required

TOKEN = {
    "access_token": "t",
    "token_type": "Bearer",
    "expires_at": None,
    "scopes": ["api"],
    "connection_id": "c2",
    "account": {"id": "1234", "label": "kate@work.example", "nickname": "Work"},
    "metadata": {},
    "params": {},
    "credential_type": "oauth2",
}
SELECT = {
    "error": "account_selection_required",
    "message": "kate has 2 sandbox accounts: name one with `account` (its id or label)",
    "accounts": [
        {"id": "1", "label": "kate", "nickname": None, "connection_id": "c1", "default": True},
        {"id": "1234", "label": "kate@work.example", "nickname": "Work", "connection_id": "c2", "default": False},
    ],
}


def stub(*answers: httpx.Response) -> tuple[Client, list[dict[str, Any]]]:
    """A client whose calls get `answers` in turn; the JSON bodies it sent are collected."""
    sent: list[dict[str, Any]] = []
    queue = list(answers)

    def handle(req: httpx.Request) -> httpx.Response:
        sent.append(json.loads(req.content) if req.content else {})
        return queue.pop(0)

    return Client("http://connect.test", "k", http=httpx.AsyncClient(transport=httpx.MockTransport(handle))), sent


class AccountRequestsTest(unittest.IsolatedAsyncioTestCase):
    async def test_token_names_the_account_only_when_given_and_reads_the_answer_s_account(self) -> None:
        c, sent = stub(httpx.Response(200, json=TOKEN), httpx.Response(200, json=TOKEN))
        token = await c.token("sandbox", subject="kate", account="Work")
        self.assertEqual(sent[-1], {"provider": "sandbox", "subject": "kate", "account": "Work"})
        self.assertEqual(token.account, Account("1234", "kate@work.example", "Work"))
        await c.token("sandbox", subject="kate")
        self.assertNotIn("account", sent[-1])

    async def test_a_token_from_a_service_before_accounts_has_none(self) -> None:
        c, _ = stub(httpx.Response(200, json={"access_token": "t", "token_type": "Bearer", "connection_id": "c"}))
        self.assertIsNone((await c.token("sandbox", subject="kate")).account)

    async def test_create_elicitation_sends_add_account_only_when_set(self) -> None:
        el = {"id": "e", "url": "http://connect.test/connect/e", "status": "pending", "mcp": {}}
        c, sent = stub(httpx.Response(201, json=el), httpx.Response(201, json=el))
        await c.create_elicitation("sandbox", subject="kate", add_account=True)
        self.assertEqual(sent[-1], {"provider": "sandbox", "subject": "kate", "add_account": True})
        await c.create_elicitation("sandbox", subject="kate")
        self.assertNotIn("add_account", sent[-1])

    async def test_connections_carry_their_account_and_which_is_the_default(self) -> None:
        row = {"id": "c1", "subject": "kate", "provider": "sandbox", "status": "active", "scopes": ["api"],
               "has_refresh_token": True, "account_label": "kate", "created_at": "x", "updated_at": "x"}
        c, _ = stub(httpx.Response(200, json={"connections": [
            row | {"account": {"id": "1", "label": "kate"}, "default": True},
            row | {"id": "c2", "account_label": None, "account": {"id": "", "label": None}, "default": False},
            row | {"id": "c3"},  # a service before accounts
        ]}))
        one, two, old = await c.connections("kate")
        self.assertEqual((one.account, one.default, one.account_label), (Account("1", "kate"), True, "kate"))
        self.assertEqual((two.account, two.default), (Account("", None), False))
        self.assertEqual((old.account, old.default), (None, False))


class AccountErrorsTest(unittest.IsolatedAsyncioTestCase):
    async def test_insufficient_scope_carries_the_missing_scopes(self) -> None:
        c, _ = stub(httpx.Response(403, json={"error": "insufficient_scope", "message": "m", "missing_scopes": ["admin", "write"]}))
        with self.assertRaises(ConnectError) as cm:
            await c.token("sandbox", subject="kate", scopes=["admin", "write"])
        e = cm.exception
        self.assertEqual((e.status, e.missing_scopes, e.is_insufficient_scope), (403, ("admin", "write"), True))
        self.assertEqual((e.needs_account_selection, e.needs_authorization, e.accounts), (False, False, ()))

    async def test_account_selection_required_lists_the_accounts_to_choose_from(self) -> None:
        c, _ = stub(httpx.Response(409, json=SELECT))
        with self.assertRaises(ConnectError) as cm:
            await c.token("sandbox", subject="kate")
        e = cm.exception
        self.assertEqual((e.status, e.needs_account_selection, e.needs_authorization), (409, True, False))
        self.assertEqual(
            e.accounts,
            (
                AccountChoice("1", "kate", None, "c1", True),
                AccountChoice("1234", "kate@work.example", "Work", "c2", False),
            ),
        )
        self.assertEqual(e.missing_scopes, ())

    def test_other_errors_carry_neither_and_odd_entries_are_skipped(self) -> None:
        for body in [
            {"error": "not_connected", "message": "m"},
            {"error": "insufficient_scope", "message": "m", "missing_scopes": None, "accounts": None},
        ]:
            e = ConnectError.from_body(403, body)
            self.assertEqual((e.missing_scopes, e.accounts), ((), ()), body)
        e = ConnectError.from_body(
            409, {"error": "account_selection_required", "message": "m", "accounts": ["x", {"id": "1"}], "missing_scopes": [1, "a"]}
        )
        self.assertEqual((e.accounts, e.missing_scopes), ((AccountChoice("1", None, None, "", False),), ("a",)))


class AccountEventsTest(unittest.TestCase):
    def test_connection_and_completion_events_carry_the_account(self) -> None:
        data = {"client_id": "demo-mcp", "subject": "kate", "provider": "sandbox", "connection_id": "c2"}
        revoked = Event.from_json({"type": "connection.revoked", "timestamp": "t",
                                   "data": data | {"account": {"id": "1234", "label": None, "nickname": "Work"}}})
        self.assertEqual(revoked.data.account, Account("1234", None, "Work"))
        declined = Event.from_json({"type": "elicitation.declined", "timestamp": "t", "data": data | {"status": "declined"}})
        self.assertIsNone(declined.data.account)


class McpHelperAccountTest(unittest.IsolatedAsyncioTestCase):
    """token_or_input_required passes `account` through (a stand-in for the SDK's Context)."""

    ctx: Any = SimpleNamespace(input_responses=None, request_state=None)

    async def test_the_account_reaches_the_token_request(self) -> None:
        c, sent = stub(httpx.Response(200, json=TOKEN))
        got = await token_or_input_required(c, self.ctx, "sandbox", subject="kate", account="Work")
        self.assertEqual(getattr(got, "account", None), Account("1234", "kate@work.example", "Work"))
        self.assertEqual(sent, [{"provider": "sandbox", "subject": "kate", "account": "Work", "elicit": True}])

    async def test_account_selection_required_reaches_the_caller(self) -> None:
        c, _ = stub(httpx.Response(409, json=SELECT))
        with self.assertRaises(ConnectError) as cm:
            await token_or_input_required(c, self.ctx, "sandbox", subject="kate")
        self.assertTrue(cm.exception.needs_account_selection)
        self.assertEqual([a.id for a in cm.exception.accounts], ["1", "1234"])


if __name__ == "__main__":
    unittest.main()
