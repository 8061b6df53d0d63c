"""A remote app written with the official MCP Python SDK 2.x's own server (`MCPServer`), for
tests/e2e/apps/python_app.rs. It speaks 2026-07-28 to a client that asks for it and 2025-11-25 to one
that initializes (the engine does). Serves streamable HTTP on 127.0.0.1, on a port the system
picks, and prints `listening on <port>` once it listens.
"""

import socket
import sys
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import Elicit, ListRoots, MCPServer, Resolve
from mcp_types import Completion, ListRootsResult, ResourceTemplateReference
from pydantic import BaseModel

app = MCPServer("pyapp", instructions="pyapp: the Python SDK's own server.")


@app.tool()
def add(a: int, b: int) -> dict:
    """Adds two integers."""
    return {"sum": a + b, "priority": 1}


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@app.tool()
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    """Greets the user, whose name it asks."""
    return f"Hello, {who.name}!"


def roots() -> ListRoots:
    return ListRoots()


@app.tool()
def where(found: Annotated[ListRootsResult, Resolve(roots)]) -> str:
    """Names the client's roots."""
    return ", ".join(str(r.uri) for r in found.roots) or "no roots"


@app.resource("file:///a.txt", mime_type="text/plain")
def a() -> str:
    return "alpha"


@app.resource("notes://{name}", mime_type="text/markdown")
def note(name: str) -> str:
    return f"# {name}"


@app.prompt()
def topic(subject: str) -> str:
    """Asks about a subject."""
    return f"Tell me about {subject}."


@app.completion()
async def complete(ref, argument, context):
    names = ["apple", "apricot", "banana"]
    if isinstance(ref, ResourceTemplateReference) or argument.name == "subject":
        return Completion(values=[n for n in names if n.startswith(argument.value)])
    return None


sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
# Listen before the port is announced: uvicorn starts slowly under load, and a connection made
# before it listens would be refused (the engine's first probe then backs off for 10 s).
sock.listen(128)
print(f"listening on {sock.getsockname()[1]}", flush=True)
server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), log_level="warning"))
server.run(sockets=[sock])
