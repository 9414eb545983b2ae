#!/usr/bin/env bash
# Headless Chromium for the page tests of `groupwise view` (tests/test_view_browser.py): the
# Debian package `chromium`, installed only where no chromium is on PATH. scripts/test.sh runs
# this in the background of the verl lane, which waits for it before the page tests.
# Measured on this machine (2 cores, Debian 12, 2026-12-07): apt-get update and the install from
# an empty apt cache took 12 s (apt-get update included); a no-op once installed.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium
command -v chromium
