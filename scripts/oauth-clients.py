"""The official Python SDK's OAuth client against /mcp (run by scripts/oauth-clients with each
virtual environment's python, mcp 1.30.0 and 2.3.0; env BASE, OWNER_TOKEN, ACCESS_TTL, RESULTS as for
scripts/oauth-clients.js, plus NODE, the Node that runs scripts/oauth-clients.js --consent).

mcp.client.auth.OAuthClientProvider as the httpx auth of streamable_http_client: connect -> 401
-> discovery -> dynamic registration (a confidential client, client_secret_post, where the
TypeScript run registers a public one) -> redirect_handler, which hands the authorization URL to
the headless Chromium driver (scripts/oauth-clients.js --consent: owner sign-in, read tools only,
Allow) -> the browser lands on a local callback server, whose code and state callback_handler
returns -> token exchange -> initialize, tools/list, tools/call; a write tool is refused; after the
access token expires the SDK refreshes it before the next call.
"""

import asyncio
import importlib.metadata
import json
import os
import sys
import time
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlparse

from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

# mcp 1.x (the 2025 protocol versions; ClientSession over the transport's streams) or 2.x
# (2026-07-28 where the server speaks it; Client; the callback handler also returns iss, which
# the SDK checks itself).
VERSION = importlib.metadata.version("mcp")
V2 = VERSION.startswith("2.")
if V2:
    from mcp import Client
    from mcp.shared.auth import AuthorizationCodeResult
else:
    from mcp import ClientSession

TIMEOUT = 30.0
BASE = os.environ.get("BASE", "").rstrip("/")
TTL = float(os.environ.get("ACCESS_TTL", "3"))
GRANT = ["list_tables", "select_rows"]
CLIENT = f"python {VERSION}"
HERE = os.path.dirname(os.path.abspath(__file__))

failed = 0


def record(step: str, ok: bool, detail: str = "") -> None:
    global failed
    if not ok:
        failed += 1
    line = {"client": CLIENT, "step": step, "ok": ok, "detail": detail}
    if os.environ.get("RESULTS"):
        with open(os.environ["RESULTS"], "a") as f:
            f.write(json.dumps(line) + "\n")
    print(f"{'PASS' if ok else 'FAIL'} [{CLIENT}] {step}{f' ({detail})' if detail else ''}", flush=True)


class Fail(Exception):
    pass


def check(cond: object, what: str) -> None:
    if not cond:
        raise Fail(what)


def short(v: object, n: int = 300) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= n else s[:n] + "..."


class MemoryStorage(TokenStorage):
    """The SDK's TokenStorage, in memory; keeps every token set it was given."""

    def __init__(self) -> None:
        self.saved: list[OAuthToken] = []
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.saved[-1] if self.saved else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.saved.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Callback:
    """The redirect_uri: a local HTTP server on 127.0.0.1:<free port>/callback."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/callback"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            u = urlparse(target)
            if u.path != "/callback":
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            else:
                body = b"<!doctype html><title>done</title><p>You may close this window."
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )
                self.queue.put_nowait({k: v[0] for k, v in parse_qs(u.query).items()})
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, IndexError):
            pass
        finally:
            writer.close()

    async def next(self) -> dict[str, str]:
        try:
            return await asyncio.wait_for(self.queue.get(), TIMEOUT)
        except asyncio.TimeoutError:
            raise Fail(f"timed out after {TIMEOUT:.0f} s: the redirect to the callback server") from None

    def close(self) -> None:
        if self.server:
            self.server.close()


async def drive_consent(url: str) -> dict[str, object]:
    """Runs the headless Chromium driver (scripts/oauth-clients.js --consent) on `url`."""
    env = dict(os.environ, AUTH_URL=url, GRANT=",".join(GRANT), DECISION="allow")
    proc = await asyncio.create_subprocess_exec(
        os.environ.get("NODE", "node"),
        os.path.join(HERE, "oauth-clients.js"),
        "--consent",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise Fail("timed out after 90 s: the consent page in Chromium") from None
    lines = out.decode().strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise Fail(f"the consent driver said nothing useful (exit {proc.returncode}): {short(err.decode())}") from None
    if not answer.get("ok"):
        raise Fail(f"consent in Chromium: {answer.get('error')}")
    return answer


async def owner_select(args: dict) -> list:
    """`select_rows` with the owner's token over HTTP: the rows."""
    headers = {"Authorization": f"Bearer {os.environ['OWNER_TOKEN']}"}
    async with create_mcp_http_client(headers=headers) as http:
        r = await http.post(f"{BASE}/datanotes/select_rows/", json=args)
    check(r.status_code == 200, f"the owner's select_rows answered {r.status_code}: {short(r.text)}")
    return r.json()["rows"]


