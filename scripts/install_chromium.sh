#!/usr/bin/env bash
# Debian's chromium for the browser test (tests/test_browser.py). Playwright drives it through
# executable_path=/usr/bin/chromium; `playwright install` cannot download browsers here.
# Idempotent and quiet: does nothing when /usr/bin/chromium exists; prints apt's log only on failure.
# Needs root (or sudo) the first time.
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install_chromium.sh: apt-get could not install chromium (log above)" >&2
    exit 1
fi
echo "installed $(/usr/bin/chromium --version 2>/dev/null)"
