"""An OTLP/HTTP receiver for tests/e2e/telemetry/ (otlp_metrics.rs, sampling.rs): each POST to
/v1/metrics or /v1/traces (http/protobuf or http/json) is decoded with the OpenTelemetry
project's own generated classes (PyPI `opentelemetry-proto`: `ExportMetricsServiceRequest`,
`ExportTraceServiceRequest`) and kept; GET /received answers what was received, as JSON (the
protobuf's JSON mapping: IDs in base64), one entry per export. Listens on 127.0.0.1, on a port
the system picks, and prints `listening on <port>`.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
}

received = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        kind = self.headers.get("content-type", "")
        request, response = KINDS.get(self.path, (None, None))
        try:
            if request is None:
                raise ValueError(f"no such path {self.path}")
            req = request()
            if kind.startswith("application/json"):
                json_format.Parse(body, req)
            elif kind.startswith("application/x-protobuf"):
                req.ParseFromString(body)
            else:
                raise ValueError(f"content-type {kind}")
        except Exception as e:  # a malformed export is the test's failure: say why
            self.send_response(400)
            self.end_headers()
            self.wfile.write(str(e).encode())
            return
        with lock:
            received.append(
                {
                    "path": self.path,
                    "contentType": kind,
                    "request": json_format.MessageToDict(req),
                }
            )
        out = response().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        with lock:
            out = json.dumps(received).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
