"""The real `mcp-connect demo` for the tests: started on a free port with a fresh data folder,
read from its banner, and a user who completes a connect URL by walking its plain HTML forms
(development issuer sign-in, consent, sandbox sign-in, Allow or Decline) over HTTP."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("MCP_CONNECT_BIN") or ROOT / "target" / "debug" / "mcp-connect")


@dataclass
class Demo:
    base: str
    api_key: str
    process: subprocess.Popen[str]
    data_dir: str
    output: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start() -> Demo:
    if not BIN.exists():
        raise RuntimeError(f"mcp-connect binary not found at {BIN}: run `cargo build` or set MCP_CONNECT_BIN")
    data_dir = tempfile.mkdtemp(prefix="mcp-connect-py-client-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_CONNECT_")}
    env["NO_COLOR"] = "1"
    proc = subprocess.Popen(
        [str(BIN), "demo", "--port", "0", "--data-dir", f"{data_dir}/data"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C"):
                done.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    if not done.wait(60) or proc.poll() is not None:
        proc.kill()
        raise RuntimeError("the demo printed no banner:\n" + "".join(lines))
    text = "".join(lines)
    base = re.search(r"mcp-connect demo is running at (\S+)", text)
    key = re.search(r'API key of the MCP server "demo-mcp": (\S+)', text)
    if base is None or key is None:
        proc.kill()
        raise RuntimeError("banner incomplete:\n" + text)
    return Demo(base.group(1), key.group(1), proc, data_dir, text)


def mcp_token(base: str, user: str) -> str:
    """The user's MCP access token from the development issuer (what an MCP client gets by
    signing its user in), for the demo client's `subject_token_audience`."""
    r = httpx.post(f"{base}/dev/issuer/mcp-token", data={"user": user})
    r.raise_for_status()
    return str(r.json()["access_token"])


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((a.get("action", ""), {}))
        elif tag == "input" and self.forms and a.get("type") == "hidden":
            self.forms[-1][1][a.get("name", "")] = a.get("value", "")


def _form(html: str, action_contains: str) -> tuple[str, dict[str, str]]:
    p = _Forms()
    p.feed(html)
    for action, fields in p.forms:
        if action_contains in action:
            return action, fields
    raise AssertionError(f"no form posting to {action_contains!r} on the page:\n{html[:1500]}")


def user_opens(connect_url: str, user: str, choice: str = "continue", sandbox_login: str | None = None) -> str:
    """The user opens the connect URL: signs in at the development issuer, then Continue (sign
    in and Allow at the sandbox, as `sandbox_login`: another name there is another account of
    theirs, by default `user`) or Decline on mcp-connect's consent page. Returns the last page's
    text."""
    base = connect_url.split("/connect/")[0]
    with httpx.Client(follow_redirects=True, headers={"origin": base}, timeout=30) as b:

        def post(page: httpx.Response, action_contains: str, **more: str) -> httpx.Response:
            action, fields = _form(page.text, action_contains)
            r = b.post(urljoin(str(page.url), action), data=fields | more)
            r.raise_for_status()
            return r

        page = b.get(connect_url)
        page.raise_for_status()
        if "/dev/issuer/" in str(page.url):
            page = post(page, "/dev/issuer/", login=user)
        page = post(page, "/connect/", action=choice)
        if choice != "continue":
            return page.text
        page = post(page, "/dev/sandbox/authorize/login", login=sandbox_login or user)
        page = post(page, "/dev/sandbox/authorize/decision", decision="allow")
        if "is connected" not in page.text:
            raise AssertionError(f"not connected after Allow ({page.url}):\n{page.text[:1500]}")
        return page.text


def later(seconds: float, fn: object, *args: object) -> threading.Thread:
    """Runs `fn(*args)` on a thread after `seconds` (a user who takes a moment)."""

    def run() -> None:
        time.sleep(seconds)
        fn(*args)  # type: ignore[operator]

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
