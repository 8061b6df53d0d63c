// A preload (`node --require`) for a server that listens on $PORT on every interface (the
// everything server): it listens on 127.0.0.1 instead, on a port the system picks, and writes
// that port to the file $PORTFILE. Used by scripts/fidelity and tests/e2e/mcp/everything.rs.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  this.once("listening", () => require("fs").writeFileSync(process.env.PORTFILE, String(this.address().port)));
  const cb = args.find((a) => typeof a === "function");
  return listen.call(this, 0, "127.0.0.1", ...(cb ? [cb] : []));
};
