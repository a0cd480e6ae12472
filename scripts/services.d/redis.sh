#!/usr/bin/env bash
# Make sure redis-server and redis-cli are on PATH: the Redis store's tests start their
# own server on a free loopback port, and a local cluster (redis-cli --cluster create).
# Idempotent and quiet: does nothing when both are already there.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi

fail() {
  echo "scripts/services.d/redis.sh: $*" >&2
  exit 1
}

if ! command -v apt-get >/dev/null 2>&1; then
  fail "redis-server or redis-cli is missing and apt-get is not available: install redis-server and redis-tools (or valkey) by hand"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || fail "redis-server or redis-cli is missing; installing it needs root (or sudo)"
  SUDO="sudo -n"
fi

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# Refresh the package lists only when they do not know the package yet.
if ! apt-cache show redis-server >/dev/null 2>&1; then
  $SUDO apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; fail "apt-get update failed"; }
fi
# redis-tools holds redis-cli (redis-server depends on it; named for a clear intent).
$SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools >"$log" 2>&1 \
  || { cat "$log" >&2; fail "apt-get install redis-server redis-tools failed"; }

for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null 2>&1 \
    || fail "$tool was installed but is not on PATH (looked in: $PATH)"
done
