#!/usr/bin/env bash
# Make sure the coding-agent CLIs whose hooks loopwatch guards are on PATH: Claude Code,
# Gemini CLI, Codex, GitHub Copilot CLI, OpenCode and Qwen Code, from npm (the end-to-end hook tests run them against a fake
# model server on 127.0.0.1). Idempotent and quiet: installs only what is missing.
# Versions are the ones the hook protocols were checked against
# (../shared/notes/coding-cli-hooks.md); override with LOOPWATCH_CLI_VERSIONS=latest.
set -euo pipefail

fail() {
  echo "scripts/services.d/coding-clis.sh: $*" >&2
  exit 1
}

# command -> npm package@version
declare -A PACKAGES=(
  [claude]="@anthropic-ai/claude-code@2.1.197"
  [gemini]="@google/gemini-cli@0.61.0"
  [codex]="@openai/codex@0.169.0"
  [copilot]="@github/copilot@1.0.102"
  [opencode]="opencode-ai@1.18.33"
  [qwen]="@qwen-code/qwen-code@0.15.10"
)
COMMANDS=(claude gemini codex copilot opencode qwen)

missing=()
for cmd in "${COMMANDS[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1; then
    spec="${PACKAGES[$cmd]}"
    if [ "${LOOPWATCH_CLI_VERSIONS:-}" = "latest" ]; then
      spec="${spec%@*}"
    fi
    missing+=("$spec")
  fi
done
# Copilot CLI unpacks its binary (about 235 MB) into $XDG_CACHE_HOME/copilot on first
# start: done here, once, rather than inside the first test that starts it.
warm_copilot() {
  if command -v copilot >/dev/null 2>&1 \
    && [ ! -d "${XDG_CACHE_HOME:-$HOME/.cache}/copilot/pkg" ]; then
    copilot --version >/dev/null 2>&1 || fail "copilot --version failed"
  fi
}

if [ "${#missing[@]}" -eq 0 ]; then
  warm_copilot
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || fail "apt-get update failed"
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null 2>&1 \
      || fail "apt-get install nodejs npm failed"
  else
    fail "npm is missing: install Node.js 20+ and npm, then run this again"
  fi
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
npm install --global --no-fund --no-audit --loglevel=error "${missing[@]}" >"$log" 2>&1 \
  || { cat "$log" >&2; fail "npm install ${missing[*]} failed"; }

for cmd in "${COMMANDS[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 \
    || fail "$cmd was installed but is not on PATH (npm prefix: $(npm prefix -g))"
done
warm_copilot
