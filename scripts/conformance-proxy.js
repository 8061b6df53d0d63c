// A tiny HTTP proxy for scripts/conformance: the MCP conformance suite cannot send an
// Authorization header, so this adds the headers in $HDRS (one "Name: value" a line) to every
// request and passes everything else through unchanged, Host and Origin included, so the
// dns-rebinding-protection scenario still reaches the server as the suite sent it.
// Forwards to $TARGET (scheme, host and port; the request's own path is kept) and writes the
// port it listens on (127.0.0.1) to $PORTFILE.
"use strict";
const http = require("http");
const fs = require("fs");
const t = new URL(process.env.TARGET);
const extra = (process.env.HDRS || "")
  .split("\n")
  .filter(Boolean)
  .map((h) => [h.slice(0, h.indexOf(":")).trim().toLowerCase(), h.slice(h.indexOf(":") + 1).trim()]);
const srv = http.createServer((req, res) => {
  const headers = { ...req.headers };
  for (const [k, v] of extra) headers[k] = v;
  const up = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  up.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502);
    res.end(String(e));
  });
  req.pipe(up);
});
srv.listen(0, "127.0.0.1", () => fs.writeFileSync(process.env.PORTFILE, String(srv.address().port)));
