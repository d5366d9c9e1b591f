#!/usr/bin/env bash
# Debian's headless Chromium and its WebDriver, for the browser test of `ragzoo report --html`
# (tests/report/test_html_report.py). Idempotent: does nothing when both are installed; installing needs root.
# Prints nothing on stdout; progress goes to stderr.
set -euo pipefail

say() { echo "install_chromium: $*" >&2; }

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    say "chromium/chromedriver are not installed; as root: apt-get install -y chromium chromium-driver"
    exit 1
fi
say "installing Debian's chromium and chromium-driver packages"
# one package-list refresh, only when apt cannot find the package yet (another script may have refreshed it)
if ! apt-cache show chromium-driver >/dev/null 2>&1; then
    apt-get update -qq >&2
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >&2
command -v chromedriver >/dev/null 2>&1 || { say "apt-get ran but no chromedriver is on PATH"; exit 1; }
