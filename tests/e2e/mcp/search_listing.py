"""The official Python SDK's client (1.x) on the search listing (tests/e2e/mcp/search_tools.rs
runs it): connects to URL (with TOKEN), lists the tools, searches, follows
notifications/tools/list_changed, lists again and calls the tool found directly, then through
call_tool. Prints one JSON object of what it saw."""

import json
import os

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client


async def main() -> None:
    changed = anyio.Event()
    count = 0

    async def handler(message) -> None:
        nonlocal count
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            count += 1
            changed.set()

    headers = {"Authorization": f"Bearer {os.environ['TOKEN']}"}
    async with streamablehttp_client(os.environ["URL"], headers=headers) as (read, write, _):
        async with ClientSession(read, write, message_handler=handler) as s:
            await s.initialize()
            before = [t.name for t in (await s.list_tools()).tools]
            found = await s.call_tool("search_tools", {"query": os.environ["QUERY"], "limit": 1})
            names = [t["name"] for t in (found.structuredContent or {}).get("tools", [])]
            with anyio.move_on_after(5):
                await changed.wait()
            after = [t.name for t in (await s.list_tools()).tools]
            tool = names[0] if names else "none"
            text = lambda r: "".join(getattr(c, "text", "") for c in r.content)
            direct = text(await s.call_tool(tool, {}))
            via = text(await s.call_tool("call_tool", {"name": tool, "arguments": {}}))
            print(json.dumps({"before": before, "found": names, "changed": count,
                              "after": after, "direct": direct, "via": via}))


anyio.run(main)
