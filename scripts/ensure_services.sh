#!/usr/bin/env bash
# Install the system packages the test suite needs, when missing.
# Each scripts/services.d/*.sh checks for one thing and installs it (apt-get as root).
set -euo pipefail
cd "$(dirname "$0")"
shopt -s nullglob
for script in services.d/*.sh; do
  bash "$script"
done
