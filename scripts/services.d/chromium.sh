#!/usr/bin/env bash
# Headless Chromium for the HTML report's browser tests (tests/core/test_report_browser.py).
# Installs Debian's `chromium` when /usr/bin/chromium is missing: idempotent, and quiet
# unless something fails (then apt's output is shown). `apt-get update` runs only when
# apt does not know the package yet.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show chromium >/dev/null 2>&1; then
  if ! $SUDO apt-get update -qq >"$log" 2>&1; then
    cat "$log" >&2
    echo "chromium.sh: apt-get update failed" >&2
    exit 1
  fi
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends chromium >"$log" 2>&1; then
  cat "$log" >&2
  echo "chromium.sh: apt-get install chromium failed" >&2
  exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "chromium.sh: apt-get install chromium did not provide /usr/bin/chromium" >&2
  exit 1
fi
