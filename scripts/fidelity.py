"""The fidelity table's exchanges with the official Python SDK client (issue 31).

Run by scripts/fidelity.js (through scripts/fidelity) with the Python of a virtual environment
holding `mcp` 1.x (protocol 2025-11-25 on both connections) or `mcp` 2.x (which probes
`server/discover` and speaks 2026-07-28 where the server does, else falls back to `initialize`).
Connects once directly to the everything server and once to the engine's /mcp, runs the same
rows as the TypeScript client (the same names, the same arguments) on both at once, and prints
one JSON document: {"client", "protocol": {"direct", "mcp"}, "rows": [{"feature", "direct",
"mcp"}], "notRun": [{"feature", "why"}]}. scripts/fidelity.js compares, applies the expected
outcomes and prints the table.

Environment: DIRECT_URL, MCP_URL, TOKEN, APP, DIRECT_LOG, APP_LOG (as for fidelity.js),
FIDELITY_ONLY (a regular expression on the features), STDIO (the command line of `datanotes mcp`,
as a JSON list: the engine is reached through it instead of /mcp).
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import re
import sys
import time
import urllib.request
from typing import Any

import warnings

import anyio

# The 2.x SDK warns about every 2025-era feature it is asked to use; using them is the point.
warnings.filterwarnings("ignore")

VERSION = importlib.metadata.version("mcp")
V2 = VERSION.startswith("2.")

if V2:
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
else:
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamablehttp_client

    MODERN_PROTOCOL_VERSIONS = ()

APP = os.environ.get("APP", "everything")
LRO = "trigger-long-running-operation"
TEXT_TEMPLATE = "demo://resource/dynamic/text/{resourceId}"
BLOB_TEMPLATE = "demo://resource/dynamic/blob/{resourceId}"
DOC = "demo://resource/static/document/features.md"
GZ_DATA = "data:text/plain;base64," + base64.b64encode(b"fidelity: the same bytes both ways\n" * 8).decode()
LINK_ROW = "tool gzip-file-as-resource (resource link)"
ROOTS = [{"uri": "file:///tmp/fidelity", "name": "fidelity"}]
# Rows the TypeScript client runs that this one does not, and why.
NOT_RUN = {
    "JSON numbers (integers stay integers)": "measured with the TypeScript client's bytes only",
    "tasks: simulate-research-query (taskSupport required)": "the Python SDK's task API is experimental (1.x, deprecated) or an extension (2.x) it does not ship; measured with the TypeScript client, and the tasks extension of 2026-07-28 with raw requests in tests/e2e/mcp/everything.rs",
    "tasks: simulate-research-query with elicitation (input_required)": "as above",
    "tasks: trigger-sampling-request-async (the client's task)": "as above",
    "tasks: trigger-elicitation-request-async (the client's task)": "as above",
}


def rewrite(uri: str) -> str:
    i = uri.find("://")
    return uri if i < 0 else f"{uri[: i + 3]}{APP}/{uri[i + 3 :]}"


def unrewrite(text: str) -> str:
    return re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://)" + re.escape(APP) + "/", r"\1", text)


def dump(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if isinstance(v, (list, tuple)):
        return [dump(x) for x in v]
    if isinstance(v, dict):
        return {k: dump(x) for k, x in v.items()}
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json", by_alias=True, exclude_none=True)
    return str(v)


def error_of(e: BaseException) -> dict:
    # An exception group from a task group: its first leaf.
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    err = getattr(e, "error", None)
    code = getattr(err, "code", None) if err is not None else getattr(e, "code", None)
    data = getattr(err, "data", None) if err is not None else None
    out = {"code": code, "message": str(getattr(err, "message", None) or e) or type(e).__name__}
    if data is not None:
        out["data"] = dump(data)
    return {"error": out}


def read_log(path: str | None) -> list[dict]:
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def value_for(s: dict) -> Any:
    if "default" in s:
        return s["default"]
    if s.get("enum"):
        return s["enum"][0]
    if s.get("oneOf"):
        return s["oneOf"][0].get("const")
    t = s.get("type")
    if t == "boolean":
        return True
    if t == "integer":
        return max(s.get("minimum", 7), 7)
    if t == "number":
        return max(s.get("minimum", 2.5), 2.5)
    if t == "array":
        it = s.get("items") or {}
        return [(it.get("enum") or [None])[0] or ((it.get("anyOf") or it.get("oneOf") or [{}])[0].get("const")) or "one"]
    return {"email": "ada@example.com", "uri": "https://example.com/ada", "date": "1815-12-10", "date-time": "1815-12-10T12:00:00Z"}.get(s.get("format"), "Ada")


class Side:
    """One connection (direct or through /mcp) and what it received."""

    def __init__(self, name: str, url: str, headers: dict[str, str], log: str | None):
        self.name, self.url, self.headers, self.log = name, url, headers, log
        self.logs: list[dict] = []
        self.updated: list[str] = []
        self.sampling: list[dict] = []
        self.elicitation: list[dict] = []
        self.roots = list(ROOTS)
        self.roots_asked = 0
        self.resources_changed = 0
        self.engine_ops: set[str] = set()
        self.tools: dict[str, dict] = {}
        self.log_start = len(read_log(log))
        self.state: dict[str, Any] = {}

    def uri(self, u: str) -> str:
        return rewrite(u) if self.name == "mcp" else u

    # Callbacks -----------------------------------------------------------------------------
    async def on_sampling(self, ctx: Any, params: Any) -> Any:
        p = dump(params)
        self.sampling.append(p)
        text = ((p.get("messages") or [{}])[0].get("content") or {}).get("text", "")
        return types.CreateMessageResult(role="assistant", model="fidelity-model", stopReason="endTurn",
                                         content=types.TextContent(type="text", text=f"sampled: {text}"))

    async def on_elicit(self, ctx: Any, params: Any) -> Any:
        p = dump(params)
        self.elicitation.append(p)
        if p.get("mode") == "url":
            return types.ElicitResult(action="accept")
        props = (p.get("requestedSchema") or {}).get("properties") or {}
        return types.ElicitResult(action="accept", content={k: value_for(s) for k, s in props.items()})

    async def on_roots(self, ctx: Any) -> Any:
        self.roots_asked += 1
        return types.ListRootsResult(roots=[types.Root(uri=r["uri"], name=r["name"]) for r in self.roots])

    async def on_log(self, params: Any) -> None:
        self.logs.append(dump(params))

    async def on_message(self, message: Any) -> None:
        m = getattr(message, "root", message)
        method = getattr(m, "method", None)
        if method == "notifications/resources/updated":
            self.updated.append(str(m.params.uri))
        elif method == "notifications/resources/list_changed":
            self.resources_changed += 1

    # Connection ----------------------------------------------------------------------------
    def stdio(self) -> Any:
        """Through `datanotes mcp` (stdio) if STDIO names it (the command line, as JSON)."""
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        cmd = json.loads(os.environ["STDIO"])
        errlog = open(os.devnull, "w")  # noqa: SIM115 (open while the client runs)
        return stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:]), errlog=errlog)

    async def connect(self, stack: Any) -> None:
        over_stdio = self.name == "mcp" and os.environ.get("STDIO")
        if V2:
            http = create_mcp_http_client(headers=self.headers)
            transport = self.stdio() if over_stdio else streamable_http_client(self.url, http_client=http)
            self.client = Client(transport,
                                 sampling_callback=self.on_sampling, elicitation_callback=self.on_elicit,
                                 list_roots_callback=self.on_roots, logging_callback=self.on_log,
                                 message_handler=self.on_message, log_level="debug", read_timeout_seconds=30)
            await stack.enter_async_context(self.client)
            self.session = self.client.session
            self.protocol = self.client.protocol_version
            self.capabilities = dump(self.client.server_capabilities)
            self.instructions = self.client.instructions or ""
        else:
            if over_stdio:
                read, write = await stack.enter_async_context(self.stdio())
            else:
                read, write, _ = await stack.enter_async_context(streamablehttp_client(self.url, headers=self.headers))
            from datetime import timedelta

            self.session = await stack.enter_async_context(ClientSession(
                read, write, read_timeout_seconds=timedelta(seconds=30),
                sampling_callback=self.on_sampling, elicitation_callback=self.on_elicit,
                list_roots_callback=self.on_roots, logging_callback=self.on_log, message_handler=self.on_message))
            init = await self.session.initialize()
            self.client = self.session
            self.protocol = init.protocolVersion
            self.capabilities = dump(init.capabilities)
            self.instructions = init.instructions or ""
        for t in await self.all("tools"):
            self.tools[t["name"]] = t

    @property
    def modern(self) -> bool:
        return self.protocol in MODERN_PROTOCOL_VERSIONS

    # Requests, their errors as values -------------------------------------------------------
    async def request(self, f: Any) -> Any:
        try:
            with anyio.fail_after(20):
                return dump(await f())
        except Exception as e:  # noqa: BLE001 (any failure is an answer to compare)
            r = error_of(e)
            if self.name == "mcp":
                r["error"]["message"] = unrewrite(r["error"]["message"])
            return r

    async def call(self, tool: str, args: dict, progress: Any = None) -> Any:
        return await self.request(lambda: self.client.call_tool(tool, args, progress_callback=progress))

    async def all(self, what: str) -> list:
        out, cursor = [], None
        for _ in range(100):
            if V2:
                f = {"tools": self.client.list_tools, "resources": self.client.list_resources,
                     "resourceTemplates": self.client.list_resource_templates, "prompts": self.client.list_prompts}[what]
                r = dump(await f(cursor=cursor))
            else:
                f = {"tools": self.session.list_tools, "resources": self.session.list_resources,
                     "resourceTemplates": self.session.list_resource_templates, "prompts": self.session.list_prompts}[what]
                r = dump(await f(params=types.PaginatedRequestParams(cursor=cursor)) if cursor else await f())
            out += r.get(what) or []
            cursor = r.get("nextCursor")
            if not cursor:
                break
        return out

    def own(self, items: list, key: str = "uri") -> list:
        """Through /mcp, the engine's own resources and templates are left out."""
        if self.name != "mcp":
            return items
        return [r for r in items if not str(r.get(key, "")).startswith("datanotes://")]

    async def read(self, uri: str) -> Any:
        return await self.request(lambda: self.client.read_resource(uri if V2 else _anyurl(uri)))

    async def complete(self, ref: Any, name: str, value: str, context: dict | None = None) -> Any:
        return await self.request(lambda: self.client.complete(ref, {"name": name, "value": value}, context))

    def ref_prompt(self, name: str) -> Any:
        return types.PromptReference(type="ref/prompt", name=name)

    def ref_resource(self, uri: str) -> Any:
        return types.ResourceTemplateReference(type="ref/resource", uri=uri)


