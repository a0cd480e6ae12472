#!/usr/bin/env bash
# Make sure the reference MCP server the MCP proxy tests run is on PATH:
# @modelcontextprotocol/server-everything (every protocol feature: tools, resources,
# prompts, progress, sampling, logging; over stdio or streamable HTTP), from npm.
# Idempotent and quiet: installs only when missing. Pinned: the pass-through tests
# compare what it answers through `loopwatch mcp` with what it answers directly, and
# a new release must not be met first by CI; override with LOOPWATCH_CLI_VERSIONS=latest.
set -euo pipefail

fail() {
  echo "scripts/services.d/mcp-servers.sh: $*" >&2
  exit 1
}

SPEC="@modelcontextprotocol/server-everything@2026.8.31"
COMMAND="mcp-server-everything"

if command -v "$COMMAND" >/dev/null 2>&1; then
  exit 0
fi
if [ "${LOOPWATCH_CLI_VERSIONS:-}" = "latest" ]; then
  SPEC="${SPEC%@*}"
fi
command -v npm >/dev/null 2>&1 \
  || fail "npm is missing (scripts/services.d/coding-clis.sh installs it): install Node.js 20+"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
npm install --global --no-fund --no-audit --loglevel=error "$SPEC" >"$log" 2>&1 \
  || { cat "$log" >&2; fail "npm install $SPEC failed"; }
command -v "$COMMAND" >/dev/null 2>&1 \
  || fail "$COMMAND was installed but is not on PATH (npm prefix: $(npm prefix -g))"