def tool_error(result) -> str | None:
    if getattr(result, "isError", None) or getattr(result, "is_error", None):
        return " ".join(getattr(c, "text", "") for c in result.content)
    return None


def structured(result) -> object:
    return getattr(result, "structuredContent", None) or getattr(result, "structured_content", None)


@asynccontextmanager
async def connect(url: str, http_client):
    """An MCP session on `url` with the SDK of this version: (session, server, protocol)."""
    if V2:
        client = Client(streamable_http_client(url, http_client=http_client), read_timeout_seconds=TIMEOUT)
        async with client:
            info = client.server_info
            yield client, f"{info.name} {info.version}" if info else "?", client.protocol_version
    else:
        async with streamable_http_client(url, http_client=http_client) as (read, write, _):
            async with ClientSession(read, write) as session:
                init = await asyncio.wait_for(session.initialize(), 120)
                yield session, f"{init.serverInfo.name} {init.serverInfo.version}", init.protocolVersion


async def main() -> None:
    started = time.monotonic()
    check(BASE and os.environ.get("OWNER_TOKEN"), "BASE and OWNER_TOKEN are needed")
    cb = Callback()
    await cb.start()
    storage = MemoryStorage()
    seen: dict[str, object] = {}

    async def redirect_handler(url: str) -> None:
        seen["auth_url"] = url
        seen["redirects"] = int(seen.get("redirects", 0)) + 1
        t0 = time.monotonic()
        seen["consent"] = await drive_consent(url)
        seen["consent_ms"] = int((time.monotonic() - t0) * 1000)

    async def callback_handler():
        q = await cb.next()
        seen["callback"] = q
        if "code" not in q:
            raise Fail(f"the callback has no code: {q}")
        if V2:
            return AuthorizationCodeResult(code=q["code"], state=q.get("state"), iss=q.get("iss"))
        return q["code"], q.get("state")

    provider = OAuthClientProvider(
        server_url=f"{BASE}/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="datanotes oauth-clients (Python SDK)",
            redirect_uris=[cb.url],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_post",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        **({} if V2 else {"timeout": 120.0}),
    )

    step = "connect -> 401 -> discovery -> registration -> consent in Chromium -> token"
    # How the SDK authenticates to the token endpoint: every request the client sends, watched.
    token_auth: list[str] = []

    async def watch(request) -> None:
        if str(request.url).startswith(f"{BASE}/oauth/token"):
            body = request.content.decode(errors="replace")
            basic = request.headers.get("authorization", "").lower().startswith("basic ")
            token_auth.append("basic" if basic else "post" if "client_secret=" in body else "none")

    http_client = create_mcp_http_client(auth=provider)
    http_client.event_hooks["request"].append(watch)

    async def flow() -> None:
        nonlocal step
        async with connect(f"{BASE}/mcp", http_client) as (session, server, protocol):
            c = storage.client
            check(c and c.client_id, "the SDK registered no client")
            check(c.client_secret, "the registration returned no client_secret for a client_secret_post client")
            check(token_auth == ["post"], f"the SDK's token requests authenticated as {token_auth}; registered client_secret_post")
            check(storage.saved and storage.saved[-1].refresh_token, "no tokens, or no refresh_token")
            q = seen.get("callback", {})
            check(q.get("iss") == (provider.context.oauth_metadata and str(provider.context.oauth_metadata.issuer).rstrip("/")),
                  f"the redirect's iss is {q.get('iss')!r}, the issuer {provider.context.oauth_metadata and provider.context.oauth_metadata.issuer}")
            tok = storage.saved[-1]
            record(
                step,
                True,
                f"client_secret_post client {c.client_id}; consent {seen.get('consent_ms')} ms; "
                f"state checked by the SDK, iss {q.get('iss')}; expires_in {tok.expires_in}; "
                f"server {server}, protocol {protocol}",
            )

            step = "tools/list shows only the granted tools"
            tools = await asyncio.wait_for(session.list_tools(), TIMEOUT)
            names = sorted(t.name for t in tools.tools)
            check(names == sorted(GRANT), f"tools/list answered {', '.join(names)}; granted {', '.join(GRANT)}")
            record(step, True, ", ".join(names))

            step = "tools/call select_rows succeeds"
            r = await asyncio.wait_for(session.call_tool("select_rows", {"table": "personal.tasks.items"}), TIMEOUT)
            check(not tool_error(r), f"select_rows failed: {tool_error(r)}")
            record(step, True, short(json.dumps(structured(r)) if structured(r) else "ok", 80))

            step = "a write tool (insert_row) is refused"
            title = f"written through OAuth ({CLIENT})"
            r = await asyncio.wait_for(
                session.call_tool("insert_row", {"table": "personal.tasks.items", "values": {"title": title}}),
                TIMEOUT,
            )
            # The refusal is the tool's answer (isError), naming the tool: not a transport error.
            err = tool_error(r)
            check(
                err and "may not call the tool insert_row" in err,
                f"insert_row was not refused as a tool it may not call: {short(r.model_dump(), 300)}",
            )
            rows = await owner_select(
                {"table": "personal.tasks.items", "where": [{"column": "title", "op": "=", "value": title}]}
            )
            check(rows == [], f"the refused insert_row wrote a row: {short(rows)}")
            record(step, True, short(f"isError: {err}; no row written", 160))

            step = f"after the access token expires ({TTL:g} s) the SDK refreshes it and the call succeeds"
            before = len(storage.saved)
            old = storage.saved[-1]
            await asyncio.sleep(TTL + 1.5)
            r = await asyncio.wait_for(session.call_tool("list_tables", {}), TIMEOUT)
            check(not tool_error(r), f"list_tables failed after expiry: {tool_error(r)}")
            now = storage.saved[-1]
            check(len(storage.saved) > before and now.access_token != old.access_token, "no new access token was stored")
            check(now.refresh_token and now.refresh_token != old.refresh_token, "the refresh token did not rotate")
            check(seen.get("redirects") == 1, "the SDK went through consent again instead of refreshing")
            check(token_auth == ["post", "post"], f"the SDK's token requests authenticated as {token_auth}")
            record(step, True, f"set_tokens called {len(storage.saved) - before} time(s); new access and refresh tokens; token requests: {', '.join(token_auth)}")

    try:
        await asyncio.wait_for(flow(), 240)
    except Fail as e:
        record(step, False, str(e))
    except BaseException as e:  # noqa: BLE001 - every failure is a row of the table
        # anyio wraps errors in exception groups: show the innermost ones.
        inner = e
        while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
            inner = inner.exceptions[0]
        msg = str(inner) if isinstance(inner, Fail) else f"{type(inner).__name__}: {inner}"
        if isinstance(e, asyncio.TimeoutError):
            msg = "timed out after 240 s"
        record(step, False, short(msg, 600))
    finally:
        cb.close()
    print(f"python: {f'{failed} failure(s)' if failed else 'all passed'} in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(1 if failed else 0)