def _anyurl(u: str) -> Any:
    from pydantic import AnyUrl

    return AnyUrl(u)


async def until(pred: Any, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not pred() and time.monotonic() < end:
        await anyio.sleep(0.02)
    return bool(pred())


def is_simulated(m: dict) -> bool:
    return bool(re.search(r"level[- ]message", str(m.get("data")), re.I))


# The rows ------------------------------------------------------------------------------------
def rows(both: dict[str, Side]) -> list[tuple[str, Any, dict]]:
    R: list[tuple[str, Any, dict]] = []

    def row(feature: str, opts: dict | None = None):
        def deco(f: Any) -> Any:
            R.append((feature, f, opts or {}))
            return f
        return deco

    def tool(feature: str, name: str, args: dict, opts: dict | None = None) -> None:
        async def run(s: Side) -> Any:
            if name not in s.tools:
                return {"notListed": name}
            v = await s.call(name, args)
            if (opts or {}).get("twice"):
                await s.call(name, args)
            return v
        R.append((feature, run, opts or {}))

    @row("initialize: server capabilities")
    async def _(s: Side) -> Any:
        return {k: v for k, v in s.capabilities.items() if k in ("completions", "logging", "prompts", "resources", "tools")}

    @row("initialize: the app's instructions")
    async def _(s: Side) -> Any:
        app = both["direct"].instructions.strip()
        return {"containsTheApp": bool(app) and app in s.instructions}

    @row("tools/list")
    async def _(s: Side) -> Any:
        return [t for t in await s.all("tools") if t["name"] not in s.engine_ops]

    tool("tool echo", "echo", {"message": "fidelity ✓"})
    tool("tool get-annotated-message", "get-annotated-message", {"messageType": "error", "includeImage": True})
    tool("tool get-env", "get-env", {})
    tool("tool get-resource-links", "get-resource-links", {"count": 4})
    tool("tool get-resource-reference (Text)", "get-resource-reference", {"resourceType": "Text", "resourceId": 2})
    tool("tool get-resource-reference (Blob)", "get-resource-reference", {"resourceType": "Blob", "resourceId": 3})
    tool("tool get-resource-reference (bad id: isError)", "get-resource-reference", {"resourceType": "Text", "resourceId": 0})
    tool("tool get-structured-content", "get-structured-content", {"location": "Chicago"})
    tool("tool get-sum", "get-sum", {"a": 2, "b": 3.5})
    tool("tool get-sum (bad arguments)", "get-sum", {"a": "two", "b": 3})
    tool("tool get-tiny-image", "get-tiny-image", {})

    @row("initialize: the client's capabilities reach the app")
    async def _(s: Side) -> Any:
        log = read_log(s.log)
        call = next((e for e in log[s.log_start:] if e["dir"] == "in" and e["msg"].get("method") == "tools/call"
                     and (e["msg"].get("params") or {}).get("name") == "echo"), None)
        if not call:
            return {"error": {"message": "no echo call reached the app"}}
        init = next((e for e in log if e["dir"] == "in" and e["msg"].get("method") == "initialize" and e["sid"] == call["sid"]), None)
        return init["msg"]["params"]["capabilities"] if init else {"error": {"message": "no initialize for its session"}}

    @row("progress")
    async def _(s: Side) -> Any:
        progress: list[dict] = []

        async def on(p: float, total: float | None, message: str | None) -> None:
            progress.append({k: v for k, v in {"progress": p, "total": total, "message": message}.items() if v is not None})
        result = await s.call(LRO, {"duration": 0.5, "steps": 5}, on)
        return {"progress": progress, "result": result}

    @row("cancellation")
    async def _(s: Side) -> Any:
        # The SDK's own cancellation: the caller's task is cancelled at the first progress.
        started = time.monotonic()
        outcome = "answered"
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def on(p: float, total: float | None, message: str | None) -> None:
                scope.cancel()

            async def go() -> None:
                nonlocal outcome
                with scope:
                    try:
                        await s.client.call_tool(LRO, {"duration": 8, "steps": 80}, progress_callback=on)
                    except Exception as e:  # noqa: BLE001
                        outcome = f"error: {e}"
                        return
                if scope.cancelled_caught:
                    outcome = "cancelled"
            tg.start_soon(go)
        within = time.monotonic() - started < 1
        await anyio.sleep(1.5)
        log = read_log(s.log)[s.log_start:]
        call = next((e for e in log if e["dir"] == "in" and e["msg"].get("method") == "tools/call"
                     and ((e["msg"].get("params") or {}).get("arguments") or {}).get("steps") == 80), None)
        told = bool(call) and any(e["dir"] == "in" and e["msg"].get("method") == "notifications/cancelled" and e["sid"] == call["sid"]
                                  and (e["msg"].get("params") or {}).get("requestId") == call["msg"].get("id") for e in log)
        nxt = await s.call("echo", {"message": "after the cancel"})
        return {"call": outcome, "cancelledWithin1s": within, "appReceivedCancelled": told,
                "nextCall": ((nxt.get("content") or [{}])[0]).get("text", nxt)}

    @row("sampling (trigger-sampling-request)")
    async def _(s: Side) -> Any:
        if "trigger-sampling-request" not in s.tools:
            return {"notListed": "trigger-sampling-request"}
        mark = len(s.sampling)
        result = await s.call("trigger-sampling-request", {"prompt": "fidelity", "maxTokens": 20})
        return {"requests": s.sampling[mark:], "result": result}

    @row("elicitation, form (trigger-elicitation-request)")
    async def _(s: Side) -> Any:
        if "trigger-elicitation-request" not in s.tools:
            return {"notListed": "trigger-elicitation-request"}
        mark = len(s.elicitation)
        result = await s.call("trigger-elicitation-request", {})
        return {"requests": s.elicitation[mark:], "result": result}

    @row("elicitation, URL (trigger-url-elicitation)")
    async def _(s: Side) -> Any:
        if "trigger-url-elicitation" not in s.tools:
            return {"notListed": "trigger-url-elicitation"}
        mark = len(s.elicitation)
        result = await s.call("trigger-url-elicitation", {"url": "https://example.com/fidelity", "elicitationId": "fidelity-url"})
        return {"requests": s.elicitation[mark:], "result": result}

    @row("elicitation, URL, error -32042 (trigger-url-elicitation)")
    async def _(s: Side) -> Any:
        if "trigger-url-elicitation" not in s.tools:
            return {"notListed": "trigger-url-elicitation"}
        args = {"url": "https://example.com/fidelity-error", "elicitationId": "fidelity-error", "errorPath": True}
        return {"first": await s.call("trigger-url-elicitation", args), "retry": await s.call("trigger-url-elicitation", args)}

    @row("roots (get-roots-list)")
    async def _(s: Side) -> Any:
        if "get-roots-list" not in s.tools:
            return {"notListed": "get-roots-list"}
        return {"result": await s.call("get-roots-list", {}), "clientAsked": s.roots_asked > 0}

    @row("roots: notifications/roots/list_changed")
    async def _(s: Side) -> Any:
        if "get-roots-list" not in s.tools:
            return {"notListed": "get-roots-list"}
        asked = s.roots_asked
        s.roots = ROOTS + [{"uri": "file:///tmp/fidelity-2", "name": "second"}]
        await s.request(lambda: s.client.send_roots_list_changed())
        await until(lambda: s.roots_asked > asked, 2)
        await anyio.sleep(0.2)
        return {"result": await s.call("get-roots-list", {}), "clientAsked": s.roots_asked > asked}

    @row("logging: setLevel and a tool's messages")
    async def _(s: Side) -> Any:
        # At 2026-07-28 the level travels in each request's _meta (log_level), not logging/setLevel.
        set_level = {} if s.modern else await s.request(lambda: s.client.set_logging_level("debug"))
        mark = len(s.logs)
        on = await s.call("toggle-simulated-logging", {})
        await until(lambda: any(is_simulated(m) for m in s.logs[mark:]), 2)
        off = await s.call("toggle-simulated-logging", {})
        msg = next((m for m in s.logs[mark:] if is_simulated(m)), None)
        told = any(e["dir"] == "in" and e["msg"].get("method") == "logging/setLevel" for e in read_log(s.log)[s.log_start:])
        return {"setLevel": set_level, "appToldLevel": told, "on": on, "off": off,
                "message": {**msg, "level": "<random>", "data": re.sub(r"^\S+(?: level-| )?message", "<level> message", str(msg.get("data")), flags=re.I)} if msg else "none"}

    tool("tool toggle-simulated-logging", "toggle-simulated-logging", {}, {"twice": True})

    @row("logging: messages outside a call")
    async def _(s: Side) -> Any:
        mark = len(s.logs)
        uri = s.uri("demo://resource/static/document/instructions.md")
        if s.modern:
            sub: Any = {"error": {"message": "resources/subscribe is removed at 2026-07-28"}}
        else:
            sub = await s.request(lambda: s.client.subscribe_resource(uri if V2 else _anyurl(uri)))
        await until(lambda: any("Subscribe Resource" in str(m.get("data")) for m in s.logs[mark:]), 2)
        if not s.modern:
            await s.request(lambda: s.client.unsubscribe_resource(uri if V2 else _anyurl(uri)))
        msg = next((m for m in s.logs[mark:] if "Subscribe Resource" in str(m.get("data"))), None)
        return {"subscribe": sub, "message": {**msg, "data": re.sub(r" from session .*", "", str(msg.get("data")))} if msg else "none"}

    @row("resources/list")
    async def _(s: Side) -> Any:
        return await s.request(lambda: _own(s, "resources", "uri"))

    @row("resources/read (every listed resource)")
    async def _(s: Side) -> Any:
        out = []
        for r in await both["direct"].all("resources"):
            out.append(await s.read(s.uri(r["uri"])))
        return out

    @row("resources/read (from the templates)")
    async def _(s: Side) -> Any:
        return [await s.read(s.uri("demo://resource/dynamic/text/2")), await s.read(s.uri("demo://resource/dynamic/blob/3"))]

    @row("resources/read (unknown resource: error)")
    async def _(s: Side) -> Any:
        return await s.read(s.uri("demo://resource/dynamic/text/0"))

    @row("resources/templates/list")
    async def _(s: Side) -> Any:
        return await s.request(lambda: _own(s, "resourceTemplates", "uriTemplate"))

    @row("resources/subscribe and notifications/resources/updated")
    async def _(s: Side) -> Any:
        uri = s.uri(DOC)
        if s.modern:
            # 2026-07-28: subscriptions/listen with the URI.
            updated: list[str] = []
            try:
                with anyio.fail_after(10):
                    async with s.client.listen(resource_subscriptions=[uri]) as sub:
                        await s.call("toggle-subscriber-updates", {})
                        with anyio.move_on_after(2):
                            async for ev in sub:
                                updated.append(str(getattr(ev, "uri", ev)))
                                break
                        await s.call("toggle-subscriber-updates", {})
                return {"subscribe": {}, "updated": [{"uri": u} for u in sorted(set(updated))], "unsubscribe": {}}
            except Exception as e:  # noqa: BLE001
                return {"subscribe": error_of(e), "updated": [{"uri": u} for u in sorted(set(updated))], "unsubscribe": {}}
        mark = len(s.updated)
        subscribe = await s.request(lambda: s.client.subscribe_resource(uri if V2 else _anyurl(uri)))
        await s.call("toggle-subscriber-updates", {})
        await until(lambda: len(s.updated) > mark, 2)
        unsubscribe = await s.request(lambda: s.client.unsubscribe_resource(uri if V2 else _anyurl(uri)))
        await s.call("toggle-subscriber-updates", {})
        updated = [{"uri": u} for u in sorted(set(s.updated[mark:]))]
        return {"subscribe": subscribe, "updated": updated, "unsubscribe": unsubscribe}

    tool("tool toggle-subscriber-updates", "toggle-subscriber-updates", {}, {"twice": True})

    @row("prompts/list")
    async def _(s: Side) -> Any:
        # Through /mcp, prompts the app does not list (the engine's own, if any) are left out.
        async def go() -> list:
            items = await s.all("prompts")
            if s.name != "mcp":
                return items
            app = {p["name"] for p in await both["direct"].all("prompts")}
            return [p for p in items if p["name"] in app]
        return await s.request(go)

    def prompt(feature: str, name: str, args: dict) -> None:
        async def run(s: Side) -> Any:
            return await s.request(lambda: s.client.get_prompt(name, args))
        R.append((feature, run, {}))
    prompt("prompts/get simple-prompt", "simple-prompt", {})
    prompt("prompts/get args-prompt", "args-prompt", {"city": "Paris", "state": "Texas"})
    prompt("prompts/get completable-prompt", "completable-prompt", {"department": "Sales", "name": "Eve"})
    prompt("prompts/get resource-prompt (embedded resource)", "resource-prompt", {"resourceType": "Text", "resourceId": "2"})

    @row("completion/complete (prompt argument)")
    async def _(s: Side) -> Any:
        return [await s.complete(s.ref_prompt("completable-prompt"), "department", "S"),
                await s.complete(s.ref_prompt("resource-prompt"), "resourceType", "B")]

    @row("completion/complete (prompt argument, with context)")
    async def _(s: Side) -> Any:
        return await s.complete(s.ref_prompt("completable-prompt"), "name", "", {"department": "Engineering"})

    @row("completion/complete (resource template)")
    async def _(s: Side) -> Any:
        return [await s.complete(s.ref_resource(s.uri(TEXT_TEMPLATE)), "resourceId", "3"),
                await s.complete(s.ref_resource(s.uri(BLOB_TEMPLATE)), "resourceId", "x")]

    tool("tool gzip-file-as-resource (embedded resource)", "gzip-file-as-resource",
         {"name": "fidelity-embedded.txt.gz", "data": GZ_DATA, "outputType": "resource"}, {"sequential": True})

    @row(LINK_ROW, {"sequential": True})
    async def _(s: Side) -> Any:
        mark = s.resources_changed
        result = await s.call("gzip-file-as-resource", {"name": "fidelity-link.txt.gz", "data": GZ_DATA, "outputType": "resourceLink"})
        link = next((c.get("uri") for c in result.get("content") or [] if c.get("type") == "resource_link"), None)
        await until(lambda: s.resources_changed > mark, 1.5)
        s.state["listChanged"] = s.resources_changed > mark
        s.state["read"] = await s.read(link) if link else {"error": {"message": "no link"}}
        return result

    @row("notifications/resources/list_changed", {"needs": LINK_ROW})
    async def _(s: Side) -> Any:
        return {"received": s.state.get("listChanged", False)}

    @row("resources/read of a session resource (a tool's link)", {"needs": LINK_ROW})
    async def _(s: Side) -> Any:
        return s.state.get("read")

    return R


async def _own(s: Side, what: str, key: str) -> list:
    return s.own(await s.all(what), key)


async def main() -> None:
    env = os.environ
    only = re.compile(env["FIDELITY_ONLY"]) if env.get("FIDELITY_ONLY") else None
    both = {
        "direct": Side("direct", env["DIRECT_URL"], {}, env.get("DIRECT_LOG")),
        "mcp": Side("mcp", env["MCP_URL"], {"Authorization": f"Bearer {env['TOKEN']}"}, env.get("APP_LOG")),
    }
    req = urllib.request.Request(env["MCP_URL"].rsplit("/mcp", 1)[0] + "/datanotes/operations/",
                                 headers={"Authorization": f"Bearer {env['TOKEN']}"})
    ops = json.load(urllib.request.urlopen(req))
    both["mcp"].engine_ops = {o["name"] for o in (ops.get("operations", ops) if isinstance(ops, dict) else ops)}
    from contextlib import AsyncExitStack

    over = " over stdio (datanotes mcp)" if env.get("STDIO") else ""
    out: dict[str, Any] = {"client": f"Python SDK {VERSION}{over}", "rows": [], "notRun": []}
    async with AsyncExitStack() as stack:
        for s in both.values():
            await s.connect(stack)
        out["protocol"] = {"direct": both["direct"].protocol, "mcp": both["mcp"].protocol}
        await anyio.sleep(0.5)  # the app asks for the client's roots 350 ms after initialize
        all_rows = rows(both)
        # The rows chosen, with the rows whose exchange they report on.
        chosen = {f for f, _, o in all_rows if not only or only.search(f)}
        chosen |= {o["needs"] for f, _, o in all_rows if f in chosen and o.get("needs")}
        for feature, run, opts in all_rows:
            if feature not in chosen:
                continue
            results: dict[str, Any] = {}

            async def one(name: str) -> None:
                try:
                    with anyio.fail_after(30):
                        results[name] = await run(both[name])
                except Exception as e:  # noqa: BLE001
                    results[name] = error_of(e) if not isinstance(e, TimeoutError) else {"timeout": True}
            if opts.get("sequential"):
                await one("direct")
                await one("mcp")
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(one, "direct")
                    tg.start_soon(one, "mcp")
            out["rows"].append({"feature": feature, "direct": results["direct"], "mcp": results["mcp"]})
        for feature, why in NOT_RUN.items():
            if not only or only.search(feature):
                out["notRun"].append({"feature": feature, "why": why})
        print(json.dumps(out), flush=True)
        # Closing sessions that still have a stream open can take long: the answer is out.
        os._exit(0)


if __name__ == "__main__":
    try:
        anyio.run(main)
    except BaseException as e:  # noqa: BLE001
        print(json.dumps({"client": f"Python SDK {VERSION}", "fatal": json.dumps(error_of(e))[:2000]}), flush=True)
        sys.exit(0)
