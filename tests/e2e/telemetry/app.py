"""A remote app written with the official MCP Python SDK 2.x's own server (`MCPServer`), for
tests/e2e/telemetry/mod.rs, its spans exported to the OTLP receiver at OTLP_ENDPOINT (its
/v1/traces) by OpenTelemetry's Python SDK. The MCP SDK makes a SERVER span per request, under
the trace context of the request's `params._meta` (the `traceparent` the engine sends). Serves
streamable HTTP on 127.0.0.1, on a port the system picks, and prints `listening on <port>`.
"""

import os
import socket

import uvicorn
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from mcp.server.mcpserver import MCPServer

provider = TracerProvider(resource=Resource.create({"service.name": "pyapp"}))
provider.add_span_processor(
    SimpleSpanProcessor(OTLPSpanExporter(endpoint=os.environ["OTLP_ENDPOINT"] + "/v1/traces"))
)
trace.set_tracer_provider(provider)

app = MCPServer("pyapp")


@app.tool()
def add(a: int, b: int) -> dict:
    """Adds two integers."""
    with trace.get_tracer("pyapp").start_as_current_span("adding"):
        return {"sum": a + b}


sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(f"listening on {sock.getsockname()[1]}", flush=True)
server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), log_level="warning"))
server.run(sockets=[sock])
